#!/usr/bin/env python3
"""jitmarlin.linear and the fp16 cuBLAS GEMM of tools/bench (torch.matmul with W^T) on the same
shapes, a call or two each, for Nsight Compute to compare the two kernels:
    ncu --clock-control none -k "regex:^jm_|nvjet|gemm" --metrics ... python3 tools/probe/ncu_gemm.py
Shapes as KxN, M from --m (comma list); int4 weights, group 128, fp16. --no-cublas: jitmarlin
only (no torch needed)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from jitmarlin import QuantizedWeight, halves, packing  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="4096x28672")
ap.add_argument("--m", default="4096")
ap.add_argument("--calls", type=int, default=1)
ap.add_argument("--no-cublas", action="store_true")
ap.add_argument("--act", default="float16", help="float16 or bfloat16 (bf16: x as a torch tensor)")
a = ap.parse_args()
rng = np.random.default_rng(1)
for shape in a.shapes.split(","):
    k, n = map(int, shape.split("x"))
    q = rng.integers(0, 16, (n, k), dtype=np.uint8)
    s = halves.to_bits(rng.random((k // 128, n), dtype=np.float32) * 0.02 + 0.002, a.act)
    qw = QuantizedWeight("uint4b8", 128, n, k, packing.pack_int4(q), packing.permute_scales(s),
                         scale_dtype=a.act)
    if not a.no_cublas:
        import torch

        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
    for m in map(int, a.m.split(",")):
        x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
        if a.act == "bfloat16":
            import torch

            x = torch.from_dlpack(x).to(torch.bfloat16)
        xt = None if a.no_cublas else torch.from_dlpack(x)
        for _ in range(a.calls):
            y = jitmarlin.linear(x, qw)
            if not a.no_cublas:
                z = torch.matmul(xt, w.t())
        cp.cuda.Device().synchronize()
        print(shape, "M", m, "done", float(y[0, 0]), flush=True)
