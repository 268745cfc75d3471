// ---- activation fragments from shared memory: native ldmatrix (sm_75+) -------------------------
// A tiles are stored with 16-byte chunks XOR-swizzled by row, so the eight row addresses of one
// 8x8 ldmatrix land in eight different bank groups. load_a fills the common A layout for the
// 16 rows from row0 and the k16 block kk; `stride` is the tile row length in 16-byte chunks.
JM_DEV int a_swizzle(int row, int chunk) { return chunk ^ (row & 7); }
JM_DEV void load_a(FragA& a, const int4* sA, int stride, int row0, int kk) {
  const int lane = threadIdx.x & 31;
  const int row = row0 + (lane & 15);
  ldmatrix_x4(a.r, sA + row * stride + a_swizzle(row, kk * 2 + (lane >> 4)));
}
