"""Shared measurement code for tools/bench and tools/sweep (see ../shared/BENCH.md)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from jitmarlin.bench import (Timer, copies_needed, copy_bandwidth, floor_us,  # noqa: E402
                             host_overhead, random_weights)

__all__ = ["SHAPES", "IST_MARLIN", "BENCH_CUBLAS", "select_shapes", "make_tinygemm", "Timer",
           "copies_needed", "copy_bandwidth", "floor_us", "host_overhead", "random_weights"]

SHAPES = {
    "L3-8B qkv": (4096, 6144), "L3-8B o": (4096, 4096), "L3-8B gate_up": (4096, 28672),
    "L3-8B down": (14336, 4096), "L3-70B qkv": (8192, 10240), "L3-70B o": (8192, 8192),
    "L3-70B gate_up": (8192, 57344), "L3-70B down": (28672, 8192),
}
# IST Marlin (fp16, g128, H100 80GB HBM3, graph replay, weights past L2), BENCH.md, in µs.
IST_MARLIN = {
    "L3-8B qkv": {1: 11.5, 16: 11.8, 64: 25.1, 256: 41.4, 1024: 139.9, 4096: 584.9},
    "L3-8B o": {1: 10.9, 16: 11.4, 64: 24.9, 256: 29.7, 1024: 93.5, 4096: 382.7},
    "L3-8B gate_up": {1: 30.7, 16: 32.8, 64: 48.6, 256: 165.4, 1024: 631.2, 4096: 2902.9},
    "L3-8B down": {1: 19.3, 16: 20.7, 64: 42.1, 256: 94.0, 1024: 314.9, 4096: 1336.5},
    "L3-70B qkv": {1: 23.8, 16: 24.4, 64: 42.4, 256: 122.5, 1024: 467.2, 4096: 2271.6},
    "L3-70B o": {1: 24.8, 16: 25.0, 64: 46.1, 256: 130.4, 1024: 443.1, 4096: 1644.6},
    "L3-70B gate_up": {1: 113.6, 16: 115.7, 64: 187.8, 256: 665.3, 1024: 2672.3, 4096: 10957.5},
    "L3-70B down": {1: 57.7, 16: 58.5, 64: 99.5, 256: 331.7, 1024: 1255.4, 4096: 5491.5},
}
# cuBLAS fp16 of the same BENCH.md run, to compare ratios rather than absolute times.
BENCH_CUBLAS = {
    "L3-8B qkv": {1: 21.2, 16: 21.9, 64: 22.2}, "L3-8B o": {1: 15.1, 16: 17.0, 64: 15.2},
    "L3-8B gate_up": {1: 88.3, 16: 83.5, 64: 100.9}, "L3-8B down": {1: 44.2, 16: 45.3, 64: 46.9},
    "L3-70B qkv": {1: 62.1, 16: 64.6, 64: 61.6}, "L3-70B o": {1: 48.1, 16: 48.3, 64: 49.2},
    "L3-70B gate_up": {1: 309.5, 16: 320.3, 64: 350.4}, "L3-70B down": {1: 159.1, 16: 161.1, 64: 168.7},
}


def select_shapes(text):
    if text == "all":
        return dict(SHAPES)
    if text in ("8b", "70b"):
        return {k: v for k, v in SHAPES.items() if text.upper() in k.split()[0].upper()}
    out = {}
    for part in text.split(","):
        if part in SHAPES:
            out[part] = SHAPES[part]
        else:
            k, n = part.lower().split("x")
            out[part] = (int(k), int(n))
    return out


def make_tinygemm(torch, n, k, g, ncopies):
    """torch's int4 tinygemm operands: (packed weight, scales_and_zeros), `ncopies` of them."""
    out = []
    for _ in range(ncopies):
        w = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        w_u8 = (w[:, ::2] << 4 | w[:, 1::2]).to(torch.uint8)
        packed = torch._convert_weight_to_int4pack(w_u8, 8)
        sz = torch.rand(k // g, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        out.append((packed, sz))
    return out



