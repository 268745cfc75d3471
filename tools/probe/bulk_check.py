#!/usr/bin/env python3
"""Session 46: the sm80-path kernel with its weights by TMA boxes (KernelSpec.bulk, sm_90) against the
float64 reference on the GPU: poisoned output, both dtypes, Stream-K and whole-tile plans, M and N
not multiples of the tile (a last column tile mostly past N: the box's zero fill), groups of 32 / 64
/ 128, per-channel scales, zero points, 8-bit codes, K-tiles of 256 and 512. GPU only:
    python3 tools/probe/bulk_check.py"""
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
# m, n, k, qtype, group, (tm, tn, tk, stages), whole
CASES = [(16, 57344 // 8, 8192, "uint4b8", 128, (1, 16, 16, 3), False),
         (16, 4096, 14336, "uint4b8", 128, (1, 8, 32, 3), False),
         (13, 6144, 4096, "uint4b8", 128, (1, 4, 32, 5), True),
         (11, 1088, 3072, "uint4b8", 64, (1, 16, 16, 4), False),
         (9, 1536, 2048, "uint4b8", 32, (1, 8, 16, 4), False),
         (16, 2048, 4096, "uint4b8", -1, (1, 16, 32, 2), True),
         (5, 2112, 1024, "uint4", 128, (1, 16, 16, 3), False),
         (16, 1536, 2048, "uint8b128", 128, (1, 8, 16, 3), False),
         (16, 1536, 2048, "float8_e4m3fn", -1, (1, 8, 16, 3), False),
         (40, 1024, 2048, "uint4b8", 128, (3, 16, 16, 3), False)]
for m, n, k, qt, g, (tm, tn, tk, st), whole in CASES:
    w = rng.standard_normal((n, k)) * 0.02
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
        gb = (0 if qt == "uint4" and g < 0 else -1) if g < 0 else g // 16
        spec = KernelSpec("sm80", qt, act, gb, tm, tn, tk, st, whole=whole, bulk=True)
        try:
            y, ref = run_forced(qw, m, act, spec, rng)
        except Exception as e:   # a case this build cannot take is reported, not hidden
            bad += 1
            print(f"check {spec.name:44s} M={m:3d} N={n} K={k}: ERROR {type(e).__name__}: {e}", flush=True)
            continue
        e = rel(y, ref)
        ok = e <= tol[act]
        bad += not ok
        print(f"check {spec.name:44s} M={m:3d} N={n} K={k}: rel {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
print(f"bulk_check: {bad} failed")
