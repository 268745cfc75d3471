#!/usr/bin/env python3
"""Probe of tools/PERF.md entry 39 (timing + a correctness check, not the product): the
prototype of a decode kernel without a block barrier a step and without cross-block partial sums,
timed against jitmarlin's kernel of the day. Its source here is the second prototype: each warp
streams its K range of one 64-column block through a ring of its own in shared memory (cp.async,
every lane reads back only what it copied, so no barrier), thread-block clusters split a column
block's K. The first prototype (two batches of 16-byte loads in flight in registers), which the
product kernel templates/gemv.cu.j2 grew from, was not kept; its numbers are in entry 39.
Weights uint4b8, group 128.

Usage (device): python3 tools/probe/gemv_probe.py [--m 1,16] [--shapes all] [--act float16]
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

SRC = r"""
typedef unsigned int u32;
#define DEV static __device__ __forceinline__
DEV u32 lop3ea(u32 a, u32 b, u32 c) { u32 d; asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); return d; }
DEV u32 prmt(u32 a, u32 b, u32 s) { u32 d; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s)); return d; }
DEV u32 sub_f16x2(u32 a, u32 b) { u32 d; asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d; }
DEV u32 mul_f16x2(u32 a, u32 b) { u32 d; asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d; }
DEV u32 fma_f16x2(u32 a, u32 b, u32 c) { u32 d; asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); return d; }
DEV u32 fma_bf16x2(u32 a, u32 b, u32 c) { u32 d; asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); return d; }
DEV u32 pack_f16(float lo, float hi) { u32 d; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo)); return d; }
DEV u32 pack_bf16(float lo, float hi) { u32 d; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo)); return d; }
DEV int4 ldg_stream(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
DEV u32 word(const int4& v, int i) { return (u32)(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w); }

template <bool BF>
DEV void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (BF)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Sub-tiles 2j, 2j+1 of a word, scaled: r[0], r[1] of each.
template <bool BF>
DEV void deq(u32 q, u32 s2, u32 (&b)[2][2]) {
  if constexpr (BF) {
    const u32 LO = 0x000f000fu, MAGIC = 0x43004300u, ONE = 0x3f803f80u, NEG = 0xc308c308u;
    const u32 s0 = prmt(s2, 0u, 0x1010u), s1 = prmt(s2, 0u, 0x3232u);
    b[0][0] = fma_bf16x2(fma_bf16x2(lop3ea(q, LO, MAGIC), ONE, NEG), s0, 0x80008000u);
    b[0][1] = fma_bf16x2(fma_bf16x2(lop3ea(q >> 4, LO, MAGIC), ONE, NEG), s0, 0x80008000u);
    q >>= 8;
    b[1][0] = fma_bf16x2(fma_bf16x2(lop3ea(q, LO, MAGIC), ONE, NEG), s1, 0x80008000u);
    b[1][1] = fma_bf16x2(fma_bf16x2(lop3ea(q >> 4, LO, MAGIC), ONE, NEG), s1, 0x80008000u);
  } else {
    const u32 LO = 0x000f000fu, HI = 0x00f000f0u, MAGIC = 0x64006400u;
    const u32 SUB = 0x64086408u, MUL = 0x2c002c00u, ADD = 0xd480d480u;
    const u32 s0 = prmt(s2, 0u, 0x1010u), s1 = prmt(s2, 0u, 0x3232u);
    b[0][0] = mul_f16x2(sub_f16x2(lop3ea(q, LO, MAGIC), SUB), s0);
    b[0][1] = mul_f16x2(fma_f16x2(lop3ea(q, HI, MAGIC), MUL, ADD), s0);
    q >>= 8;
    b[1][0] = mul_f16x2(sub_f16x2(lop3ea(q, LO, MAGIC), SUB), s1);
    b[1][1] = mul_f16x2(fma_f16x2(lop3ea(q, HI, MAGIC), MUL, ADD), s1);
  }
}

DEV u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
DEV void cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_u32(dst)), "l"(src));
}
DEV void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> DEV void cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
DEV u32 cl_map(const void* p, u32 rank) { u32 d; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(smem_u32(p)), "r"(rank)); return d; }
DEV void st_cl(u32 a, float v) { asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(a), "f"(v) : "memory"); }
DEV void cl_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
DEV void cl_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
DEV void cl_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
DEV u32 cl_rank() { u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }

