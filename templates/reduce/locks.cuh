// ---- cross-block reduction of partial sums (Stream-K) ------------------------------------------
// Blocks that share an output tile store fp32 partial sums in workspace slots and count
// themselves in on a per-tile counter; the block that arrives last adds them up. The library owns
// the workspace; counters are back at zero after every launch (the last block resets its own).
// Partial sums go through L2 only (.cg): L1 is not coherent between blocks.
JM_DEV int arrive(int* counter) { return atomic_add_gpu(counter, 1); }
JM_DEV void lock_reset(int* counter) { st_relaxed_gpu(counter, 0); }
JM_DEV float4 partial_load(const float4* p) { return ld_cg_f32x4(p); }
JM_DEV void partial_store(float4* p, float4 v) { st_cg_f32x4(p, v); }
