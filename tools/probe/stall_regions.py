#!/usr/bin/env python3
"""Warp-stall samples of one kernel (the CSV of tools/probe/ncu_source.sh) summed over regions of
its SASS: the main loop (the backward branch whose body issues HGMMAs), the epilogue (from the
first STSM / STS after the loop), the rest; and the instructions with the most samples.
    python3 tools/probe/stall_regions.py src1.csv [--top 25]"""
import argparse
import csv
import re

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--top", type=int, default=25)
a = ap.parse_args()
rows = list(csv.reader(open(a.csv)))
hdr_i = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
hdr = rows[hdr_i]
col = {n: hdr.index(n) for n in hdr}
ins = []
for r in rows[hdr_i + 1:]:
    if len(r) < len(hdr) or not r[0].startswith("0x") and not r[0].isdigit():
        continue
    addr = int(r[0], 16) if r[0].startswith("0x") else int(r[0])
    reasons = {n[6:]: int(r[col[n]] or 0) for n in hdr if n.startswith("stall_") and "(" not in n}
    ins.append((addr, r[col["Source"]].strip(), int(r[col["Warp Stall Sampling (All Samples)"]] or 0),
                int(r[col["Instructions Executed"]] or 0), reasons))
total = sum(i[2] for i in ins)
# main loop: the backward branch with the most HGMMAs in its body
best = None
for k, (addr, src, _, _, _) in enumerate(ins):
    m = re.search(r"BRA\S*\s+(?:`?\(?\.?L?_?x?_?\d*\)?)?\s*(0x[0-9a-f]+)", src)
    if "BRA" in src and m:
        t = int(m.group(1), 16)
        if t < addr:
            body = [i for i in ins if t <= i[0] <= addr]
            n = sum("HGMMA" in i[1] for i in body)
            if n and (best is None or n > best[2]):
                best = (t, addr, n)
regions = {"main loop": 0, "after loop": 0, "before loop": 0}
if best:
    lo, hi, _ = best
    by = {k: {} for k in regions}
    for addr, src, s, _, rs in ins:
        k = "main loop" if lo <= addr <= hi else "before loop" if addr < lo else "after loop"
        regions[k] += s
        for n, v in rs.items():
            by[k][n] = by[k].get(n, 0) + v
print(f"total samples {total}; main loop {hex(best[0])}-{hex(best[1])}" if best else f"total {total}")
for k, v in regions.items():
    top = sorted(by[k].items(), key=lambda kv: -kv[1])[:5] if best else []
    print(f"  {k:12s} {v:8d}  {100 * v / max(total, 1):5.1f}%   " + ", ".join(f"{n} {100 * x / max(total, 1):.1f}%" for n, x in top))
print("top instructions (samples, % of all, executions):")
base = ins[0][0] if ins else 0
for addr, src, s, n, rs in sorted(ins, key=lambda i: -i[2])[:a.top]:
    why = ",".join(f"{k}:{v}" for k, v in sorted(rs.items(), key=lambda kv: -kv[1])[:2])
    print(f"  +{addr - base:#06x} {s:7d} {100 * s / max(total, 1):5.1f}% {n:9d}  {src[:60]:60s} {why}")
