#!/usr/bin/env python3
"""Session 40: the mma.sync kernel with K-tiles of 512 (tk 32) against the float64 reference on
the GPU: poisoned output, both dtypes, whole-tile and Stream-K plans, M and N not multiples of the
tile, groups of 32 / 64 / 128 and per-channel scales. GPU only:
    python3 tools/probe/tk32_check.py"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))

import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from gpu_cases import rel, run_forced  # noqa: E402
from jitmarlin.spec import KernelSpec  # noqa: E402

rng = np.random.default_rng()
tol = {"float16": 2e-3, "bfloat16": 1e-2}
bad = 0
# m, n, k, group, (tn, tk, stages), whole
CASES = [(16, 6144, 4096, 128, (4, 32, 4), True), (13, 6144, 4096, 128, (4, 32, 3), True),
         (16, 4096, 14336, 128, (8, 32, 3), False), (11, 10240, 8192, 128, (16, 32, 2), False),
         (16, 1000, 3072, 64, (4, 32, 4), False), (7, 1536, 2048, 32, (8, 32, 4), False),
         (16, 2048, 4096, -1, (16, 32, 2), True)]
for m, n, k, g, (tn, tk, st), whole in CASES:
    w = rng.standard_normal((n, k)) * 0.02
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, "uint4b8", g, scale_dtype=act)
        spec = KernelSpec("sm80", "uint4b8", act, -1 if g < 0 else g // 16, 1, tn, tk, st, whole=whole)
        y, ref = run_forced(qw, m, act, spec, rng)
        e = rel(y, ref)
        ok = e <= tol[act]
        bad += not ok
        print(f"check {spec.name:40s} M={m:3d} N={n} K={k}: rel {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
print(f"tk32_check: {bad} failed")
