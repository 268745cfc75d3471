#!/usr/bin/env python3
"""Session 40: the mma.sync kernel with K-tiles of 512 (tk 32) against the float64 reference on
the GPU: poisoned output, both dtypes, whole-tile and Stream-K plans, M and N not multiples of the
tile, groups of 32 / 64 / 128 and per-channel scales. GPU only:
    python3 tools/probe/tk32_check.py"""
from forced_check import check

from jitmarlin.spec import KernelSpec

# m, n, k, group, (tn, tk, stages), whole
CASES = [(16, 6144, 4096, 128, (4, 32, 4), True), (13, 6144, 4096, 128, (4, 32, 3), True),
         (16, 4096, 14336, 128, (8, 32, 3), False), (11, 10240, 8192, 128, (16, 32, 2), False),
         (16, 1000, 3072, 64, (4, 32, 4), False), (7, 1536, 2048, 32, (8, 32, 4), False),
         (16, 2048, 4096, -1, (16, 32, 2), True)]
check("tk32_check", [(m, n, k, "uint4b8", g, lambda act, gb, t=t, wh=wh: KernelSpec("sm80", "uint4b8", act, gb, 1, *t, whole=wh))
                     for m, n, k, g, t, wh in CASES])
