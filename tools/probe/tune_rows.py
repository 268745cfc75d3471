#!/usr/bin/env python3
"""Tune tools/bench's rows with jitmarlin's autotuner (jitmarlin.tune / jitmarlin.measure) over a
filtered candidate list, store the choices in the kernel cache (JITMARLIN_CACHE_DIR, where a later
tools/bench run in the same cache picks them up), and print every candidate's time.

    python3 tools/probe/tune_rows.py --m 16,256 --act float16,bfloat16 [--shapes all]
        [--paths sm80,sm90] [--tiles 1x8x16,1x16x16] [--stages 3,4,8] [--jobs 16] [--json F]
        [--deadline-s S]

Candidates: planner.candidate_specs() filtered like tools/sweep (benchlib.candidate_filter); the
planner's default is always measured. A choice replaces the default only when it is faster by
more than tune.MARGIN after a second measurement of both (tune.select)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from benchlib import candidate_filter, select_shapes  # noqa: E402

from jitmarlin import planner, tune  # noqa: E402
from jitmarlin.cache import default_cache  # noqa: E402
from jitmarlin.measure import GpuMeasure, precompile  # noqa: E402
from jitmarlin.problem import Problem  # noqa: E402
from jitmarlin.profiles import live_profile, planning_profile  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--m", default="16")
    ap.add_argument("--act", default="float16")
    ap.add_argument("--qtype", default="uint4b8")
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--paths", default="")
    ap.add_argument("--tiles", default="")
    ap.add_argument("--stages", default="")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--json", default=None)
    ap.add_argument("--deadline-s", type=float, default=1e9)
    a = ap.parse_args()
    t0 = time.time()
    import torch

    profile, arch = planning_profile(0), live_profile(0).arch
    cache = default_cache()
    wanted = candidate_filter(a.paths, a.tiles, a.stages)
    shapes = select_shapes(a.shapes)
    todo = []
    for act in a.act.split(","):
        for m in map(int, a.m.split(",")):
            for name, (k, n) in shapes.items():
                p = Problem(m, n, k, act, a.qtype, a.group)
                default = planner.plan(profile, p).spec
                cands = [c for c in planner.candidate_specs(profile, p) if wanted(c) and c != default]
                todo.append((name, p, default, cands))
    specs = list(dict.fromkeys(s for _, _, d, c in todo for s in [d] + c))
    failed = precompile(specs, arch, cache, a.jobs)
    print(f"# {len(todo)} problems, {len(specs)} kernels compiled in {time.time() - t0:.0f} s "
          f"({len(failed)} failed)", flush=True)
    rows = []
    for name, p, default, cands in todo:
        if time.time() - t0 > a.deadline_s:
            print(f"# deadline: {name} M={p.m} {p.act} and later not tuned", flush=True)
            break
        m = GpuMeasure(p, 0)
        try:
            known = [(s, why) for s, why in failed.items() if s in cands]
            sel = tune.select(default, cands, m, failures=known, verify=m.verify)
        finally:
            del m
            torch.cuda.empty_cache()
        tune.store(cache, tune.choice_from(profile, arch, p, sel))
        timings = sorted(sel.timings, key=lambda t: t[1])
        for s, why in sel.failures:
            if why.startswith("output check failed"):
                print(f"# {name} {p.act} M={p.m}: {s.name} rejected: {why}", flush=True)
        print(f"{name:14s} {p.act:8s} M={p.m:<5d} default {default.name} {sel.default_us:8.2f} us  "
              f"-> {sel.winner.name} {sel.winner_us:8.2f} us ({sel.default_us / sel.winner_us:.3f}x)  "
              f"best3: " + ", ".join(f"{s.name.split('_')[-1]} {us:.2f}" for s, us in timings[:3]),
              flush=True)
        rows.append({"shape": name, "M": p.m, "act": p.act, "default": default.name,
                     "default_us": sel.default_us, "winner": sel.winner.name, "winner_us": sel.winner_us,
                     "timings": [[s.name, us] for s, us in timings],
                     "failures": [[getattr(s, "name", str(s)), why] for s, why in sel.failures]})
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    print(f"# done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
