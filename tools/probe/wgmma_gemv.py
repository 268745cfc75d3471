#!/usr/bin/env python3
"""Decode at 9..16 rows with warpgroup MMAs fed straight from the weight stream (session 33,
tools/PERF.md entry 67). Not a product kernel: a probe of whether one would beat Stream-K.

The 16-row gemv kernel runs out of issue slots (entry 45: 118 instructions a warp and k16 row, of
which 8 HMMA and ~26 for x's loads), so Stream-K serves M = 9..16. Here each warp streams one
64-column block's packed weights (the kernels' layout, 16-byte loads, two batches of 4 k16 rows in
flight, no shared-memory pipeline for the weights) and the four warps of a warpgroup stream four
adjacent column blocks over the same k16 rows. wgmma j (m64n16k16, A from registers) takes the 16
features 16j..16j+15 of each warp's column block as its 64 rows: the fragment a lane already holds
after dequantising word j of its load, so nothing moves between warps. x (16 tokens, 128-byte
swizzled: the wgmma B layout) is in shared memory: 4 wgmma and no x loads a warp and k16 row.

A block is G warpgroups (4: 512 threads, 128 registers; or 3) on the same 4 column blocks (256
features), each a 1/G of the block's K range; `splits` blocks share a column group's K. At the
end the warpgroups add their sums in shared memory and the block adds them to an fp32 out^T
(N x 16) with float2 atomics (zeroed outside the timed region), or stores them to a slot of its
own (`slot`: no cross-block sum). uint4b8, fp16, groups of 128; the group scale multiplies the
dequantised weights (4 HMUL2 a word).

Variants (kernel wg16_w<V>[_g3]): V0 waits for a k16 row's wgmmas before the next row; V1 waits
for all but the newest (two fragment sets); V3 once a batch (four sets: spills at 512 threads, fits
at 3 warpgroups); V2 dequantises but issues no wgmma, V4 only streams (timing only). Modes: x
fetched up front (0), not at all (4, timing only), or chunk by chunk two ahead of use (8, cp.async).
Prints, per layer, each config's us (CUDA-graph replay, copies rotated past 4x L2) beside
jitmarlin's own kernel at M = 16 (Stream-K) and M = 8 (gemv), and the relative errors of the
configs that compute the product against jitmarlin's kernel (and, on the first layer, against the
float64 reference of the dequantised weight). Needs an sm_90 GPU.
    python3 tools/probe/wgmma_gemv.py [--configs g3|all] [--layers 8B_down,70B_qkv] [--m 16]"""
import argparse
import os
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from read_floor import graph_us  # noqa: E402

# The project's own partials (rendered as the kernels render them): the PTX layer, the fragments,
# the int4 -> fp16 dequantisation and the Hopper MMA step (wgmma_k16 at 16 tokens).
PARTIALS = ('//% include "ptx/cuda.cuh"\n//% include "common.cuh"\n'
            '//% include "dequant/int4_float16.cuh"\n//% include "mma/sm90.cuh"\n')

