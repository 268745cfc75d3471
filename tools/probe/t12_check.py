#!/usr/bin/env python3
"""Session 39: the wgmma kernel with 192-feature tiles (tn 12, three warpgroups of one 64-feature
slab, 384 threads) against the float64 reference: poisoned output, both dtypes, M not a multiple
of the tile, N not a multiple of 192, half-tile plans in clusters (sums traded by token halves),
whole-tile and Stream-K plans, a zero-point type. GPU only:
    python3 tools/probe/t12_check.py"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))

import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from gpu_cases import rel, run_forced  # noqa: E402
from jitmarlin import planner as P  # noqa: E402
from jitmarlin.api import plan_for  # noqa: E402
from jitmarlin.problem import Problem  # noqa: E402
from jitmarlin.profiles import get_profile  # noqa: E402

prof = get_profile("h100")
rng = np.random.default_rng()
tol = {"float16": 2e-3, "bfloat16": 1e-2}
bad = 0
# m, n, k, qtype, stages, cluster wanted (None: whatever the planner's rule gives)
CASES = [(256, 6144, 4096, "uint4b8", 6), (200, 6144, 4096, "uint4b8", 6), (1024, 6144, 4096, "uint4b8", 4),
         (1000, 6144, 4096, "uint4b8", 6), (300, 3072, 2048, "uint4b8", 4), (256, 4096, 4096, "uint4b8", 6),
         (256, 6144, 4096, "uint4", 6), (136, 1536, 1024, "uint4b8", 6)]
for m, n, k, qt, st in CASES:
    w = rng.standard_normal((n, k)) * 0.02
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, 128, scale_dtype=act)
        p = Problem(m, n, k, act, qt, 128)
        spec = P._deepest_wgmma(prof, p, 8, 12, st, 1)
        spec = P.tail_spec(p, P._half_cluster_spec(prof, p, spec))
        pl = P.plan(prof, p, spec)
        y, ref = run_forced(qw, m, act, spec, rng)
        e = rel(y, ref)
        ok = e <= tol[act]
        bad += not ok
        print(f"check {spec.name:44s} M={m:5d} N={n} K={k} grid {pl.grid} iters {pl.iters} whole {pl.whole}: "
              f"rel {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
print(f"t12_check: {bad} failed")
