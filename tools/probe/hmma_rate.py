#!/usr/bin/env python3
"""Session 45: what one mma.sync m16n8k16 (fp16 in, fp32 sums) costs a Hopper SM sub-partition, alone
and beside ALU work, in cycles (clock64 inside the kernel, one wave of blocks an SM).

Each warp keeps 8 independent sums (as the M = 16 Stream-K kernel's 8 n8 sub-tiles) and issues 8
HMMAs an iteration; before each HMMA it runs NALU ALU instructions on that HMMA's B fragment (half
lop3, half fma.rn.f16x2, a dependent chain per fragment, like the dequantisation of a word).
Prints cycles per HMMA and sub-partition (the median warp's clock64 span over its HMMAs, times
its sub-partition's warps) for 2 and 4 warps a sub-partition: if the tensor pipe and the ALU work
overlap, the time is about max(tensor, issue); if they add, the sum. (The M = 16 Stream-K kernel
has ~4.5 decode instructions a HMMA and ~8.7 instructions in all.)
    python3 tools/probe/hmma_rate.py"""
import cupy as cp
import numpy as np

SRC = r'''
typedef unsigned int u32;
template <int NALU>
__device__ __forceinline__ void alu(u32& b0, u32& b1) {
#pragma unroll
  for (int i = 0; i < NALU; ++i) {
    if (i & 1) asm volatile("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(b1) : "r"(0x3c003c00u), "r"(0x00010001u));
    else asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;" : "+r"(b0) : "r"(b1), "r"(0x00010001u * (i + 1)));
  }
}
template <int NALU>
__global__ void bench(int iters, long long* cyc, float* out) {
  u32 a[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  u32 b[8][2];
  float c[8][4];
#pragma unroll
  for (int s = 0; s < 8; ++s) { b[s][0] = 0x3c00u + s; b[s][1] = 0x3c00u + 2 * s; c[s][0] = c[s][1] = c[s][2] = c[s][3] = 0.f; }
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      alu<NALU>(b[s][0], b[s][1]);
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : "+f"(c[s][0]), "+f"(c[s][1]), "+f"(c[s][2]), "+f"(c[s][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[s][0]), "r"(b[s][1]));
    }
  }
  long long t1 = clock64();
  float acc = 0.f;
#pragma unroll
  for (int s = 0; s < 8; ++s) acc += c[s][0] + c[s][1] + c[s][2] + c[s][3] + (float)(b[s][0] ^ b[s][1]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if ((threadIdx.x & 31) == 0) cyc[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = t1 - t0;
}
template __global__ void bench<0>(int, long long*, float*);
template __global__ void bench<2>(int, long long*, float*);
template __global__ void bench<4>(int, long long*, float*);
template __global__ void bench<5>(int, long long*, float*);
template __global__ void bench<8>(int, long long*, float*);
template __global__ void bench<12>(int, long long*, float*);
'''
NALUS = (0, 2, 4, 5, 8, 12)


def main():
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=[f"bench<{n}>" for n in NALUS])
    iters = 4096
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), sms, "SMs")
    print("cycles per HMMA and sub-partition (8 HMMAs a warp and iteration); ALU = instructions a HMMA")
    for threads in (256, 512):
        w = threads // 32 // 4
        line = []
        for n in NALUS:
            k = mod.get_function(f"bench<{n}>")
            cyc = cp.zeros(sms * threads // 32, dtype=cp.int64)
            out = cp.zeros(sms * threads, dtype=cp.float32)
            k((sms,), (threads,), (np.int32(iters), cyc, out))   # warm-up
            k((sms,), (threads,), (np.int32(iters), cyc, out))
            cp.cuda.Device().synchronize()
            per_iter = float(cp.median(cyc)) / iters
            per_hmma = per_iter / (8 * w)
            issue = (1 + n) * 8 * w      # instructions a sub-partition issues an iteration (lower bound)
            line.append(f"ALU {n:2d}: {per_hmma:5.2f} cyc/HMMA (issue-bound would be {issue / (8 * w):4.1f})")
        print(f"{w} warps a sub-partition: " + "; ".join(line), flush=True)


if __name__ == "__main__":
    main()
