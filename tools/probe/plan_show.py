#!/usr/bin/env python3
"""Print the planner's plan (kernel, grid, iters, whole tiles) for the bench layers at given M,
under the probe settings of variant_bench.py (run through it):
    JM_PROBE_HYBRID_GRID=128 python3 tools/probe/variant_bench.py probe/plan_show.py --m 256,1024"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
from benchlib import SHAPES  # noqa: E402

from jitmarlin import planner  # noqa: E402
from jitmarlin.problem import Problem  # noqa: E402
from jitmarlin.profiles import PROFILES  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--m", default="256,1024")
ap.add_argument("--profile", default="h100")
ap.add_argument("--act", default="float16")
a = ap.parse_args()
prof = PROFILES[a.profile]
for m in map(int, a.m.split(",")):
    for name, (k, n) in SHAPES.items():
        pl = planner.plan(prof, Problem(m, n, k, a.act, "uint4b8", 128))
        print(f"{name:14s} M={m:5d} {pl.spec.name:40s} grid {pl.grid:4d} iters {pl.iters:4d} whole {pl.whole}")
