// ---- cross-block reduction of partial sums (Stream-K) ------------------------------------------
// Blocks that share an output tile add their fp32 partial sums in a fixed order through a
// workspace slot guarded by a counter. The library owns the workspace and keeps every counter at
// zero between launches: the last block of each tile resets it.
JM_DEV void lock_wait(const int* lock, int value) {
  while (ld_acquire_gpu(lock) != value) spin_pause();
}
JM_DEV void lock_release(int* lock, int value) { st_release_gpu(lock, value); }
JM_DEV void lock_reset(int* lock) { st_relaxed_gpu(lock, 0); }
JM_DEV float4 partial_load(const float4* p) { return ld_cg_f32x4(p); }
JM_DEV void partial_store(float4* p, float4 v) { st_cg_f32x4(p, v); }
