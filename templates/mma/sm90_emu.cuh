// ---- tensor-core step: warpgroup MMA on the CPU emulator (the mma/sm90.cuh interface) ---------
// The same functions over the instruction layer's deferred wgmmas (wgmma_issue, performed at the
// wait_group that retires their group) and stmatrix_x4_trans; fences have nothing to order here.
JM_DEV u64 wgmma_desc_sw128(u32 smem_addr) {
  return (u64)((smem_addr & 0x3ffffu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
JM_DEV void wgmma_fence() {}
JM_DEV void wgmma_commit() { wgmma_commit_group(); }
template <int N>
JM_DEV void wgmma_wait() {
  wgmma_wait_group(N);
}
JM_DEV void wgmma_hold(float& /*r*/) {}
JM_DEV u32 wgmma_keep(u32 sink, u32 r) { return sink ^ r; }
JM_DEV void fence_proxy_async() {}
//% set n = spec.tile_m
//% set nreg = n // 2
JM_DEV void wgmma_k16(float (&d)[{{ nreg }}], const u32 (&a)[4], u64 desc_b) {
  wgmma_issue(d, {{ n }}, a, desc_b, {{ "true" if act_ptx == "bf16" else "false" }});
}
