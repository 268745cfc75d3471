// ---- instruction layer: CUDA (inline PTX) -------------------------------------------------------
// One small function per PTX instruction the kernel uses. Primitive partials are written only in
// terms of these names; ptx/emu.cuh gives the same names a CPU implementation, so the partials'
// own logic (fragment mapping, emulated instructions) runs unchanged in the emulator.
// Functions are static: NVRTC only emits the ones a kernel uses, so an instruction that does not
// exist on an older target is never assembled for it.
#ifndef JM_MIN_BLOCKS
#define JM_MIN_BLOCKS 1   // blocks per SM the kernel is built for (KernelSpec.occupancy)
#endif
#ifndef JM_CLUSTER
#define JM_CLUSTER 1      // blocks per thread-block cluster (KernelSpec.cluster)
#endif
#ifndef JM_THREADS
#define JM_THREADS 256    // threads per block (GemvSpec.threads; the other kernels use 256)
#endif
#if JM_CLUSTER > 1        // sm_90+: the launch groups consecutive blocks into clusters
#define JM_KERNEL extern "C" __global__ void __cluster_dims__(JM_CLUSTER, 1, 1) __launch_bounds__(JM_THREADS, JM_MIN_BLOCKS)
#else
#define JM_KERNEL extern "C" __global__ void __launch_bounds__(JM_THREADS, JM_MIN_BLOCKS)
#endif
#define JM_DEV static __device__ __forceinline__
#define JM_INL __device__ __forceinline__
#define JM_UNROLL _Pragma("unroll")
#define JM_SMEM_DECL(type, name) extern __shared__ type name[]

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

JM_DEV u32 smem_u32(const void* p) {
  u32 a;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

template <int LUT>
JM_DEV u32 lop3(u32 a, u32 b, u32 c) {
  u32 d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));
  return d;
}

JM_DEV u32 prmt(u32 a, u32 b, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// One 16-bit half of a word in both halves: a mov pair, which ptxas folds into the packed
// instruction that reads it (an .H0_H0 / .H1_H1 operand) where a prmt stays an instruction.
JM_DEV u32 dup_half(u32 pair, int hi) {
  u32 d;
  if (hi)
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {h, h}; }" : "=r"(d) : "r"(pair));
  else
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {l, l}; }" : "=r"(d) : "r"(pair));
  return d;
}

