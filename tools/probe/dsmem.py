#!/usr/bin/env python3
"""What moving one tile of fp32 partial sums between the two blocks of a cluster costs, against
the same bytes through L2 (session 36, tools/PERF.md entry 73). Not a benchmark of the product:
a standalone kernel on every SM at once (66 clusters of 2 on a 132-SM H100), one launch a sample.

Each cluster's rank 1 holds NBYTES of sums in registers (as the wgmma kernel's warpgroups do at
a tile's end) and hands them to rank 0, which adds them to its own:
  dsm    st.shared::cluster from every thread into rank 0's shared memory, every thread arrives
         on rank 0's mbarrier (release, cluster scope); rank 0 waits (acquire) and reads locally
  bulk   rank 1 stages the sums in its own shared memory, one thread copies them with
         cp.async.bulk (shared::cta -> shared::cluster) completing on rank 0's mbarrier
  half   both ranks send the half the other finishes (a reduce-scatter), each waits for its own
  l2     the Stream-K kernel's way: stores to global, block barrier, one thread's fence.acq_rel.gpu
         and atomic add; rank 0's thread 0 polls (acquire), then every thread loads
%globaltimer stamps (ns): t0 rank 1 starts sending, t1 rank 1 done (arrived / counted in),
t2 rank 0 has the data (waited), t3 rank 0 has added it. Medians over clusters and launches.
    python3 tools/probe/dsmem.py [--kb 64,128] [--reps 20]
"""

import argparse

import numpy as np

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
__device__ __forceinline__ u64 now() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory"); return t; }
__device__ __forceinline__ u32 saddr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ u32 rank() { u32 r; asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ u32 remote(const void* p, u32 r) {
  u32 d; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(saddr(p)), "r"(r)); return d; }
__device__ __forceinline__ void cl_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory"); }
__device__ __forceinline__ void bar_init(u64* b, u32 n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(saddr(b)), "r"(n) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void bar_wait(u64* b) {
  asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n@!p bra W;\n}"
               :: "r"(saddr(b)) : "memory"); }
__device__ __forceinline__ void arrive_remote(u32 b) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(b) : "memory"); }
__device__ __forceinline__ void st_remote(u32 a, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" :: "r"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory"); }

