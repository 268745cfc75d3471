#!/usr/bin/env python3
"""Session 38: the SS wgmma probe kernels (tools/probe/ss_templates.py), compiled for sm_90a
(registers, spills; no GPU needed) and, with --gpu, run against the float64 reference (poisoned
output, both dtypes, M not a multiple of the tile). Run through variant_bench.py with
JM_PROBE_SS=1 (and without it, for the RS kernels of main):
    JM_PROBE_SS=1 python3 tools/probe/variant_bench.py probe/ss_check.py [--gpu]"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))

import numpy as np  # noqa: E402

from jitmarlin import nvrtc  # noqa: E402
from jitmarlin.render import render  # noqa: E402
from jitmarlin.spec import KernelSpec  # noqa: E402

SPECS = [(16, 8, 4), (8, 8, 6), (16, 8, 6), (8, 8, 4)]     # tm, tn, stages
gpu = "--gpu" in sys.argv
for act in ("float16", "bfloat16"):
    for tm, tn, st in SPECS:
        spec = KernelSpec("sm90", "uint4b8", act, 8, tm, tn, 4, st)
        src = render(spec)
        art = nvrtc.compile_source(src, spec.name, "sm_90a", spec)
        r = art.resources
        print(f"{spec.name:42s} ss={'SS wgmma' in src or 'wgmma_k16_ss(acc' in src} regs {r.get('registers')} "
              f"spills {r.get('spill_stores')}/{r.get('spill_loads')} smem {spec.smem_bytes()}", flush=True)
if gpu:
    import jitmarlin
    from gpu_cases import rel, run_forced

    rng = np.random.default_rng()
    tol = {"float16": 2e-3, "bfloat16": 1e-2}
    bad = 0
    for m, n, k, tm, st in [(300, 4096, 4096, 16, 4), (1000, 6144, 4096, 16, 4), (200, 4096, 2048, 8, 6),
                            (1024, 8192, 8192, 16, 4), (136, 2048, 4096, 8, 4)]:
        w = rng.standard_normal((n, k)) * 0.02
        for act in ("float16", "bfloat16"):
            qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype=act)
            spec = KernelSpec("sm90", "uint4b8", act, 8, tm, 8, 4, st)
            if m % spec.tile_m:
                from jitmarlin.planner import tail_spec
                from jitmarlin.problem import Problem
                spec = tail_spec(Problem(m, n, k, act, "uint4b8", 128), spec)
            y, ref = run_forced(qw, m, act, spec, rng)
            e = rel(y, ref)
            ok = e <= tol[act]
            bad += not ok
            print(f"check {spec.name:42s} M={m:5d} N={n} K={k}: rel {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    print(f"ss_check: {bad} failed")
