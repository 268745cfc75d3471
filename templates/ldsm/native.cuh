// ---- activation fragments from shared memory: native ldmatrix (sm_75+) -------------------------
// A tiles are stored with 16-byte chunks XOR-swizzled by row, so the eight row addresses of one
// 8x8 ldmatrix land in eight different bank groups.
JM_DEV int a_swizzle(int row, int chunk) { return chunk ^ (row & 7); }
JM_DEV void ldsm_a(FragA& a, const int4* lane_row_ptr) { ldmatrix_x4(a.r, lane_row_ptr); }
