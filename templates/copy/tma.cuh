// ---- global -> shared by the tensor memory accelerator (sm_90): one thread, one instruction --------
// A tensor map (built on the host by cuTensorMapEncodeTiled, passed by value as a
// __grid_constant__ kernel parameter) describes a 2-D array and a box; one cp.async.bulk.tensor
// copies a whole box into shared memory, applies the 128-byte swizzle and fills rows and columns
// outside the array with zeros. Completion is counted in bytes on an mbarrier: the issuing thread
// announces the bytes (expect_tx), waiters spin on the barrier's phase parity.
struct alignas(64) TmaMap { unsigned long long opaque[16]; };   // CUtensorMap: 128 bytes

JM_DEV void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes initialised barriers visible to the async proxy (the TMA unit completes them).
JM_DEV void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
JM_DEV void mbar_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// Returns once the barrier's phase of parity `parity` has completed.
JM_DEV void mbar_wait(u64* bar, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\nJM_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra JM_MBAR_WAIT;\n}"
      :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}
// Brings a tensor map into the TMA unit's cache ahead of its first copy (the map is a kernel
// parameter: without this the first box of the launch waits for the map's own fetch).
JM_DEV void tma_prefetch(const TmaMap* map) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<u64>(map)) : "memory");
}
// Box at (c0 along the contiguous dimension, c1 along the strided one), in elements.
JM_DEV void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];"
      :: "r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}
// ... under an L2 cache policy (l2_stream_policy).
JM_DEV void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, u64* bar, u64 pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      :: "r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "l"(pol)
      : "memory");
}
