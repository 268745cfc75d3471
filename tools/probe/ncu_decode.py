#!/usr/bin/env python3
"""Run jitmarlin.linear a few times per decode shape, for Nsight Compute to profile:
    ncu --clock-control none -k regex:^jm_ --section SpeedOfLight ... python3 tools/probe/ncu_decode.py
Shapes as KxN (default: the decode shapes target (a) is about); M from --m."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from jitmarlin import QuantizedWeight, halves, packing  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="14336x4096,8192x10240,4096x28672,8192x57344,4096x4096")
ap.add_argument("--m", type=int, default=1)
ap.add_argument("--calls", type=int, default=2)
a = ap.parse_args()
rng = np.random.default_rng(1)
for shape in a.shapes.split(","):
    k, n = map(int, shape.split("x"))
    q = rng.integers(0, 16, (n, k), dtype=np.uint8)
    s = halves.to_bits(rng.random((k // 128, n), dtype=np.float32) * 0.02 + 0.002, "float16")
    qw = QuantizedWeight("uint4b8", 128, n, k, packing.pack_int4(q), packing.permute_scales(s),
                         scale_dtype="float16")
    x = cp.asarray(rng.standard_normal((a.m, k)).astype(np.float16))
    for _ in range(a.calls):
        y = jitmarlin.linear(x, qw)
    cp.cuda.Device().synchronize()
    print(shape, "M", a.m, "done", float(y[0, 0]), flush=True)