BODY = r'''
// Word j of a lane's 16 bytes (jitmarlin/packing.py) as the m16 x k16 A fragment of features
// 16j..16j+15 of the column block: codes q - 8 scaled by s_lo (feature 16j + g) and s_hi (16j + 8 + g).
JM_DEV void dequant_a(u32 q, u32 s_lo, u32 s_hi, u32 (&a)[4]) {
  FragB b[2];
  dequant_word(q, b);
  a[0] = mul_f16x2(b[0].r[0], s_lo);
  a[1] = mul_f16x2(b[1].r[0], s_hi);
  a[2] = mul_f16x2(b[0].r[1], s_lo);
  a[3] = mul_f16x2(b[1].r[1], s_hi);
}
JM_DEV u32 dup_lo(u32 a) { return prmt(a, 0, 0x1010); }
JM_DEV u32 dup_hi(u32 a) { return prmt(a, 0, 0x3232); }

constexpr int U = 4;          // k16 rows a batch (one 64-wide x tile)
constexpr int XT = 2048;      // bytes of one x tile: 16 token rows x 128 bytes

// One k16 row u of a batch: 4 fragments, 4 wgmmas. V = 0: wait for them before the next row;
// 1: the previous row's wgmmas may still run while this row is dequantised (two fragment sets,
// wait for all but the newest group); 2: no wgmma at all (the fragments go into a sink: the
// stream and the dequantisation alone); 3: one wait a batch (four sets; spills at 512 threads);
// 4: neither dequantisation nor wgmma (the bare weight stream).
template <int V>
__device__ __forceinline__ void row_step(const int4& w, const int4& sc, float (&acc)[4][8], u32 xaddr,
                                         u32 (&a)[4][4], u32 (&prev)[4][4], u32& sink, bool last) {
  const u32 sw[4] = {(u32)sc.x, (u32)sc.y, (u32)sc.z, (u32)sc.w};
  const u32 qw[4] = {(u32)w.x, (u32)w.y, (u32)w.z, (u32)w.w};
  if (V == 4) {   // the bare stream: the loaded words only folded into the sink
#pragma unroll
    for (int j = 0; j < 4; ++j) sink ^= qw[j] ^ sw[j];
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) dequant_a(qw[j], dup_lo(sw[j]), dup_hi(sw[j]), a[j]);
  if (V == 2) {   // no tensor work: the fragments only folded into the sink
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sink ^= a[j][e];
    return;
  }
  wgmma_fence();
  const u64 desc = wgmma_desc_sw128(xaddr);
#pragma unroll
  for (int j = 0; j < 4; ++j) wgmma_k16(acc[j], a[j], desc);
  wgmma_commit();
  if (V == 3) {
    if (last) wgmma_wait<0>();
  } else if (V == 1) {
    wgmma_wait<1>();
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sink = wgmma_keep(sink, prev[j][e]);
  } else {
    wgmma_wait<0>();
  }
}

template <int V, int G>
__device__ void probe(const int4* __restrict__ B, const int4* __restrict__ S, const int4* __restrict__ X,
                      float* __restrict__ OUT, int M, int N, int K, int splits, int mode) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // the swizzle works on absolute address bits: x tiles start on 1024-byte boundaries
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wgi = warp >> 2, lw = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const int NG = N / 256, cg = blockIdx.x % NG, sp = blockIdx.x / NG;
  const int nch = K / 64, P = splits * G;
  const int cmax = (nch + P - 1) / P;   // chunks (64 k) of the longest warpgroup range
  // this warpgroup's chunk range
  const int pw = sp * G + wgi;
  const int c0 = pw * nch / P, c1 = (pw + 1) * nch / P, n = c1 - c0;
  const int cb = cg * 4 + lw;
  const long rs = N / 2;                                   // int4 a k16 row of packed weights
  const int4* wp = B + (long)c0 * U * rs + cb * 32 + lane;
  const long srs = N / 8;                                  // int4 a scale row
  const int4* spp = S + cb * 8 + g;
  unsigned char* xs = smem + wgi * cmax * XT;
  // the first two batches' weights leave before x is fetched
  int4 v[2][U];
#pragma unroll
  for (int u = 0; u < U; ++u) if (0 < n) v[0][u] = ld_stream_v4(wp + u * rs);
#pragma unroll
  for (int u = 0; u < U; ++u) if (1 < n) v[1][u] = ld_stream_v4(wp + (U + u) * rs);
  // mode & 8: x arrives chunk by chunk, two chunks ahead of its use (a warpgroup's 128 threads
  // one 16-byte cp.async each a chunk, zero-filled past M), instead of all of it up front
  const bool xpipe = (mode & 8) != 0;
  const int wt = tid & 127;
  auto x_issue = [&](int c) {
    if (c < n) {
      const int r = wt >> 3, q = wt & 7;
      const int4* src = X + ((long)(r < M ? r : 0) * K + (long)(c0 + c) * 64) / 8 + q;
      cp_async16(xs + c * XT + r * 128 + ((q ^ (r & 7)) * 16), src, r < M ? 16 : 0);
    }
    cp_async_commit();
  };
  if (xpipe) {
    x_issue(0);
    x_issue(1);
  }
  // x: every warpgroup's chunks, 16 token rows (zero past M), 16-byte pieces swizzled
  for (int wq = 0; wq < ((mode & 12) ? 0 : G); ++wq) {   // mode & 4: no x (V = 2, 4 read none)
    const int pq = sp * G + wq, q0 = pq * nch / P, q1 = (pq + 1) * nch / P;
    unsigned char* xq = smem + wq * cmax * XT;
    const int pieces = (q1 - q0) * 16 * 8;
    for (int i = tid; i < pieces; i += blockDim.x) {
      const int c = i / 128, r = (i / 8) % 16, q = i % 8;
      int4 val = make_int4(0, 0, 0, 0);
      if (r < M) val = X[((long)r * K + (long)(q0 + c) * 64) / 8 + q];
      *reinterpret_cast<int4*>(xq + c * XT + r * 128 + ((q ^ (r & 7)) * 16)) = val;
    }
  }
  fence_proxy_async();
  __syncthreads();
  float acc[4][8];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;
  u32 fa[V == 3 ? 4 : 2][4][4];
  u32 sink = 0;
  const u32 xbase = smem_u32(xs);
  auto batch = [&](int i, int4 (&w)[U]) {
    if (xpipe) {
      x_issue(i + 2);
      cp_async_wait<2>();
      fence_proxy_async();
      asm volatile("bar.sync %0, 128;" :: "r"(1 + wgi) : "memory");
    }
    const int4 sc = spp[(long)((c0 + i) / 2) * srs];     // groups of 128: two chunks a scale row
#pragma unroll
    for (int u = 0; u < U; ++u)
      row_step<V>(w[u], sc, acc, xbase + i * XT + 32 * u, fa[V == 3 ? u : (u & 1)], fa[V == 3 ? u : ((u + 1) & 1)],
                  sink, u == U - 1);
    if (i + 2 < n) {
#pragma unroll
      for (int u = 0; u < U; ++u) w[u] = ld_stream_v4(wp + ((long)(i + 2) * U + u) * rs);
    }
  };
  for (int i = 0; i < n; i += 2) {
    batch(i, v[0]);
    if (i + 1 < n) batch(i + 1, v[1]);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) wgmma_hold(acc[j][e]);
  // the warpgroups' sums meet in shared memory (x is no longer read)
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) red[((wgi * 4 + lw) * 32 + j * 8 + e) * 32 + lane] = acc[j][e];
  __syncthreads();
  if (wgi != 0) return;
  float s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    s[i] = 0.f;
#pragma unroll
    for (int q = 0; q < G; ++q) s[i] += red[((q * 4 + lw) * 32 + i) * 32 + lane];
  }
  if (sink == 0x12345678u) s[0] += 1e-30f;   // keeps the fragment sets live (never true in practice)
  // value (j, e): feature cb*64 + 16j + g (+8 for e & 2), token 8 (e >> 2) + 2t (+1 for e & 1)
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const int f = cb * 64 + 16 * j + g + ((e & 2) ? 8 : 0);
      const int tok = 8 * (e >> 2) + 2 * t;
      const float2 val = make_float2(s[j * 8 + e], s[j * 8 + e + 1]);
      if ((mode & 3) == 0) {
        if (tok < M) atomicAdd(reinterpret_cast<float2*>(OUT + (long)f * 16 + tok), val);
      } else {
        *reinterpret_cast<float2*>(OUT + ((long)blockIdx.x * 256 + (f - cg * 256)) * 16 + tok) = val;
      }
    }
}

// wg16_w<V>: 4 warpgroups a block (128 registers a thread); wg16_w<V>_g3: 3 (168 registers).
#define PROBE(V, G, NAME) extern "C" __global__ void __launch_bounds__(128 * G, 1) \
NAME(const int4* B, const int4* S, const int4* X, float* OUT, int M, int N, int K, int splits, int mode) { \
  probe<V, G>(B, S, X, OUT, M, N, K, splits, mode); }
PROBE(0, 4, wg16_w0)
PROBE(1, 4, wg16_w1)
PROBE(2, 4, wg16_w2)
PROBE(3, 4, wg16_w3)
PROBE(4, 4, wg16_w4)
PROBE(0, 3, wg16_w0_g3)
PROBE(3, 3, wg16_w3_g3)
PROBE(2, 3, wg16_w2_g3)
PROBE(1, 3, wg16_w1_g3)
'''


