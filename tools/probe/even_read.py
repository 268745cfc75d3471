#!/usr/bin/env python3
"""Bare weight reads of even gemv partitions (session 31): block b of G takes batches
[b TB / G, (b + 1) TB / G) of the layer's list of batches (column block major, 4 k16 rows a
batch), its 16 warps cut that range evenly, and a warp's run goes on across column blocks.
Against the same layer's whole-column-block partition (block b: column blocks [b CB, b CB + CB),
16 / CB warps splitting each one's rows), both with two batches in flight a warp in registers,
as the gemv kernel streams. Timed like tools/bench (CUDA-graph replay, copies rotated past 4x L2).
    python3 tools/probe/even_read.py"""
import cupy as cp

from read_floor import copies_of, graph_us

SRC = r'''
__device__ __forceinline__ void ld4(int4 (&b)[4], const int4* q, long rs) {
#pragma unroll
  for (int u = 0; u < 4; ++u)
    asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(b[u].x), "=r"(b[u].y), "=r"(b[u].z), "=r"(b[u].w) : "l"(q + (long)u * rs));
}
// whole column blocks: CB adjacent ones a block, whose K range S blocks split (16 / CB warps a
// column block in each)
extern "C" __global__ void __launch_bounds__(512) whole(const int4* __restrict__ p, int R, int C, int CB,
                                                        int S, unsigned* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, KW = 16 / CB;
  const int c = blockIdx.x / S * CB + warp / KW, part = (blockIdx.x % S) * KW + warp % KW;
  const int nb0 = part * (R / 4) / (KW * S), nb1 = (part + 1) * (R / 4) / (KW * S);
  const long rs = (long)C * 32;
  const int4* q = p + (long)c * 32 + lane + (long)nb0 * 4 * rs;
  unsigned acc = 0;
  int4 v[2][4];
  const int nb = nb1 - nb0;
  if (nb > 0) ld4(v[0], q, rs);
  for (int i = 0; i < nb; i += 2) {
    if (i + 1 < nb) ld4(v[1], q + (long)(i + 1) * 4 * rs, rs);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[0][u].x ^ v[0][u].w;
    if (i + 1 >= nb) break;
    if (i + 2 < nb) ld4(v[0], q + (long)(i + 2) * 4 * rs, rs);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[1][u].x ^ v[1][u].w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
// even: the grid's G blocks cut the list of C * R / 4 batches evenly, then the block's 16 warps
extern "C" __global__ void __launch_bounds__(512) even(const int4* __restrict__ p, int R, int C,
                                                       unsigned* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int bpc = R / 4;
  const long TB = (long)C * bpc, G = gridDim.x;
  const long b0 = blockIdx.x * TB / G, b1 = (blockIdx.x + 1) * TB / G;
  const long w0 = b0 + warp * (b1 - b0) / 16, w1 = b0 + (warp + 1) * (b1 - b0) / 16;
  const long rs = (long)C * 32;
  int c = (int)(w0 / bpc), r = (int)(w0 % bpc);
  unsigned acc = 0;
  int4 v[2][4];
  const int nb = (int)(w1 - w0);
  auto at = [&](int i) {   // batch i of the run: column block and batch row from the start
    int cc = c, rr = r + i;
    if (rr >= bpc) { rr -= bpc; ++cc; }
    return p + (long)cc * 32 + lane + (long)rr * 4 * rs;
  };
  if (nb > 0) ld4(v[0], at(0), rs);
  for (int i = 0; i < nb; i += 2) {
    if (i + 1 < nb) ld4(v[1], at(i + 1), rs);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[0][u].x ^ v[0][u].w;
    if (i + 1 >= nb) break;
    if (i + 2 < nb) ld4(v[0], at(i + 2), rs);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[1][u].x ^ v[1][u].w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
'''

LAYERS = [  # name, 64-column blocks, k16 rows, (column blocks a block, blocks a column block) to try
    ("70B qkv", 160, 512, [(2, 1), (4, 2), (8, 4), (16, 8), (8, 6), (16, 12)]),
    ("8B down", 64, 896, [(1, 2), (2, 4), (4, 8), (8, 16), (16, 32)]),
    ("8B o", 64, 256, [(1, 2), (2, 4), (4, 8), (8, 16)]),
    ("8B gate_up", 448, 256, [(4, 1), (8, 2), (16, 4)]),
    ("70B gate_up", 896, 512, [(8, 1), (16, 2)]),
    ("70B o", 128, 512, [(1, 1), (2, 2), (4, 4), (8, 8)]),
    ("70B down", 128, 1792, [(1, 1), (2, 2), (4, 4), (8, 8)]),
    ("8B qkv", 96, 256, [(1, 1), (2, 2), (4, 4), (8, 8)]),
]


def main():
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    out = cp.zeros(4096, dtype=cp.uint32)
    whole, even = mod.get_function("whole"), mod.get_function("even")
    for name, C, R, parts in LAYERS:
        n16 = C * R * 32
        bufs = copies_of(n16)
        row = []
        for CB, S in parts:
            grid = C // CB * S
            t = graph_us(lambda b: whole((grid,), (512,), (b, cp.int32(R), cp.int32(C), cp.int32(CB), cp.int32(S),
                                                             out)), bufs)
            row.append(f"{CB}x{S}:{grid} {t:.2f}")
        for g in (132,):
            t = graph_us(lambda b: even((g,), (512,), (b, cp.int32(R), cp.int32(C), out)), bufs)
            row.append(f"even {g} {t:.2f}")
        print(f"{name:11s} {n16 * 16 / 1e6:5.1f} MB: " + "  ".join(row), flush=True)
        del bufs


if __name__ == "__main__":
    main()