// mode 0 dsm, 1 bulk, 2 half, 3 l2. n4 = float4s a thread sends (whole: NBYTES / 16 / 256).
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256, 1)
probe(int mode, int n4, u64* stamps, float4* gbuf, int* flags, float* sink) {
  extern __shared__ __align__(1024) float4 sm[];
  const u32 tid = threadIdx.x, r = rank();
  const int cid = blockIdx.x / 2;
  u64* bar = reinterpret_cast<u64*>(sm + 256 * n4);
  const u32 bytes = 256u * n4 * 16u;
  if (tid == 0) {
    if (mode == 1) {
      bar_init(bar, 1);
      if (r == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(saddr(bar)), "r"(bytes) : "memory");
    } else {
      bar_init(bar, 256);
    }
  }
  cl_sync();
  float acc = 0.f;
  // the sums a thread holds: made up on the fly (a few FADDs), not read from anywhere
  auto v = [&](int i) { return make_float4(tid + i, r + i, cid + 0.5f * i, i * 0.25f); };
  __syncthreads();
  u64 t0 = now();
  if (mode == 0 || mode == 2) {
    // whole: rank 1 -> rank 0; half: each sends the half the other finishes
    const int m4 = mode == 2 ? n4 / 2 : n4;
    if (mode == 2 || r == 1) {
      const u32 peer = r ^ 1u;
      const u32 base = remote(sm, peer);
      #pragma unroll 4
      for (int i = 0; i < m4; ++i) st_remote(base + 16u * (i * 256 + tid), v(i));
      arrive_remote(remote(bar, peer));
    }
    u64 t1 = now();
    if (mode == 2 || r == 0) {
      bar_wait(bar);
      u64 t2 = now();
      #pragma unroll 4
      for (int i = 0; i < m4; ++i) { float4 w = sm[i * 256 + tid]; acc += w.x + w.y + w.z + w.w; }
      __syncthreads();
      u64 t3 = now();
      if (tid == 0 && r == 0) { stamps[4 * cid + 2] = t2; stamps[4 * cid + 3] = t3; }
    }
    if (tid == 0 && r == 1) { stamps[4 * cid + 0] = t0; stamps[4 * cid + 1] = t1; }
  } else if (mode == 1) {
    if (r == 1) {
      #pragma unroll 4
      for (int i = 0; i < n4; ++i) sm[i * 256 + tid] = v(i);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (tid == 0) {
        asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(remote(sm, 0)), "r"(saddr(sm)), "r"(bytes), "r"(remote(bar, 0)) : "memory");
        stamps[4 * cid + 0] = t0; stamps[4 * cid + 1] = now();
      }
    } else {
      bar_wait(bar);
      u64 t2 = now();
      #pragma unroll 4
      for (int i = 0; i < n4; ++i) { float4 w = sm[i * 256 + tid]; acc += w.x + w.y + w.z + w.w; }
      __syncthreads();
      if (tid == 0) { stamps[4 * cid + 2] = t2; stamps[4 * cid + 3] = now(); }
    }
  } else {
    float4* slot = gbuf + (size_t)cid * 256 * n4;
    if (r == 1) {
      #pragma unroll 4
      for (int i = 0; i < n4; ++i) __stcg(slot + i * 256 + tid, v(i));
      __syncthreads();
      if (tid == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        atomicAdd(flags + cid, 1);
        stamps[4 * cid + 0] = t0; stamps[4 * cid + 1] = now();
      }
    } else {
      if (tid == 0) {
        int f = 0;
        do { asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(f) : "l"(flags + cid) : "memory"); } while (f == 0);
        flags[cid] = 0;
      }
      __syncthreads();
      u64 t2 = now();
      #pragma unroll 4
      for (int i = 0; i < n4; ++i) { float4 w = __ldcg(slot + i * 256 + tid); acc += w.x + w.y + w.z + w.w; }
      __syncthreads();
      if (tid == 0) { stamps[4 * cid + 2] = t2; stamps[4 * cid + 3] = now(); }
    }
  }
  if (acc == 12345.f) sink[0] = acc;
  cl_sync();   // no block leaves while the other may still touch its shared memory
}
"""

MODES = {"dsm": 0, "bulk": 1, "half": 2, "l2": 3}


def main() -> None:
    import cupy as cp

    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", default="64,128")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--clusters", type=int, default=66)
    args = ap.parse_args()
    mod = cp.RawModule(code=SRC, options=("-arch=sm_90", "-std=c++17"))
    k = mod.get_function("probe")
    nc = args.clusters
    stamps = cp.zeros(4 * nc, dtype=cp.uint64)
    flags = cp.zeros(nc, dtype=cp.int32)
    sink = cp.zeros(1, dtype=cp.float32)
    print(
        f"{'mode':5s} {'KB':>4s} {'send':>7s} {'recv':>7s} {'add':>7s} {'total':>7s}   (us, medians over {nc} clusters x {args.reps} launches)"
    )
    for kb in (int(x) for x in args.kb.split(",")):
        n4 = kb * 1024 // 16 // 256
        smem = 256 * n4 * 16 + 64
        k.max_dynamic_shared_size_bytes = smem
        gbuf = cp.zeros(nc * 256 * n4 * 4, dtype=cp.float32)
        for name, mode in MODES.items():
            rows = []
            for rep in range(args.reps + 2):
                stamps.fill(0)
                k((2 * nc,), (256,), (np.int32(mode), np.int32(n4), stamps, gbuf, flags, sink), shared_mem=smem)
                cp.cuda.Device().synchronize()
                if rep >= 2:
                    s = stamps.get().reshape(nc, 4).astype(np.int64)
                    rows.append(s)
            s = np.concatenate(rows)
            d = lambda a, b: np.median(s[:, b] - s[:, a]) / 1e3  # noqa: E731
            print(f"{name:5s} {kb:4d} {d(0, 1):7.3f} {d(0, 2):7.3f} {d(2, 3):7.3f} {d(0, 3):7.3f}")


if __name__ == "__main__":
    main()