// ---- conversions and packed half arithmetic ----
JM_DEV u16 f16_from_f32(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
JM_DEV float f32_from_f16(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
JM_DEV u32 f16x2_from_f32(float lo, float hi) {  // sm_80+
  u32 d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
JM_DEV u32 bf16x2_from_f32(float lo, float hi) {  // sm_80+
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
JM_DEV u32 sub_f16x2(u32 a, u32 b) {
  u32 d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
JM_DEV u32 mul_f16x2(u32 a, u32 b) {
  u32 d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
JM_DEV u32 fma_f16x2(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
JM_DEV u32 fma_bf16x2(u32 a, u32 b, u32 c) {  // sm_80+
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// ---- tensor cores ----
JM_DEV void ldmatrix_x4(u32 (&r)[4], const void* smem) {  // sm_75+
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(smem)));
}
JM_DEV void mma_m16n8k16_f16(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {  // sm_80+
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
JM_DEV void mma_m16n8k16_bf16(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {  // sm_80+
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
JM_DEV void mma_m16n8k8_f16(float (&c)[4], u32 a0, u32 a1, u32 b0) {  // sm_75+
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}
JM_DEV void mma_m8n8k4_f16(float (&c)[8], u32 a0, u32 a1, u32 b0, u32 b1) {  // sm_70+
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, {%0,%1,%2,%3,%4,%5,%6,%7};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]), "+f"(c[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

// ---- memory movement ----
JM_DEV void cp_async16(void* smem, const void* gmem, int src_bytes) {  // sm_80+; zero-fills the rest
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(smem_u32(smem)), "l"(gmem), "r"(src_bytes));
}
// The same with an L2 cache policy (l2_stream_policy).
JM_DEV void cp_async16(void* smem, const void* gmem, int src_bytes, u64 pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;"
               :: "r"(smem_u32(smem)), "l"(gmem), "r"(src_bytes), "l"(pol));
}
// L2 policy for a stream of weights: evict-first where each byte is read once in the launch
// (`once`), so that the stream does not push x, the scales and the kept partial sums out of L2;
// evict-normal where later M chunks read the same bytes again. Pure: ptxas hoists it.
JM_DEV u64 l2_stream_policy(bool once) {
  u64 first = 0, normal = 0;
#if __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(first));
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(normal));
#endif
  return once ? first : normal;
}
JM_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
JM_DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

JM_DEV int4 ld_global_v4(const int4* p) { return *p; }
// A 16-byte load of data read once (streamed weights): read-only path, not kept in L1.
JM_DEV int4 ld_stream_v4(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
JM_DEV u32 ld_global_u32(const u32* p) { return *p; }
JM_DEV u64 ld_shared_u64(const void* p) { return *static_cast<const u64*>(p); }
// L2-only (.cg) loads and stores for the cross-block partial sums: L1 is not coherent between
// blocks. Written as the compiler intrinsics (not asm) so ptxas can schedule them against
// register pressure; they stay ordered with __syncthreads like any memory access.
JM_DEV float4 ld_cg_f32x4(const float4* p) { return __ldcg(p); }
JM_DEV void st_cg_f32x4(float4* p, float4 v) { __stcg(p, v); }
// The same with an L2 evict-last policy (sm_80+; plain .cg before): a block's partial sums can
// wait tens of microseconds for their finisher while the weights stream through L2, and without
// the policy they are evicted and read back from DRAM. Not volatile, so ptxas still schedules them.
JM_DEV u64 l2_keep() {
  u64 pol = 0;
#if __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}
JM_DEV float4 ld_cg_keep_f32x4(const float4* p, u64 pol) {
#if __CUDA_ARCH__ >= 800
  float4 v;
  asm("ld.global.cg.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(pol) : "memory");
  return v;
#else
  return __ldcg(p);
#endif
}
JM_DEV void st_cg_keep_f32x4(float4* p, float4 v, u64 pol) {
#if __CUDA_ARCH__ >= 800
  asm volatile("st.global.cg.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;"
               :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(pol) : "memory");
#else
  __stcg(p, v);
#endif
}
JM_DEV int atomic_add_gpu(int* p, int v) { return atomicAdd(p, v); }
JM_DEV int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
JM_DEV void st_relaxed_gpu(int* p, int v) {
  asm volatile("st.global.relaxed.gpu.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// 64-bit relaxed (gpu scope) accesses: single-copy atomic, so a value stored with its tag in the
// high word is seen whole or not at all (the hybrid gemv plans' workspace slots; no fence).
JM_DEV void st_relaxed_gpu_u64(u64* p, u64 v) {
  asm volatile("st.global.relaxed.gpu.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
JM_DEV u64 ld_relaxed_gpu_u64(const u64* p) {
  u64 v;
  asm volatile("ld.global.relaxed.gpu.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// 128-bit atomic exchange (gpu scope, relaxed; sm_90+): {lo, hi} go to [p], the old contents
// come back in them (the pair gemv plans' workspace slots: a piece of 4 sums in one access).
JM_DEV void atom_exch_gpu_b128(u64* p, u64& lo, u64& hi) {
  asm volatile("{\n .reg .b128 d, v;\n mov.b128 v, {%0, %1};\n"
               " atom.relaxed.gpu.global.exch.b128 d, [%2], v;\n mov.b128 {%0, %1}, d;\n}"
               : "+l"(lo), "+l"(hi) : "l"(p) : "memory");
}
JM_DEV u32 f32_bits(float v) { return __float_as_uint(v); }
JM_DEV float f32_of(u32 v) { return __uint_as_float(v); }
JM_DEV void syncwarp() { __syncwarp(); }
JM_DEV int atomic_add_cta(int* p, int v) { return atomicAdd_block(p, v); }   // shared memory
JM_DEV void fence_cta() { __threadfence_block(); }
// Release at GPU scope, by one thread for its block: writes of the block's threads that a block
// barrier ordered before it become visible to a reader that acquires what this thread writes
// next (fence.acq_rel: cheaper than every thread's fence.sc, PERF.md entry 72).
JM_DEV void fence_release_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
JM_DEV void spin_pause() { __nanosleep(20); }
// Programmatic dependent launch (sm_90+): wait until the grids this one was launched behind have
// finished and their writes are visible; let a grid launched behind this one with the attribute
// start its own prologue. Both return at once in a grid launched without the attribute, and are
// empty before sm_90 (no such instructions).
JM_DEV void grid_dep_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
JM_DEV void grid_dep_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
JM_DEV float rcp_rn(float x) { return __frcp_rn(x); }   // 1 / x, rounded to nearest
JM_DEV void bar_sync() { __syncthreads(); }
JM_DEV u32 shfl_idx(u32 v, int src_lane) { return __shfl_sync(0xffffffffu, v, src_lane); }
JM_DEV u32 shfl_xor(u32 v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
JM_DEV float shfl_xor_f(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
JM_DEV float shfl_idx_f(float v, int src_lane) { return __shfl_sync(0xffffffffu, v, src_lane); }

// ---- thread-block clusters (sm_90+): distributed shared memory and its barriers ---------------------
typedef u32 cl_addr;   // a shared::cluster address (another block's shared memory)
JM_DEV cl_addr cluster_map(const void* smem, u32 rank) {
  u32 d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(smem_u32(smem)), "r"(rank));
  return d;
}
JM_DEV void st_cluster_f32x4(cl_addr a, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};"
               :: "r"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
JM_DEV float4 ld_cluster_f32x4(cl_addr a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory");
  return v;
}
// An mbarrier in this block's shared memory that expects `count` arrivals (from any block of
// the cluster); the fence makes the initialisation visible to the other blocks.
JM_DEV void cl_bar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrive on another block's mbarrier; release at cluster scope: this thread's earlier stores
// into that block's shared memory are visible to whoever sees the phase complete.
JM_DEV void cl_bar_arrive_remote(cl_addr bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(bar) : "memory");
}
// Wait (acquire, cluster scope) until the phase of parity `parity` of this block's mbarrier completes.
JM_DEV void cl_bar_wait(u64* bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  } while (!done);
}
// Cluster-wide barrier, split: every thread arrives once, and waits once before it touches
// another block's shared memory (then all blocks of the cluster have started and set up theirs).
JM_DEV void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
// Arrive without ordering memory (the first half of "every block of the cluster has started").
JM_DEV void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
JM_DEV u32 cluster_rank() {
  u32 r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
JM_DEV void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
JM_DEV void jm_trap() { asm volatile("trap;"); }
