// ---- global -> shared pipeline: cp.async (sm_80+) ----------------------------------------------
// Copies go straight to shared memory without registers; each stage is one commit group and
// land<P>() waits until at most P groups are still in flight.
template <int CHUNKS>
struct Pipe {
  JM_INL void fetch16(int /*slot*/, int4* dst, const int4* src, bool active, bool valid) {
    if (active) cp_async16(dst, src, valid ? 16 : 0);
  }
  // ... under an L2 cache policy (l2_stream_policy)
  JM_INL void fetch16(int /*slot*/, int4* dst, const int4* src, bool active, bool valid, u64 pol) {
    if (active) cp_async16(dst, src, valid ? 16 : 0, pol);
  }
  JM_INL void commit() { cp_async_commit(); }
  template <int PENDING>
  JM_INL void land() { cp_async_wait<PENDING>(); }
};
