"""Kernel families: each holds its spec, its plan rules and the glue to its template; planner.py
chooses among them (pure). Importing this package registers the families' KernelSource with the
store (jitmarlin.jit.sources) and the tuned choices' record kind (jitmarlin.jit.records)."""
from jitmarlin.kernels import moe, source, tuned  # noqa: F401  (registrations)
