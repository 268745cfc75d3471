#!/usr/bin/env python3
"""Repeat one GPU correctness case many times with fresh inputs: for intermittent failures (a race
shows as a patch of wrong outputs; an accuracy edge as a spread-out error just past the tolerance).
    python3 tools/probe/repeat_check.py --tiles 4x16x5x2,4x16x4x2 --n 2112 --k 8192 --m 64,41,150 --iters 20
Tiles are TMxTNxSTAGESxOCCUPANCY of the sm90 kernel; --cases lists act:group pairs (default: fp16 with
groups of 128, bf16 with per-channel scales, as in tests/test_wgmma.py's two-block test)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from gpu_cases import run_forced  # noqa: E402
from jitmarlin.planner import group_blocks  # noqa: E402
from jitmarlin.problem import Problem  # noqa: E402
from jitmarlin.spec import KernelSpec  # noqa: E402

TOL = {"float16": 2e-3, "bfloat16": 1e-2}
ap = argparse.ArgumentParser()
ap.add_argument("--tiles", default="4x16x5x2")
ap.add_argument("--n", type=int, default=2112)
ap.add_argument("--k", type=int, default=8192)
ap.add_argument("--m", default="64,41,150")
ap.add_argument("--cases", default="float16:128,bfloat16:-1")
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--seconds", type=float, default=240)
a = ap.parse_args()
t_end = time.monotonic() + a.seconds
worst, bad, runs = {}, 0, 0
for it in range(a.iters):
    if time.monotonic() > t_end:
        break
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((a.n, a.k)) * 0.02
    for case in a.cases.split(","):
        act, group = case.split(":")
        group = int(group)
        qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
        for t in a.tiles.split(","):
            tm, tn, st, occ = (int(v) for v in t.split("x"))
            spec = KernelSpec("sm90", "uint4b8", act, group_blocks(Problem(64, qw.n, a.k, act, "uint4b8", group)),
                              tm, tn, 4, st, occupancy=occ)
            for m in (int(v) for v in a.m.split(",")):
                runs += 1
                try:
                    y, ref = run_forced(qw, m, act, spec, rng)
                except AssertionError as e:
                    bad += 1
                    print(f"iter {it} seed {seed} {spec.name} M={m}: {e}", flush=True)
                    continue
                err = np.abs(y - ref)
                r = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
                key = (spec.name, m)
                worst[key] = max(worst.get(key, 0.0), r)
                if r > TOL[act]:
                    bad += 1
                    rows, cols = np.nonzero(err > 10 * TOL[act] * np.abs(ref).mean())
                    print(f"iter {it} seed {seed} {spec.name} M={m}: rel {r:.3e}; {len(rows)} elements off, rows "
                          f"{sorted(set(rows.tolist()))[:12]} cols {cols.min() if len(cols) else '-'}.."
                          f"{cols.max() if len(cols) else '-'} ({len(set((cols // 64).tolist()))} 64-col blocks)", flush=True)
print(f"{runs} runs, {bad} bad")
for (name, m), r in sorted(worst.items()):
    print(f"  {name} M={m}: worst rel {r:.3e}")
