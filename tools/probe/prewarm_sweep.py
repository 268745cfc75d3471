#!/usr/bin/env python3
"""Compile the candidates a `tools/sweep --tiles T --stages S --m M --paths P` run times on
--profile (fp16, group 128, the 8 bench shapes), so the device session compiles nothing; with
--planner-only, just the planner's choices (what tools/bench runs). Run it through
variant_bench.py to prewarm a source variant."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from jitmarlin import planner  # noqa: E402
from jitmarlin.cache import default_cache  # noqa: E402
from jitmarlin.problem import Problem  # noqa: E402
from jitmarlin.profiles import get_profile  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--profile", default="h100")
ap.add_argument("--m", default="64")
ap.add_argument("--paths", default="")
ap.add_argument("--tiles", default="")
ap.add_argument("--stages", default="")
ap.add_argument("--planner-only", action="store_true")
a = ap.parse_args()
prof = get_profile(a.profile)
paths = set(filter(None, a.paths.split(",")))
tiles = {tuple(int(v) for v in t.split("x")) for t in a.tiles.split(",") if t}
depths = {int(v) for v in a.stages.split(",") if v}
seen = set()
for k, n in [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (8192, 10240),
             (8192, 8192), (8192, 57344), (28672, 8192)]:
    for m in map(int, a.m.split(",")):
        p = Problem(m, n, k, "float16", "uint4b8", 128)
        cands = [planner.choose_spec(prof, p)]
        for s in [] if a.planner_only else planner.candidate_specs(prof, p):
            if s.route != "fused" or (paths and s.path not in paths):
                continue
            if tiles and (s.tm, s.tn) not in tiles and (s.tm, s.tn, s.tk) not in tiles:
                continue
            if depths and s.stages not in depths:
                continue
            cands.append(s)
        for s in cands:
            if s not in seen:
                seen.add(s)
                print(s.name, default_cache().get(s, prof.arch)[2], flush=True)
