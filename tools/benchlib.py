"""Shared measurement code for tools/bench and tools/sweep (see ../shared/BENCH.md)."""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

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


class Timer:
    """GPU time per call of `fns` (a list of no-argument callables cycled in order) by CUDA-graph
    replay: one graph holds `len(fns) * reps` calls; replays are timed with events."""

    def __init__(self, torch, target_ms):
        self.torch = torch
        self.target_ms = target_ms

    def __call__(self, fns, use_graph=True):
        torch = self.torch
        for f in fns:              # warm-up: compiles, uploads, autotune, allocator
            f()
        torch.cuda.synchronize()
        # estimate with one eager pass
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        for f in fns:
            f()
        t1.record()
        torch.cuda.synchronize()
        est = max(t0.elapsed_time(t1) / len(fns), 1e-3)   # ms per call
        calls = max(len(fns), min(2000, int(self.target_ms / est)))
        reps = max(1, calls // len(fns))
        if not use_graph:
            return self._eager(fns, reps)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            for f in fns:          # warm the capture stream too
                f()
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=s):
                for _ in range(reps):
                    for f in fns:
                        f()
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t0.record()
            g.replay()
            t1.record()
            torch.cuda.synchronize()
            times.append(t0.elapsed_time(t1) * 1e3 / (reps * len(fns)))
        del g
        times.sort()
        return times[len(times) // 2]

    def _eager(self, fns, reps):
        torch = self.torch
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(reps):
            for f in fns:
                f()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) * 1e3 / (reps * len(fns))


def copy_bandwidth(torch):
    """Device-to-device copy, bytes read + written per second (TB/s), median of 10."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.random_()
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    ts = []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        e0.record()
        b.copy_(a)
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    ts.sort()
    del a, b
    return 2 * n / ts[len(ts) // 2] / 1e12


def copies_needed(bytes_per_copy, l2_bytes):
    return max(1, math.ceil(4 * l2_bytes / bytes_per_copy))


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



def random_weights(n, k, group, act, copies):
    """`copies` random QuantizedWeights on the current GPU: random 32-bit words are valid packed
    4-bit weights; scales random positive, rounded to `act`."""
    import cupy as cp

    from jitmarlin import QuantizedWeight, halves, packing

    out = []
    for _ in range(copies):
        packed = cp.random.randint(-2**31, 2**31 - 1, size=(k // 16, 2 * n), dtype=cp.int64).astype(cp.int32)
        g = 1 if group == -1 else k // group
        s = cp.asarray(halves.to_bits(cp.asnumpy(cp.random.random((g, n), dtype=cp.float32) * 0.01 + 0.001), act))
        scales = packing.permute_scales(s) if group != -1 else s.reshape(n)
        out.append(QuantizedWeight("uint4b8", group, n, k, packed, scales, scale_dtype=act))
    return out


def floor_us(m, n, k, group, bw_tbps):
    g = k if group == -1 else group
    return (n * k / 2 + n * (k // g) * 2 + m * k * 2 + m * n * 2) / (bw_tbps * 1e12) * 1e6
