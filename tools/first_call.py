#!/usr/bin/env python3
"""Time the first jitmarlin.linear call in fresh processes with a warm disk cache.

Each child: import (timed), then the first call (plan, disk-cache load, module load, weight
upload, workspace, launch, synchronise), then a second call. Run it twice: the first child warms
the cache if needed. Prints one line per child and the median."""

import os
import statistics
import subprocess
import sys

CHILD = r"""
import time
T = time.perf_counter
t0 = T()
import cupy as cp
import jitmarlin
from jitmarlin import QuantizedWeight
from jitmarlin.weights import packing
t1 = T()
n = k = 4096
packed = cp.random.randint(0, 2**31 - 1, size=(k // 16, 2 * n), dtype=cp.int64).astype(cp.int32)
s = (cp.random.random((k // 128, n), dtype=cp.float32) * 0.01 + 0.001).astype(cp.float16).view(cp.uint16)
qw = QuantizedWeight("uint4b8", 128, n, k, packed, packing.permute_scales(s))
x = cp.random.standard_normal((16, k), dtype=cp.float32).astype(cp.float16)
cp.cuda.Device().synchronize()
t2 = T()
y = jitmarlin.linear(x, qw)
cp.cuda.Device().synchronize()
t3 = T()
y = jitmarlin.linear(x, qw)
cp.cuda.Device().synchronize()
t4 = T()
print(f"{1e3*(t1-t0):.1f} {1e3*(t3-t2):.2f} {1e3*(t4-t3):.3f}")
"""


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    firsts = []
    for i in range(n + 1):
        r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=os.environ)
        if r.returncode:
            print(r.stderr[-2000:])
            sys.exit(1)
        imp, first, second = map(float, r.stdout.split())
        tag = "(warms the cache)" if i == 0 else ""
        print(f"child {i}: import {imp:7.1f} ms  first call {first:7.2f} ms  second call {second:6.3f} ms {tag}")
        if i:
            firsts.append(first)
    print(f"first call in a fresh process, warm disk cache: median {statistics.median(firsts):.2f} ms")


if __name__ == "__main__":
    main()
