"""Measuring jitmarlin on the GPU: graph-replay timing with weights rotated past L2, the byte
floor from a measured copy bandwidth, host overhead per eager call. tools/bench builds the full
comparison of ../shared/BENCH.md on these; `jitmarlin bench` runs a quick one. Needs torch (CUDA
graphs and peers) and CuPy.
"""

from __future__ import annotations

import math
import time

import numpy as np

from jitmarlin.ops.linear import linear
from jitmarlin.weights.qtypes import check_group, get_qtype
from jitmarlin.weights.quant import E4M3, QuantizedWeight


class Timer:
    """GPU time per call of `fns` (a list of no-argument callables cycled in order) by CUDA-graph
    replay: one graph holds `len(fns) * reps` calls; replays are timed with events. Returns
    microseconds per call. `stream`: the torch stream to capture on (default: a new one per call;
    jitmarlin keeps a workspace per stream it sees, so repeated timing should pass one)."""

    def __init__(self, torch, target_ms, stream=None):
        self.torch = torch
        self.target_ms = target_ms
        self.stream = stream

    def __call__(self, fns, use_graph=True):
        torch = self.torch
        for f in fns:  # warm-up: compiles, uploads, autotune, allocator
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
        est = max(t0.elapsed_time(t1) / len(fns), 1e-3)  # ms per call
        calls = max(len(fns), min(2000, int(self.target_ms / est)))
        reps = max(1, calls // len(fns))
        if not use_graph:
            return self._eager(fns, reps)
        s = self.stream if self.stream is not None else torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            for f in fns:  # warm the capture stream too
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


# The weight types tools/bench measures (jitmarlin's, less uint8 with zero points).
BENCH_QTYPES = ("uint4b8", "uint4", "uint8b128", "float8_e4m3fn", "nvfp4", "mxfp4")
# Bytes per group scale as the format stores it: the block-scaled fp4 formats carry 1-byte scales
# (nvfp4: e4m3, mxfp4: e8m0); the others fp16/bf16. A zero point takes the type's bits (packed).
_SCALE_BYTES = {"nvfp4": 1, "mxfp4": 1}


def qtype_group(qtype: str, group: int) -> int:
    """The group a bench row of `qtype` runs: the format's own (nvfp4 16, mxfp4 32), else `group`."""
    return get_qtype(qtype).fixed_group or group


def weight_bytes(n, k, group, qtype="uint4b8"):
    """Bytes a (K, N) weight of `qtype` holds in its format: codes (the type's bits), one scale per
    group (_SCALE_BYTES), a zero point per group for zero-point types, nvfp4's fp32 global scale.
    The floor's weight term; jitmarlin's own layout may hold more (fp16 scales for the fp4 types,
    fp16 offsets for uint4), which counts against it."""
    qt = get_qtype(qtype)
    g = k if group == -1 else group
    groups = n * (k // g)
    b = n * k * qt.bits / 8 + groups * _SCALE_BYTES.get(qtype, 2)
    if qt.zero_points:
        b += groups * qt.bits / 8
    return b + (4 if qtype == "nvfp4" else 0)


def _random_scales(qtype, u, z_draw):
    """(scales, offsets or None, global scale) as float64 (G, N) from uniform draws `u` in [0, 1):
    each type's valid scale format, sized so that weights stay around 0.01-0.2 in magnitude."""
    if qtype == "nvfp4":  # e4m3 values 0.5..7.5 (codes 0x30..0x4f) under a global 2^-8
        return E4M3[0x30 + (u * 32).astype(np.int64)], None, 2.0**-8
    if qtype == "mxfp4":  # e8m0: powers of two
        return 2.0 ** (-8 + np.floor(u * 4)), None, 1.0
    s = u.astype(np.float64) * 0.01 + 0.001
    s /= {"uint8b128": 16, "float8_e4m3fn": 64}.get(qtype, 1)
    return s, (None if z_draw is None else (8 - z_draw.astype(np.float64))), 1.0


def random_weights(n, k, group, act, copies, shared_values=False, qtype="uint4b8", xp=None):
    """`copies` random QuantizedWeights of `qtype` on the current GPU (xp: the array module,
    default CuPy; NumPy builds them on the host). Random 32-bit words are valid packed codes of
    every type but float8_e4m3fn, whose NaN bytes (S.1111.111) are flipped to 0x7e / 0xfe. Scales
    random positive, rounded to `act`, in the type's scale format (nvfp4: e4m3 values under a global
    scale, groups of 16; mxfp4: powers of two, groups of 32; others: group `group`); uint4's offsets
    come from random zero points z (m = (8 - z) * s). shared_values: scales (and offsets) rounded to
    bfloat16 first, values that float16 holds exactly too, so that an fp16 and a bf16 run multiply
    the same numbers (see draw_values)."""
    if xp is None:
        import cupy as xp

    from jitmarlin.weights import halves, packing

    host = getattr(xp, "asnumpy", np.asarray)
    qt = get_qtype(qtype)
    gs = check_group(qtype, qtype_group(qtype, group))
    g = 1 if gs == -1 else k // gs
    words = (2 if qt.bits == 4 else 4) * n
    natural = gs == -1 and not qt.zero_points  # per-channel symmetric scales: (n,), not permuted

    def bits(v):
        if shared_values:
            v = halves.round_to(v, "bfloat16")
        b = xp.asarray(halves.to_bits(v, act))
        return b.reshape(n) if natural else packing.permute_scales(b)

    out = []
    for _ in range(copies):
        packed = xp.random.randint(-(2**31), 2**31 - 1, size=(k // 16, words), dtype=xp.int64).astype(xp.int32)
        if qtype == "float8_e4m3fn":
            b = packed.view(xp.uint8)
            b ^= ((b & 0x7F) == 0x7F).astype(xp.uint8)
        u = np.asarray(host(xp.random.random((g, n))))
        z = np.asarray(host(xp.random.randint(0, 16, size=(g, n)))) if qt.zero_points else None
        s, zf, gscale = _random_scales(qtype, u, z)
        if shared_values:
            s = halves.round_to(s, "bfloat16").astype(np.float64)
        s_used = halves.round_to(s, act).astype(np.float64)
        off = None if zf is None else bits(zf * s_used)
        out.append(QuantizedWeight(qtype, gs, n, k, packed, bits(s), scale_dtype=act, offsets=off, global_scale=gscale))
    return out


def draw_values(torch, shape, dtype, scale=1.0, shared_values=False):
    """A random tensor (normal, times `scale`) of `dtype` on the GPU. shared_values: drawn in fp32
    and rounded to bfloat16 first; float16 holds those exactly (all but the few below its normal
    range, 2^-14), so every dtype, and every peer fed a conversion, gets the same numbers. Why it
    matters: at large M an H100 runs GEMMs at its power cap, where the clock depends on the bits
    the operands toggle: the same fp16 cuBLAS GEMM at M = 4096 runs 5-6% faster on bf16-rounded
    values than on full fp16 ones (tools/PERF.md, entry 26)."""
    x = torch.randn(*shape, device="cuda") * scale
    if shared_values:
        x = x.to(torch.bfloat16)
    return x.to(dtype)


def floor_us(m, n, k, group, bw_tbps, qtype="uint4b8"):
    """The byte floor (µs): the weight in its format (weight_bytes), x and the output in 16 bits,
    over the measured copy bandwidth."""
    return (weight_bytes(n, k, group, qtype) + m * k * 2 + m * n * 2) / (bw_tbps * 1e12) * 1e6


def host_overhead(torch, cp):
    """Wall-clock per eager call (µs) of jitmarlin.linear with torch and CuPy inputs, next to
    torch fp16 matmul: small shape, many calls, synchronised at the end only."""
    # A small layer, so that the GPU time per call stays under the host time being measured.
    k = n = 512
    qw = random_weights(n, k, 128, "float16", 1)[0]
    xt = torch.randn(1, k, device="cuda", dtype=torch.float16)
    xc = cp.asarray(cp.random.standard_normal((1, k)), dtype=cp.float16)
    wt = torch.randn(n, k, device="cuda", dtype=torch.float16)

    def per_call(f, n_calls=2000):
        for _ in range(50):
            f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n_calls):
            f()
        el = time.perf_counter() - t
        torch.cuda.synchronize()
        return el / n_calls * 1e6

    res = {}
    for _ in range(3):  # take the best of 3 rounds for each
        for key, f in (
            ("jitmarlin_torch_us", lambda: linear(xt, qw)),
            ("jitmarlin_cupy_us", lambda: linear(xc, qw)),
            ("torch_matmul_fp16_us", lambda: torch.matmul(xt, wt.t())),
        ):
            v = per_call(f)
            res[key] = round(min(v, res.get(key, v)), 2)
    return res


def quick(shapes, ms, act: str = "float16", group: int = 128, target_ms: float = 10.0):
    """GPU time of jitmarlin.linear and of torch's fp16 matmul (cuBLAS) for each (K, N) in
    `shapes` and M in `ms`, by graph replay with weights rotated past 4x L2, next to the byte
    floor. Returns (copy TB/s, rows of dicts)."""
    import torch

    from jitmarlin.jit.profiles import live_profile

    dev = torch.cuda.current_device()
    l2 = live_profile(dev).l2_bytes
    bw = copy_bandwidth(torch)
    timer = Timer(torch, target_ms)
    tdt = torch.float16 if act == "float16" else torch.bfloat16
    rows = []
    for k, n in shapes:
        qws = random_weights(n, k, group, act, copies_needed(n * k // 2 + n * (k // group) * 2, l2))
        wts = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies_needed(n * k * 2, l2))]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=tdt)
            out = torch.empty(m, n, device="cuda", dtype=tdt)
            xh, oh = x.half(), torch.empty(m, n, device="cuda", dtype=torch.float16)
            t = timer([lambda q=q: linear(x, q, out=out, enable_pdl=False) for q in qws])
            tc = timer([lambda w=w: torch.matmul(xh, w.t(), out=oh) for w in wts])
            rows.append(
                {
                    "K": k,
                    "N": n,
                    "M": m,
                    "act": act,
                    "jitmarlin_us": round(t, 2),
                    "cublas_fp16_us": round(tc, 2),
                    "floor_us": round(floor_us(m, n, k, group, bw), 2),
                }
            )
    return bw, rows
