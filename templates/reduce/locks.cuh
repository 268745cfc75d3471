// ---- cross-block reduction of partial sums (Stream-K) ------------------------------------------
// Blocks that share an output tile store fp32 partial sums in workspace slots and count
// themselves in on the tile's counter; the tile's finishing block waits for the count, then adds
// them up. The library owns the workspace; counters are back at zero after every launch (the
// finishing block resets its own). Partial sums go through L2 only (.cg): L1 is not coherent
// between blocks; the counter is read with acquire and bumped after a block barrier and one
// thread's device-scope release fence.
JM_DEV void arrive(int* counter) { atomic_add_gpu(counter, 1); }
JM_DEV void wait_count(const int* counter, int n) {
  while (ld_acquire_gpu(counter) < n) spin_pause();
}
JM_DEV void lock_reset(int* counter) { st_relaxed_gpu(counter, 0); }
// KEEP: evict-last in L2 (see l2_keep), for the mma.sync kernel: a contributor stores its sums at
// the start of its range and its finisher reads them at the end of its own, a whole range later
// (decode: -0.3 to -2.9 us at M = 16 on H100, tools/PERF.md entry 49). The wgmma kernel's slots
// are 8-32x larger and L2 also holds its x tiles: not kept (no gain measured at M = 256).
template <bool KEEP = true>
JM_DEV float4 partial_load(const float4* p) { return KEEP ? ld_cg_keep_f32x4(p, l2_keep()) : ld_cg_f32x4(p); }
template <bool KEEP = true>
JM_DEV void partial_store(float4* p, float4 v) {
  if (KEEP)
    st_cg_keep_f32x4(p, v, l2_keep());
  else
    st_cg_f32x4(p, v);
}

// The split-tile interface of the mma.sync kernel (reduce/cluster.cuh implements the same one):
// red_setup at the start, red_slot / red_publish on a contributing block, red_await / red_get
// on the finishing one, red_done at the end. Here every block owns one workspace slot of
// `slot_f4` float4s (a block contributes to one tile at most: its first).
struct Red {
  float4* partials;
  int* locks;
  int slot_f4;
};
struct RedSlot {
  float4* p;
  JM_INL void put(int i, float4 v) const { partial_store(p + i, v); }
};
JM_DEV Red red_setup(float4* partials, int* locks, int4* /*smem_end*/, int slot_f4, int /*arrivals*/) {
  return Red{partials, locks, slot_f4};
}
JM_DEV RedSlot red_slot(Red& r, int b, int /*b_lo*/) { return RedSlot{r.partials + (size_t)b * r.slot_f4}; }
// Every thread of the contributing block calls this after its puts: the block's barrier, then
// thread 0's release and count (as CUTLASS's barrier; every thread's fence.sc cost more).
JM_DEV void red_publish(Red& r, int b_lo, bool /*stored*/) {
  bar_sync();
  if (threadIdx.x == 0) {
    fence_release_gpu();
    arrive(r.locks + b_lo);
  }
}
// Late form (KernelSpec.late), for a contributor with steps left: every thread calls it after a
// block barrier that follows the puts (the kernel: after its next step's compute); thread 0 alone
// fences and counts the block in. The barrier makes the other threads' puts visible to thread 0,
// and its fence (cumulative) releases them all with its own.
JM_DEV void red_publish_late(Red& r, int b_lo) {
  if (threadIdx.x == 0) {
    fence_release_gpu();
    arrive(r.locks + b_lo);
  }
}
// Every thread of the finishing block calls this before its gets.
JM_DEV void red_await(Red& r, int b_lo, int contributors, bool /*reader*/) {
  if (threadIdx.x == 0) {
    wait_count(r.locks + b_lo, contributors);
    lock_reset(r.locks + b_lo);
  }
  bar_sync();
}
JM_DEV float4 red_get(const Red& r, int b, int /*b_lo*/, int i) {
  return partial_load(r.partials + (size_t)b * r.slot_f4 + i);
}
JM_DEV void red_done(Red&) {}
