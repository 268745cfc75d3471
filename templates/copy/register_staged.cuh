// ---- global -> shared pipeline: register staged, 2 stages (sm_70, sm_75: no cp.async) ----------
// fetch16 issues the global loads into registers; land() stores them to shared memory just before
// the barrier that publishes the stage, so the loads overlap one stage of tensor-core work.
template <int CHUNKS>
struct Pipe {
  int4 val[CHUNKS];
  int4* dst[CHUNKS];
  bool pending;
  JM_INL Pipe() : pending(false) {}
  JM_INL void fetch16(int slot, int4* d, const int4* src, bool active, bool valid) {
    dst[slot] = active ? d : nullptr;
    int4 z;
    z.x = z.y = z.z = z.w = 0;
    val[slot] = (active && valid) ? ld_global_v4(src) : z;
    pending = true;
  }
  JM_INL void fetch16(int slot, int4* d, const int4* src, bool active, bool valid, u64 /*pol: none before sm_80*/) {
    fetch16(slot, d, src, active, valid);
  }
  JM_INL void commit() {}
  template <int PENDING>
  JM_INL void land() {
    if (pending) {
      JM_UNROLL
      for (int i = 0; i < CHUNKS; ++i)
        if (dst[i]) *dst[i] = val[i];
      pending = false;
    }
  }
};
