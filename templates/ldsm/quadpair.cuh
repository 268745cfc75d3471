// ---- activation fragments from shared memory for m8n8k4 quad-pairs (sm_70: no ldmatrix) --------
// Instead of emulating ldmatrix and then reshuffling into the m8n8k4 layout, each lane reads its
// own A row segment directly: for instruction j its quad-pair q needs row 8h + (lane % 4) +
// 4 (lane >= 16) (h = q / 2), k 4kq..4kq+3 (kq = 2j + (q & 1)): 4 halves, one 8-byte load.
// Tiles keep the plain layout (no swizzle).
JM_DEV int a_swizzle(int, int chunk) { return chunk; }
JM_DEV void load_a(FragA& a, const int4* sA, int stride, int row0, int kk) {
  const int lane = threadIdx.x & 31;
  const int q = (lane >> 2) & 3;
  const int row = row0 + 8 * (q >> 1) + (lane & 3) + 4 * (lane >> 4);
  JM_UNROLL
  for (int j = 0; j < 2; ++j) {
    const int kq = 2 * j + (q & 1);
    const char* p = reinterpret_cast<const char*>(sA + row * stride + kk * 2 + (kq >> 1)) + 8 * (kq & 1);
    const u64 v = ld_shared_u64(p);
    a.r[2 * j] = (u32)v;
    a.r[2 * j + 1] = (u32)(v >> 32);
  }
}
