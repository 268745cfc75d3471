"""Public ops: linear (jitmarlin.ops.linear); array interop lives in jitmarlin.jit.arrays."""
