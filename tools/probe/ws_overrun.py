#!/usr/bin/env python3
"""Counters past a two-blocks-an-SM plan's workspace (session 19): with pool memory dirtied first,
run a 2 x SMs-block wgmma plan three times on a fresh stream and print the counters of blocks
SMs..2 x SMs - 1 read straight from device memory after each launch (raw, past the counter array
where the workspace is too small), with the error against the float64 reference. Run it from a
tree (PYTHONPATH) to see that tree's workspace."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitmarlin  # noqa: E402
from gpu_cases import rel  # noqa: E402
from jitmarlin import halves, launch  # noqa: E402
from jitmarlin.api import _prepare, _torch_stream  # noqa: E402
from jitmarlin.reference import linear_reference  # noqa: E402
from jitmarlin.spec import KernelSpec  # noqa: E402

sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
with cp.cuda.Device(0), launch.private_stream(0):
    junk = [cp.full(4096, 1 << 20, dtype=cp.int32) for _ in range(8)]
launch.private_stream(0).synchronize()
del junk
rng = np.random.default_rng(1)
qw = jitmarlin.quantize(rng.standard_normal((2112, 8192)) * 0.02, "uint4b8", 128)
spec = KernelSpec("sm90", "uint4b8", "float16", 8, 4, 16, 4, 4, occupancy=2)
m = 64
with torch.cuda.stream(torch.cuda.Stream()):
    x = halves.round_to(rng.standard_normal((m, 8192)), "float16")
    ref = linear_reference(x, qw, None, "float16")
    xs = torch.from_numpy(x).to("cuda", torch.float16)
    lz = _prepare(qw, 0, "float16", m, _torch_stream(torch, 0), spec=spec)
    ws = lz.keep
    print(f"grid {lz.plan.grid}, counters in the workspace: {ws.locks.size}")
    for i in range(3):
        out = torch.full((m, 2112), float("nan"), dtype=torch.float16, device="cuda")
        lz(xs.data_ptr(), 8192, out.data_ptr(), 0)
        torch.cuda.synchronize()
        raw = cp.ndarray((2 * sms,), cp.int32, ws.locks.data)   # no bounds: past the array if small
        past = raw[sms:].get()
        print(f"launch {i}: rel error {rel(out.double().cpu().numpy(), ref):.3e}; counters {sms}..{2 * sms - 1}: "
              f"{int((past != 0).sum())} non-zero, values {sorted(set(past.tolist()))[:8]}")