def source() -> str:
    """The probe's CUDA source: the project's partials, then BODY."""
    from types import SimpleNamespace

    from jitmarlin import render

    prelude = render._env().from_string(PARTIALS).render(spec=SimpleNamespace(tile_m=16), act_ptx="f16")
    return prelude + BODY


# name -> (K, N, splits): N / 256 column groups x splits blocks, about one wave on 132 SMs
LAYERS = {
    "8B_qkv": (4096, 6144, 5),
    "8B_o": (4096, 4096, 8),
    "8B_gate_up": (4096, 28672, 1),
    "8B_down": (14336, 4096, 8),
    "70B_qkv": (8192, 10240, 3),
    "70B_o": (8192, 8192, 4),
    "70B_down": (28672, 8192, 4),
}


def smem_bytes(k, n, splits, g=4):
    """x for the block's G warpgroup ranges (or the sums' exchange, if larger), +1 KB to align."""
    nch, p = k // 64, splits * g
    cmax = -(-nch // p)
    return max(g * cmax * 2048, g * 4 * 32 * 32 * 4) + 1024


def compile_probe(arch="sm_90a"):
    from jitmarlin import nvrtc

    return nvrtc.compile_source(source(), "wg16_w0", arch)


# (label, kernel, warpgroups a block, mode): mode 0 x up front, 4 no x (timing only), 8 x pipelined
CONFIGS = {
    "all": [("V0", "wg16_w0", 4, 0), ("V1", "wg16_w1", 4, 0), ("V2", "wg16_w2", 4, 0),
            ("V3", "wg16_w3", 4, 0), ("V2nox", "wg16_w2", 4, 4), ("V4nox", "wg16_w4", 4, 4),
            ("V0xp", "wg16_w0", 4, 8), ("V1xp", "wg16_w1", 4, 8), ("V0slot", "wg16_w0", 4, 1)],
    "g3": [("V0xp", "wg16_w0", 4, 8), ("V2xp", "wg16_w2", 4, 8), ("V0nox", "wg16_w0", 4, 4),
           ("V2nox", "wg16_w2", 4, 4), ("g3V0xp", "wg16_w0_g3", 3, 8), ("g3V3xp", "wg16_w3_g3", 3, 8),
           ("g3V2xp", "wg16_w2_g3", 3, 8), ("g3V2nox", "wg16_w2_g3", 3, 4)],
    # session 45 (H200): the wait for all but the newest row's wgmmas at 3 warpgroups (168 registers,
    # two fragment sets without spills), beside the one-wait-a-row and dequantisation-only forms
    "v1": [("V0xp", "wg16_w0", 4, 8), ("g3V0xp", "wg16_w0_g3", 3, 8), ("g3V1xp", "wg16_w1_g3", 3, 8),
           ("g3V2xp", "wg16_w2_g3", 3, 8)],
}
CHECKED = ("V0", "V1", "V3", "V0xp", "V1xp", "g3V0xp", "g3V3xp", "g3V1xp")   # configs that compute the product


def run_layer(name, k, n, splits, m, fns, configs, check64):
    import jitmarlin
    from cupy.cuda import driver
    from jitmarlin.measure import random_weight, weight_copies
    from jitmarlin.problem import Problem

    grid = n // 256 * splits
    qw = random_weight(Problem(m, n, k, "float16", "uint4b8", 128), seed=1)
    wbytes = n * k // 2 + n * (k // 128) * 2
    ncopies = max(2, int(-(-200e6 // wbytes)) + 1)
    packs = [cp.asarray(qw.packed) for _ in range(ncopies)]
    scs = [cp.asarray(qw.scales) for _ in range(ncopies)]
    x = (cp.random.standard_normal((m, k), dtype=cp.float32)).astype(cp.float16)
    out = cp.zeros((n, 16), dtype=cp.float32)
    slot = cp.zeros((grid * 256 * 16,), dtype=cp.float32)

    def launch(kern, g, mode, i, buf):
        sm = smem_bytes(k, n, splits, g)
        driver.funcSetAttribute(fns[kern].ptr, 8, sm)   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        fns[kern]((grid,), (128 * g,), (packs[i], scs[i], x, buf, cp.int32(m), cp.int32(n), cp.int32(k),
                                        cp.int32(splits), cp.int32(mode)), shared_mem=sm)

    # correctness: against jitmarlin's own kernel on the same x (every layer) and the float64
    # reference of the dequantised weight (check64: the first layer only, it takes host time)
    qws = weight_copies(qw, ncopies)
    jm_out = jitmarlin.linear(x, qws[0]).astype(cp.float64)
    errs = []
    if check64:
        ref = x.get().astype(np.float64) @ jitmarlin.dequantize(qw).astype(np.float64).T
        errs.append(f"jm-vs-f64 {np.linalg.norm(jm_out.get() - ref) / np.linalg.norm(ref):.1e}")
    idx = list(range(ncopies))
    times = []
    for label, kern, g, mode in configs:
        buf = slot if mode & 1 else out
        if label in CHECKED:
            out.fill(0)
            launch(kern, g, mode, 0, out)
            got = out[:, :m].T.astype(cp.float64)
            e = float(cp.linalg.norm(got - jm_out) / cp.linalg.norm(jm_out))
            errs.append(f"{label} {e:.1e}")
            if check64 and label == configs[0][0]:
                errs.append(f"{label}-vs-f64 {np.linalg.norm(got.get() - ref) / np.linalg.norm(ref):.1e}")
        times.append(f"{label} {graph_us(lambda i: launch(kern, g, mode, i, buf), idx):.2f}")
    xs = {mm: (cp.random.standard_normal((mm, k), dtype=cp.float32)).astype(cp.float16) for mm in (16, 8)}
    for mm in (16, 8):
        times.append(f"jmM{mm} {graph_us(lambda i: jitmarlin.linear(xs[mm], qws[i]), idx):.2f}")
    print(f"{name:11s} M={m} grid {grid}: " + "  ".join(times), flush=True)
    print(f"{'':11s} rel. errors (vs jitmarlin's kernel unless noted): " + "  ".join(errs), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="8B_down,70B_qkv,8B_gate_up,8B_qkv,70B_o,8B_o")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--configs", default="g3", choices=sorted(CONFIGS))
    ap.add_argument("--splits", default="", help="NAME=S,... overrides")
    args = ap.parse_args()
    over = dict(kv.split("=") for kv in args.splits.split(",") if kv)
    from cupy.cuda import function

    art = compile_probe()
    print("\n".join(ln for ln in art.log.splitlines() if "Compiling" in ln or "registers" in ln or "spill" in ln),
          flush=True)
    mod = function.Module()
    mod.load(art.cubin)
    configs = CONFIGS[args.configs]
    fns = {kern: mod.get_function(kern) for _, kern, _, _ in configs}
    print("us per call; V0: a wait a k16 row, V1: wait<1> with two fragment sets, V2: dequantisation "
          "only, V3: one wait a batch, V4: bare stream; nox: x not fetched (timing only), xp: x "
          "pipelined, slot: no cross-block sum; g3: 3 warpgroups a block; jmM16/jmM8: jitmarlin")
    for i, name in enumerate(args.layers.split(",")):
        k, n, splits = LAYERS[name]
        splits = int(over.get(name, splits))
        try:
            run_layer(name, k, n, splits, args.m, fns, configs, check64=(i == 0))
        except Exception as e:  # keep the other layers' numbers
            print(f"{name}: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
