#!/usr/bin/env python3
"""Hybrid gemv plans against two 8-warp blocks an SM on 70B qkv (N = 10240, K = 8192) for every
quant type, GPU time per call (jitmarlin.measure: CUDA-graph replay, weights rotated past 4x L2),
alternating the two specs QT_REPEATS times and keeping medians.
    python3 tools/probe/hybrid_types.py [--m 1,8] [--act float16] [--types all]"""
import argparse
import dataclasses
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from jitmarlin import planner  # noqa: E402
from jitmarlin.measure import GpuMeasure  # noqa: E402
from jitmarlin.problem import Problem  # noqa: E402
from jitmarlin.profiles import live_profile  # noqa: E402

GROUP = {"nvfp4": 16, "mxfp4": 32, "float8_e4m3fn": -1, "uint8": -1}
ap = argparse.ArgumentParser()
ap.add_argument("--m", default="1,8")
ap.add_argument("--act", default="float16")
ap.add_argument("--types", default="all")
ap.add_argument("--repeats", type=int, default=3)
a = ap.parse_args()
prof = live_profile(0)
types = planner.ALL_QTYPES if a.types == "all" else a.types.split(",")
print(f"{'type':14s} {'M':>3s} {'o2 us':>8s} {'hybrid us':>10s} {'ratio':>6s}  specs")
for qt in types:
    for m in (int(v) for v in a.m.split(",")):
        p = Problem(m, 10240, 8192, a.act, qt, GROUP.get(qt, 128))
        specs = planner.gemv_specs(prof, p)
        two = next(s for s in specs if s.occupancy == 2)
        hy = next((s for s in specs if s.spread == 2), None) or dataclasses.replace(
            two, warps=16, kwarps=16, occupancy=1, spread=2)
        meas = GpuMeasure(p)
        t = {two: [], hy: []}
        for _ in range(a.repeats):
            for s in (two, hy):
                t[s].append(meas(s))
        a2, ah = statistics.median(t[two]), statistics.median(t[hy])
        print(f"{qt:14s} {m:3d} {a2:8.2f} {ah:10.2f} {ah / a2:6.3f}  {two.name} {hy.name}", flush=True)