// NW warps a block, one 64-column block a cluster of CL blocks; the CL * NW warps split K. Each
// warp streams its k16 rows through its own ring of ST stages of U rows in shared memory
// (cp.async, each lane reads back only the 16 bytes it copied: no barrier), x one batch ahead in
// registers. ROWS 1 (M <= 8) or 2 (M <= 16); group 128.
template <int NW, int CL, int U, int ST, int ROWS, bool BF>
__global__ void __launch_bounds__(NW * 32, 1) __cluster_dims__(CL, 1, 1)
gemv2(const u32* __restrict__ X, const int4* __restrict__ B, const int4* __restrict__ S,
      u32* __restrict__ C, int M, int N, int K, int lda) {
  extern __shared__ int4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u32 rank = CL > 1 ? cl_rank() : 0;
  if (CL > 1) cl_arrive_relaxed();
  const int cb = blockIdx.x / CL;
  const int KR = K / 16;
  const int wid = rank * NW + warp;
  const int per = ((KR / U + CL * NW - 1) / (CL * NW)) * U;
  const int r0 = wid * per, r1 = min(r0 + per, KR);
  const int nb = r1 > r0 ? (r1 - r0) / U : 0;       // batches of this warp
  const size_t brow = N / 2;
  const int g = lane >> 2, t = lane & 3;
  const int4* bp = B + cb * 32 + lane + (size_t)r0 * brow;
  const u32* xr0 = X + ((size_t)g * lda) / 2 + t;
  const u32* xr1 = X + ((size_t)(g + 8) * lda) / 2 + t;
  const bool row0 = g < M, row1 = ROWS > 1 && g + 8 < M;
  const int4* sp = S + cb * 8 + g;
  const int srow = N / 8;
  int4* ring = smem + warp * ST * U * 32 + lane;

  float acc[8][4];
#pragma unroll
  for (int s = 0; s < 8; ++s)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[s][e] = 0.f;

  auto fetch = [&](int b) {   // batch b into stage b % ST
    if (b < nb) {
      int4* dst = ring + (b % ST) * U * 32;
      const int4* src = bp + (size_t)b * U * brow;
#pragma unroll
      for (int u = 0; u < U; ++u) cp16(dst + u * 32, src + (size_t)u * brow);
    }
    cp_commit();
  };
  u32 xa[2][U][4];
  int4 sc[2];
  auto load_x = [&](int buf, int b) {
    const int r = r0 + b * U;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k2 = (r + u) * 8;
      xa[buf][u][0] = row0 ? xr0[k2] : 0u;
      xa[buf][u][2] = row0 ? xr0[k2 + 4] : 0u;
      xa[buf][u][1] = row1 ? xr1[k2] : 0u;
      xa[buf][u][3] = row1 ? xr1[k2 + 4] : 0u;
    }
    sc[buf] = sp[(size_t)(r / 8) * srow];
  };
  auto compute = [&](int buf, int b) {
    const int4* src = ring + (b % ST) * U * 32;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int4 w = src[u * 32];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        u32 bb[2][2];
        deq<BF>(word(w, j), word(sc[buf], j), bb);
        mma<BF>(acc[2 * j], xa[buf][u], bb[0][0], bb[0][1]);
        mma<BF>(acc[2 * j + 1], xa[buf][u], bb[1][0], bb[1][1]);
      }
    }
  };
