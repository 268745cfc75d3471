#!/usr/bin/env python3
"""Session 46: the sm80-path kernel with its weights by TMA boxes (KernelSpec.bulk, sm_90), and with
x's too (KernelSpec.xbox, session 48), against the float64 reference on the GPU: poisoned output,
both dtypes, Stream-K and whole-tile plans, M and N not multiples of the tile (a last column tile
mostly past N: the box's zero fill), groups of 32 / 64 / 128, per-channel scales, zero points,
8-bit codes, K-tiles of 256 and 512. GPU only:
    python3 tools/probe/bulk_check.py"""
from forced_check import check

from jitmarlin.spec import KernelSpec

# m, n, k, qtype, group, (tm, tn, tk, stages), whole
CASES = [(16, 57344 // 8, 8192, "uint4b8", 128, (1, 16, 16, 3), False),
         (16, 4096, 14336, "uint4b8", 128, (1, 8, 32, 3), False),
         (13, 6144, 4096, "uint4b8", 128, (1, 4, 32, 5), True),
         (11, 1088, 3072, "uint4b8", 64, (1, 16, 16, 4), False),
         (9, 1536, 2048, "uint4b8", 32, (1, 8, 16, 4), False),
         (16, 2048, 4096, "uint4b8", -1, (1, 16, 32, 2), True),
         (5, 2112, 1024, "uint4", 128, (1, 16, 16, 3), False),
         (16, 1536, 2048, "uint8b128", 128, (1, 8, 16, 3), False),
         (16, 1536, 2048, "float8_e4m3fn", -1, (1, 8, 16, 3), False),
         (40, 1024, 2048, "uint4b8", 128, (3, 16, 16, 3), False)]
# the weights by TMA boxes (bulk), and x's too (xbox) where the spec allows it (one m16 row block)
check("bulk_check", [(m, n, k, qt, g, lambda act, gb, qt=qt, t=t, wh=wh, xb=xb:
                      KernelSpec("sm80", qt, act, gb, *t, whole=wh, bulk=True, xbox=xb))
                     for m, n, k, qt, g, t, wh in CASES for xb in (False, True) if not xb or t[0] == 1])
