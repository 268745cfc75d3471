#!/usr/bin/env python3
"""Compile the candidates a `tools/sweep --tiles T --stages S --m M --paths P` run times on
--profile (fp16, group 128, the bench shapes; the same selection: benchlib.candidate_filter),
so the device session compiles nothing; with --planner-only, just the planner's choices (what
tools/bench runs). Run it through variant_bench.py to prewarm a source variant."""
import argparse
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import candidate_filter, select_shapes  # noqa: E402
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
ap.add_argument("--act", default="float16", help="activation dtypes, comma-separated")
a = ap.parse_args()
prof = get_profile(a.profile)
wanted = candidate_filter(a.paths, a.tiles, a.stages)
seen = set()
for k, n in select_shapes("all").values():
    for m, act in itertools.product(map(int, a.m.split(",")), a.act.split(",")):
        p = Problem(m, n, k, act, "uint4b8", 128)
        cands = [planner.choose_spec(prof, p)]
        if not a.planner_only:
            cands += [s for s in planner.candidate_specs(prof, p) if wanted(s)]
        for s in cands:
            if s not in seen:
                seen.add(s)
                print(s.name, default_cache().get(s, prof.arch)[2], flush=True)
