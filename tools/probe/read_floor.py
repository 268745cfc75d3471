#!/usr/bin/env python3
"""What a plain weight stream costs (session 22): a kernel that only reads B bytes (16-byte
non-allocating loads, 4 in flight a thread, grid x 512 threads) and writes one word a block,
timed like tools/bench (CUDA-graph replay of many launches, copies rotated past 4x L2). Against
the gemv kernel's time on a layer of the same bytes it shows what is left beyond moving them.
    [PATTERN=1] python3 tools/probe/read_floor.py [--mb 8.4,12.6,29.4,58.7] [--grids 64,128,132,264]
PATTERN=1 also times the gemv plans' access pattern (pattern() below)."""
import argparse
import os

import cupy as cp

SRC = r'''
extern "C" __global__ void __launch_bounds__(512) rd(const int4* __restrict__ p, long n16, unsigned* out) {
  unsigned acc = 0;
  const long stride = (long)gridDim.x * blockDim.x;
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    int4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w) : "l"(p + i + j * stride));
#pragma unroll
    for (int j = 0; j < 4; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n16; i += stride) { int4 v = p[i]; acc ^= v.x ^ v.w; }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
'''


def graph_us(launch, bufs):
    """Median µs a call of launch(buf), replayed as a CUDA graph of 8 rounds over `bufs` (copies
    that together pass 4x L2), after one eager call each."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for b in bufs:
            launch(b)
        s.begin_capture()
        reps = 8 * len(bufs)
        for r in range(reps):
            launch(bufs[r % len(bufs)])
        g = s.end_capture()
        g.launch()
        s.synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        ts = []
        for _ in range(5):
            e0.record(s)
            g.launch()
            e1.record(s)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / reps)
    return sorted(ts)[2]


def copies_of(n16):
    """Random int4 buffers of n16 16-byte chunks, enough of them to pass 200 MB (4x H100's L2)."""
    copies = max(2, int(-(-200e6 // (n16 * 16))) + 1)
    return [cp.random.randint(0, 2**31, size=n16 * 4, dtype=cp.int32) for _ in range(copies)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", default="8.4,12.6,29.4,58.7")
    ap.add_argument("--grids", default="64,128,132,264")
    args = ap.parse_args()
    k = cp.RawKernel(SRC, "rd")
    out = cp.zeros(1024, dtype=cp.uint32)
    for mb in map(float, args.mb.split(",")):
        n16 = int(mb * 1e6) // 16
        bufs = copies_of(n16)
        row = []
        for grid in map(int, args.grids.split(",")):
            t = graph_us(lambda b: k((grid,), (512,), (b, cp.int64(n16), out)), bufs)
            row.append(f"grid {grid}: {t:.2f} us ({mb * 1e6 / t / 1e6:.2f} TB/s)")
        print(f"{mb:6.1f} MB  " + "  ".join(row), flush=True)
        del bufs


# Second probe: the gemv kernel's access pattern without its arithmetic. C column blocks of R k16
# rows, 512 bytes a (row, column block); S blocks of 16 warps a column block, warp w of block s
# reading rows [(s * 16 + w) R / (16 S), ...) in batches of 4 (lane: 16 bytes a row), two batches
# in flight. layout 0: jitmarlin's (a k16 row of all column blocks contiguous, rows N x 8 bytes
# apart); layout 1: a column block's rows contiguous.
SRC2 = r'''
extern "C" __global__ void __launch_bounds__(512) rd2(const int4* __restrict__ p, int R, int C, int S, int layout,
                                                     unsigned* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = blockIdx.x / S, s = blockIdx.x % S;
  const int w = s * 16 + warp, per = R / (16 * S);
  const int r0 = w * per, r1 = r0 + per;
  const long rs = layout ? 32 : (long)C * 32;                        // int4s from row r to r + 1
  const int4* base = p + (layout ? (long)c * R * 32 : (long)c * 32) + lane;
  unsigned acc = 0;
  int4 a[4], b[4];
  auto ld = [&](int4 (&v)[4], int r) {
#pragma unroll
    for (int u = 0; u < 4; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(base + (long)(r + u) * rs));
  };
  auto use = [&](int4 (&v)[4]) {
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  };
  ld(a, r0);
  for (int r = r0 + 4; r < r1; r += 8) {
    ld(b, r);
    use(a);
    if (r + 4 < r1) ld(a, r + 4);
    use(b);
  }
  if (((r1 - r0) / 4) & 1) use(a);
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
'''


def pattern(shapes):
    k = cp.RawKernel(SRC2, "rd2", options=("-std=c++17",))
    out = cp.zeros(4096, dtype=cp.uint32)
    for name, C, R, S in shapes:
        n16 = C * R * 32
        bufs = copies_of(n16)
        row = []
        for layout in (0, 1):
            t = graph_us(lambda b: k((C * S,), (512,), (b, cp.int32(R), cp.int32(C), cp.int32(S),
                                                         cp.int32(layout), out)), bufs)
            row.append(f"layout {layout}: {t:.2f} us ({n16 * 16 / t / 1e6:.2f} TB/s)")
        print(f"{name:10s} {n16 * 16 / 1e6:6.1f} MB grid {C * S:4d}  " + "  ".join(row), flush=True)
        del bufs


if __name__ == "__main__":
    main()
    if os.environ.get("PATTERN"):
        # (name, column blocks, k16 rows, blocks a column block) as the gemv plans of those layers
        pattern([("8B o", 64, 256, 2), ("8B down", 64, 896, 2), ("70B o", 128, 512, 1),
                 ("70B down", 128, 1792, 1), ("8B gate_up", 448, 256, 1)])
