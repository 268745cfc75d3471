// ---- split-tile reduction through distributed shared memory (sm_90+ thread-block clusters) ------
// The planner gives each cluster whole output tiles, so the blocks that share a tile are in one
// cluster. A contributing block stores its fp32 partial sums straight into the finishing block's
// shared memory (slot b - b_lo - 1 of the receive area past the kernel's own shared memory) and
// each storing thread arrives on the finisher's mbarrier (release, cluster scope); the finisher's
// reading threads wait on it (acquire). No global workspace, no fence, no polled counter: one
// DSMEM hop instead of a chain of L2 round trips. A block finishes at most one split tile (its
// last), so the mbarrier completes one phase per launch; it is set up for the number of arrivals
// the block will get, and a cluster barrier (arrive at the start, wait before the first remote
// access) ensures every block's mbarrier is initialised before any other block touches it.
constexpr int RED_CLUSTER = JM_CLUSTER;
struct Red {
  float4* recv;   // this block's receive area: RED_CLUSTER - 1 slots
  u64* bar;       // after it
  int slot_f4;
  bool synced;    // this thread has waited on the cluster barrier
};
struct RedSlot {
  cl_addr p;
  JM_INL void put(int i, float4 v) const { st_cluster_f32x4(p + 16 * i, v); }
};
JM_DEV Red red_setup(float4* /*partials*/, int* /*locks*/, int4* smem_end, int slot_f4, int arrivals) {
  Red r{reinterpret_cast<float4*>(smem_end),
        reinterpret_cast<u64*>(smem_end + (RED_CLUSTER - 1) * slot_f4), slot_f4, false};
  if (threadIdx.x == 0) cl_bar_init(r.bar, arrivals > 0 ? arrivals : 1);
  cluster_arrive();
  return r;
}
JM_DEV void red_sync(Red& r) {
  if (!r.synced) cluster_wait();
  r.synced = true;
}
JM_DEV RedSlot red_slot(Red& r, int b, int b_lo) {
  red_sync(r);
  if (b_lo / RED_CLUSTER != b / RED_CLUSTER || b <= b_lo) jm_trap();   // a plan the planner never makes
  return RedSlot{cluster_map(r.recv + (b - b_lo - 1) * r.slot_f4, (u32)(b_lo % RED_CLUSTER))};
}
// Storing threads signal the finisher; the others have nothing to publish.
JM_DEV void red_publish(Red& r, int b_lo, bool stored) {
  if (stored) cl_bar_arrive_remote(cluster_map(r.bar, (u32)(b_lo % RED_CLUSTER)));
}
JM_DEV void red_await(Red& r, int /*b_lo*/, int /*contributors*/, bool reader) {
  if (reader) cl_bar_wait(r.bar, 0);
}
JM_DEV float4 red_get(const Red& r, int b, int b_lo, int i) { return r.recv[(b - b_lo - 1) * r.slot_f4 + i]; }
// A block may exit only after its cluster wait (the arrive/wait pair completes for every thread).
JM_DEV void red_done(Red& r) { red_sync(r); }