#pragma unroll
  for (int b = 0; b < ST - 1; ++b) fetch(b);
  if (nb > 0) load_x(0, 0);
  for (int b = 0; b < nb; b += 2) {
    if (b + 1 < nb) load_x(1, b + 1);
    cp_wait<ST - 2>();
    fetch(b + ST - 1);
    compute(0, b);
    if (b + 1 >= nb) break;
    if (b + 2 < nb) load_x(0, b + 2);
    cp_wait<ST - 2>();
    fetch(b + ST);
    compute(1, b + 1);
  }
  cp_wait<0>();
  // Reduce: warps into shared memory rows x 64 columns, then the cluster into rank 0.
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);      // [NW][M][64]
  const int MV = M * 64;
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    const int col = 8 * s + 2 * t;
    if (row0) { red[(warp * M + g) * 64 + col] = acc[s][0]; red[(warp * M + g) * 64 + col + 1] = acc[s][1]; }
    if (row1) { red[(warp * M + g + 8) * 64 + col] = acc[s][2]; red[(warp * M + g + 8) * 64 + col + 1] = acc[s][3]; }
  }
  __syncthreads();
  float* tot = red + NW * MV;                        // [CL][M][64]
  if (CL > 1) cl_wait();     // every block of the cluster has started (pairs the arrive above)
  for (int e = threadIdx.x; e < MV; e += NW * 32) {
    float v = 0.f;
#pragma unroll 4
    for (int w = 0; w < NW; ++w) v += red[w * MV + e];
    if (CL > 1 && rank != 0) st_cl(cl_map(tot + rank * MV + e, 0), v);
    else tot[e] = v;
  }
  if (CL > 1) {
    cl_arrive();
    cl_wait();
    if (rank != 0) return;
  } else {
    __syncthreads();
  }
  for (int e = threadIdx.x; e < MV / 2; e += NW * 32) {
    float v0 = 0.f, v1 = 0.f;
#pragma unroll
    for (int r = 0; r < CL; ++r) { v0 += tot[r * MV + 2 * e]; v1 += tot[r * MV + 2 * e + 1]; }
    const int row = (2 * e) / 64, col = cb * 64 + (2 * e) % 64;
    C[((size_t)row * N + col) / 2] = BF ? pack_bf16(v0, v1) : pack_f16(v0, v1);
  }
}
"""

VARIANTS = [  # (NW, CL, U, ST)
    (16, 1, 4, 4), (16, 2, 4, 4), (16, 2, 4, 6), (8, 2, 4, 8), (8, 4, 4, 6), (16, 1, 4, 6), (8, 1, 4, 8), (4, 1, 4, 8), (16, 4, 4, 4),
]


def kname(v, rows, bf):
    nw, cl, u, st = v
    return f"gemv2<{nw},{cl},{u},{st},{rows},{'true' if bf else 'false'}>"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--act", default="float16")
    ap.add_argument("--variants", default="")
    ap.add_argument("--target-ms", type=float, default=20.0)
    args = ap.parse_args()
    import cupy as cp
    import numpy as np
    import torch

    import jitmarlin
    from benchlib import select_shapes
    from jitmarlin import launch
    from jitmarlin.bench import Timer, copies_needed, copy_bandwidth, floor_us, random_weights
    from jitmarlin.profiles import live_profile

    variants = VARIANTS if not args.variants else [tuple(int(v) for v in s.split("x")) for s in args.variants.split(",")]
    bf = args.act == "bfloat16"
    names = []
    for v in variants:
        for rows in (1, 2):
            names.append(kname(v, rows, bf))
    mod = cp.RawModule(code=SRC, options=("-std=c++17", "--use_fast_math"), name_expressions=names)
    dev = torch.cuda.current_device()
    l2 = live_profile(dev).l2_bytes
    bw = copy_bandwidth(torch)
    print(f"# copy {bw:.3f} TB/s; {torch.cuda.get_device_name()}")
    timer = Timer(torch, args.target_ms)
    tdt = torch.bfloat16 if bf else torch.float16
    ms = [int(v) for v in args.m.split(",")]
    rows_out = []
    for label, (k, n) in select_shapes(args.shapes).items():
        g = 128
        qws = random_weights(n, k, g, args.act, copies_needed(n * k // 2 + n * (k // g) * 2, l2))
        devs = [q.to_device(dev, args.act) for q in qws]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=tdt)
            out = torch.empty(m, n, device="cuda", dtype=tdt)
            ref = jitmarlin.linear(x, qws[0]).float()
            t_jm = timer([lambda q=q: jitmarlin.linear(x, q, out=out) for q in qws])
            line = [f"{label:16s} M={m:4d} floor {floor_us(m, n, k, g, bw):6.1f} jm {t_jm:6.1f}"]
            best = None
            for (nw, cl, u, st) in variants:
                rows = 1 if m <= 8 else 2
                if m > 16 or (k // 16) % u:
                    continue
                fn = mod.get_function(kname((nw, cl, u, st), rows, bf))
                grid = ((n // 64) * cl,)
                smem = max(nw * st * u * 512, (nw + cl) * m * 64 * 4)
                if smem > 48 * 1024:
                    fn.max_dynamic_shared_size_bytes = smem

                def call(b, s, o=out):
                    st = launch.stream_object(torch.cuda.current_stream().cuda_stream)
                    fn(grid, (nw * 32,), (np.uint64(x.data_ptr()), np.uint64(b.data.ptr), np.uint64(s.data.ptr),
                                          np.uint64(o.data_ptr()), np.int32(m), np.int32(n), np.int32(k), np.int32(k)),
                       shared_mem=smem, stream=st)
                o2 = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
                call(devs[0][0], devs[0][1], o2)
                torch.cuda.synchronize()
                err = ((o2.float() - ref).norm() / ref.norm()).item()
                t = timer([lambda d=d: call(d[0], d[1]) for d in devs])
                tag = f"{nw}c{cl}u{u}s{st}"
                line.append(f"{tag} {t:6.1f}{'' if err < 2e-3 else ' ERR%.1e' % err}")
                if err < 2e-3 and (best is None or t < best[1]):
                    best = (tag, t)
                rows_out.append({"shape": label, "K": k, "N": n, "M": m, "variant": [nw, cl, u, st], "us": t, "err": err, "jm_us": t_jm})
            if best:
                line.append(f"| best {best[0]} {best[1]:.1f} ({best[1] / t_jm:.2f}x jm)")
            print("  ".join(line), flush=True)
    out = os.environ.get("OUT")
    if out:
        import json
        json.dump({"copy_tbps": bw, "rows": rows_out}, open(os.path.join(out, f"gemv-probe-{args.act}.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
