#!/usr/bin/env python3
"""Compile the planner's kernel for one problem as variant_bench.py renders it (run through it, so
JM_PROBE_SUB and the other probe settings apply) and print its resources and, where a disassembler
is found, how many of each SASS opcode it holds (the dequantisation's instruction mix):
    JM_PROBE_SUB=bf_imad2 python3 tools/probe/variant_bench.py probe/sass_count.py --m 64 --k 8192 --n 57344 --act bfloat16"""
import argparse
import collections
import re

import jitmarlin.cache
from jitmarlin import nvrtc, planner
from jitmarlin.problem import Problem
from jitmarlin.profiles import PROFILES

ap = argparse.ArgumentParser()
ap.add_argument("--m", type=int, default=64)
ap.add_argument("--k", type=int, default=8192)
ap.add_argument("--n", type=int, default=57344)
ap.add_argument("--act", default="bfloat16")
ap.add_argument("--dump", default="", help="write the whole SASS to this file")
ap.add_argument("--ops", default="SHF,IMAD.HI,IMAD,LOP3,PRMT,HFMA2,HMUL2,HADD2,HGMMA,LDS,SYNCS")
a = ap.parse_args()
spec = planner.plan(PROFILES["h100"], Problem(a.m, a.n, a.k, a.act, "uint4b8", 128)).spec
src = jitmarlin.cache.render(spec)
art = nvrtc.compile_source(src, spec.name, nvrtc.target_arch(spec, "sm_90"), spec)
print(spec.name, art.resources)
if nvrtc.find_disassembler() is None:
    print("no disassembler: PTX mul.hi", art.ptx.count("mul.hi.u32"), "shr", art.ptx.count("shr.u32"))
else:
    ops = collections.Counter()
    sass = nvrtc.disassemble(art.cubin)
    if a.dump:
        with open(a.dump, "w") as fh:
            fh.write(sass)
    for line in sass.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
        if m:
            ops[m.group(1)] += 1
    want = a.ops.split(",")
    print(" ".join(f"{w}={sum(c for o, c in ops.items() if o == w or o.startswith(w + '.'))}" for w in want))
