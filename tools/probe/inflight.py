#!/usr/bin/env python3
"""How many bytes in flight an SM needs (session 30): the gemv plans' weight stream without the
arithmetic, with D batches of four k16 rows in flight a warp, held in registers (`reg`, as the
gemv kernel does with D = 2) or in a per-warp shared-memory ring filled by cp.async (`ring`).
Timed like tools/bench (CUDA-graph replay, copies rotated past 4x L2).
    python3 tools/probe/inflight.py
Layers are given as (name, 64-column blocks C, k16 rows R, column blocks a block CB, blocks a
column block S): block b streams column blocks [b CB / S ...]; its 16 warps split each column
block's rows as the gemv plan of that layer does (16 / CB K-warps; S > 1: the rows over S blocks)."""
import os

import cupy as cp

from read_floor import copies_of, graph_us

SRC = r'''
template <int D>
__device__ __forceinline__ void body(const int4* __restrict__ p, int R, int C, int CB, int S, unsigned* out,
                                     bool ring) {
  extern __shared__ int4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int KW = 16 / CB;
  const int c = (blockIdx.x / S) * CB + warp / KW;
  const int part = (blockIdx.x % S) * KW + warp % KW, parts = S * KW;
  const int r0 = part * R / parts, r1 = (part + 1) * R / parts;
  const int nb = (r1 - r0) / 4;
  const long rs = (long)C * 32;
  const int4* base = p + (long)c * 32 + lane + (long)r0 * rs;
  unsigned acc = 0;
  if (!ring) {
    int4 v[D][4];
    auto ld = [&](int4 (&b)[4], int i) {
#pragma unroll
      for (int u = 0; u < 4; ++u)
        asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(b[u].x), "=r"(b[u].y), "=r"(b[u].z), "=r"(b[u].w) : "l"(base + (long)(4 * i + u) * rs));
    };
#pragma unroll
    for (int j = 0; j < D - 1; ++j)
      if (j < nb) ld(v[j], j);
    for (int i = 0; i < nb; i += D) {
#pragma unroll
      for (int j = 0; j < D; ++j) {
        if (i + j + D - 1 < nb) ld(v[(j + D - 1) % D], i + j + D - 1);
        if (i + j < nb)
#pragma unroll
          for (int u = 0; u < 4; ++u) acc ^= v[j][u].x ^ v[j][u].w;
      }
    }
  } else {
    int4* mine = smem + warp * D * 4 * 32 + lane;
    auto ld = [&](int slot, int i) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        unsigned dst = (unsigned)__cvta_generic_to_shared(mine + (slot * 4 + u) * 32);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(base + (long)(4 * i + u) * rs));
      }
    };
#pragma unroll
    for (int j = 0; j < D - 1; ++j) {
      if (j < nb) ld(j, j);
      asm volatile("cp.async.commit_group;");
    }
    for (int i = 0; i < nb; ++i) {
      if (i + D - 1 < nb) ld((i + D - 1) % D, i + D - 1);
      asm volatile("cp.async.commit_group;");
      asm volatile("cp.async.wait_group %0;" :: "n"(D - 1));
      const int slot = i % D;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        int4 x = mine[(slot * 4 + u) * 32];
        acc ^= x.x ^ x.w;
      }
    }
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
#define K(D) extern "C" __global__ void __launch_bounds__(512) rd##D(const int4* __restrict__ p, int R, int C, \
    int CB, int S, unsigned* out, int ring) { body<D>(p, R, C, CB, S, out, ring != 0); }
K(1) K(2) K(3) K(4) K(6) K(8)
'''

LAYERS = [  # name, column blocks, k16 rows, column blocks a block, blocks a column block
    ("70B qkv", 160, 512, 2, 1),
    ("70B qkv 132", 160, 512, 1, 1),   # (not a real plan: 160 blocks, one a column block)
    ("8B down", 64, 896, 1, 2),
    ("8B o", 64, 256, 1, 2),
    ("8B gate_up", 448, 256, 4, 1),
    ("70B o", 128, 512, 1, 1),
]


def main():
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    out = cp.zeros(4096, dtype=cp.uint32)
    depths = [int(d) for d in os.environ.get("DEPTHS", "1,2,3,4,6,8").split(",")]
    for name, C, R, CB, S in LAYERS:
        n16 = C * R * 32
        bufs = copies_of(n16)
        grid = C // CB * S
        row = []
        for mode in ("reg", "ring"):
            for d in depths:
                smem = 16 * d * 4 * 32 * 16 if mode == "ring" else 0
                if smem > 227 * 1024 or (mode == "reg" and d > 4):
                    continue
                k = mod.get_function(f"rd{d}")
                if smem > 48 * 1024:
                    k.max_dynamic_shared_size_bytes = smem
                t = graph_us(lambda b: k((grid,), (512,), (b, cp.int32(R), cp.int32(C), cp.int32(CB), cp.int32(S),
                                                            out, cp.int32(mode == "ring")), shared_mem=smem), bufs)
                row.append(f"{mode}{d} {t:.2f}")
        print(f"{name:12s} {n16 * 16 / 1e6:5.1f} MB grid {grid:3d}: " + "  ".join(row), flush=True)
        del bufs


if __name__ == "__main__":
    main()
