// ---- group scales and offsets on FragBs (after the act partial) -----------------------------
// `pair` is the word of a lane's 16-byte scale load holding one n8 sub-tile's column scale in its
// low (hi = 0) or high half: lane g gets the scales of columns 8s + g, s = 0..7, in one load
// (jitmarlin/packing.py); bcast copies that half into both halves of a word.
JM_DEV u32 bcast(u32 pair, int hi) { return prmt(pair, 0u, hi ? 0x3232u : 0x1010u); }
// FOLD: the half as a mov pair instead (dup_half), which ptxas folds into the packed multiply that
// reads it (an .H0_H0 / .H1_H1 operand): one instruction fewer a sub-tile. Kernels opt in: where
// the scaled weights serve several m16 row blocks (mma.sync, tm > 1) it cost registers (spills
// under NVRTC 12.9 for sm_86 / sm_89).
template <bool FOLD = false>
JM_DEV void scale_tile(FragB& b, u32 spair, int hi) {
  const u32 s = FOLD ? dup_half(spair, hi) : bcast(spair, hi);
  b.r[0] = act_mul2(b.r[0], s);
  b.r[1] = act_mul2(b.r[1], s);
}
template <bool FOLD = false>
JM_DEV void scale_offset_tile(FragB& b, u32 spair, u32 zpair, int hi) {
  const u32 s = FOLD ? dup_half(spair, hi) : bcast(spair, hi), z = FOLD ? dup_half(zpair, hi) : bcast(zpair, hi);
  b.r[0] = act_fma2(b.r[0], s, z);
  b.r[1] = act_fma2(b.r[1], s, z);
}
