// ---- cross-block reduction of partial sums (Stream-K) ------------------------------------------
// Blocks that share an output tile store fp32 partial sums in workspace slots and count
// themselves in on the tile's counter; the tile's finishing block waits for the count, then adds
// them up. The library owns the workspace; counters are back at zero after every launch (the
// finishing block resets its own). Partial sums go through L2 only (.cg): L1 is not coherent
// between blocks; the counter is read with acquire and bumped after a device-scope fence.
JM_DEV void arrive(int* counter) { atomic_add_gpu(counter, 1); }
JM_DEV void wait_count(const int* counter, int n) {
  while (ld_acquire_gpu(counter) < n) spin_pause();
}
JM_DEV void lock_reset(int* counter) { st_relaxed_gpu(counter, 0); }
JM_DEV float4 partial_load(const float4* p) { return ld_cg_f32x4(p); }
JM_DEV void partial_store(float4* p, float4 v) { st_cg_f32x4(p, v); }
