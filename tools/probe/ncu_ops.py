#!/usr/bin/env python3
"""Instruction counts and warp-stall reasons by SASS opcode from the CSVs of
tools/probe/ncu_source.sh (one column per CSV), per UNITS (e.g. the warps x k16 rows of weights a
kernel streams, to compare kernels per unit of work), and the opcodes of the hottest loop body
(the instructions executed the most times, all with that count).
    python3 tools/probe/ncu_ops.py src1.csv src2.csv --units 229376"""
import argparse
import collections
import csv
import re

ap = argparse.ArgumentParser()
ap.add_argument("csv", nargs="+")
ap.add_argument("--units", type=float, default=1.0)
ap.add_argument("--min", type=float, default=0.25, help="hide opcodes under this many per unit")
a = ap.parse_args()


def load(path):
    rows = list(csv.reader(open(path)))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr = rows[hi]
    col = {n: i for i, n in enumerate(hdr)}
    out = []
    for r in rows[hi + 1:]:
        if len(r) < len(hdr):
            continue
        op = re.sub(r"^@!?U?P\w+\s+", "", r[col["Source"]].strip()).split(" ")[0]
        stalls = {n[6:]: int(r[col[n]] or 0) for n in hdr if n.startswith("stall_") and "(" not in n}
        out.append((op, int(r[col["Instructions Executed"]] or 0), stalls))
    return out


runs = [load(p) for p in a.csv]
counts = [collections.Counter() for _ in runs]
for c, ins in zip(counts, runs):
    for op, n, _ in ins:
        c[op] += n
print(f"{'opcode':24s} " + " ".join(f"{i + 1:>8d}" for i in range(len(runs))) + f"   (per {a.units:g} units)")
for op in sorted(set().union(*counts), key=lambda o: -sum(c[o] for c in counts)):
    if max(c[op] for c in counts) / a.units >= a.min:
        print(f"{op:24s} " + " ".join(f"{c[op] / a.units:8.2f}" for c in counts))
print(f"{'total':24s} " + " ".join(f"{sum(c.values()) / a.units:8.2f}" for c in counts))
for i, ins in enumerate(runs):
    stalls = collections.Counter()
    for _, _, s in ins:
        stalls.update(s)
    tot = sum(stalls.values()) or 1
    print(f"\n{i + 1}: stalls", ", ".join(f"{k} {v / tot:.0%}" for k, v in stalls.most_common(8)))
    hot = collections.Counter(n for _, n, _ in ins if n).most_common()
    n_body = max(hot, key=lambda kv: kv[0] * kv[1])[0] if hot else 0
    body = collections.Counter(op for op, n, _ in ins if n == n_body)
    print(f"{i + 1}: hottest loop body, {sum(body.values())} instructions run {n_body} times:",
          ", ".join(f"{op} {k}" for op, k in body.most_common(10)))
