#!/usr/bin/env python3
"""The table of an A/B device session (tools/probe/ab_tree.sh, env_ab.sh): one line a shape, M and
dtype, the jitmarlin us of each run's $OUT/ab-RUN.json side by side, the kernels named.
    python3 tools/probe/ab_table.py OUT RUN [RUN ...]"""
import json, sys, os
out, vs = sys.argv[1], sys.argv[2:]
runs = {}
for v in vs:
    try: runs[v] = {(r["shape"], r["M"], r["act"]): r for r in json.load(open(os.path.join(out, f"ab-{v}.json")))["rows"]}
    except Exception as e: print(v, "no json", e)
keys = sorted({k for r in runs.values() for k in r}, key=lambda k: (k[2], k[1], k[0]))
print(f"{'shape':16s} {'M':>4s} act  {'floor':>6s} " + " ".join(f"{v[:8]:>8s}" for v in runs) + "  kernels")
for k in keys:
    rows = [runs[v].get(k) for v in runs]
    fl = next(r["floor_us"] for r in rows if r)
    ks = []
    for r in rows:
        n = (r or {}).get("kernel", "-")
        n = n.replace("jm_gemv_sm80_uint4b8_", "").replace("jm_sm80_uint4b8_", "sk_").replace("_g128_", "_")
        if n not in ks: ks.append(n)
    print(f"{k[0]:16s} {k[1]:4d} {k[2][:4]} {fl:6.1f} " + " ".join(f"{r['jitmarlin_us']:8.2f}" if r else " "*8 for r in rows) + "  " + " ".join(ks))
