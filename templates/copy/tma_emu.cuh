// ---- TMA on the CPU emulator (the copy/tma.cuh interface) ---------------------------------------
// A map is the array's address, its extent and the box (the launcher fills it as launch.py's
// cuTensorMapEncodeTiled does); a box copy is recorded on its mbarrier and performed when a thread
// first waits on it, with zeros outside the array; the phase completes when every arrival has come
// and the landed bytes equal those announced (emu::TxBar).
struct alignas(64) TmaMap {
  const unsigned char* base;
  long long cols, rows, row_bytes;   // elements along the contiguous dimension, rows, bytes a row
  int box_cols, box_rows, elem_bytes;
  bool swizzle128 = false;
};

JM_DEV void mbar_init(u64* bar, u32 count) { emu::txbar_init(bar, count); }
JM_DEV void mbar_init_fence() {}
JM_DEV void mbar_expect_tx(u64* bar, u32 bytes) { emu::txbar_arrive_expect(bar, bytes); }
JM_DEV void mbar_wait(u64* bar, u32 parity) { emu::txbar_wait(bar, parity); }
JM_DEV void tma_prefetch(const TmaMap* /*map*/) {}
JM_DEV void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, u64* bar) {
  emu::tma_box(dst, map->base, map->cols, map->rows, map->row_bytes, map->box_cols, map->box_rows,
               map->elem_bytes, c0, c1, bar, map->swizzle128);
}
JM_DEV void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, u64* bar, u64 /*pol*/) {
  tma_load_2d(dst, map, c0, c1, bar);
}
