// ---- dequantisation: e2m1 (nvfp4, mxfp4 values) -> bfloat16 ----------------------------------
// As for fp16 with the low three bits at 6..8 of the bf16 pattern: the value scaled by
// 2^(1-127), undone by multiplying by 2^126 (0x7e80).
constexpr int TILES_PER_WORD = 2;
JM_DEV u32 e2m1_pair_bf16(u32 q) {
  const u32 em = (q << 6) & 0x01c001c0u;
  return fma_bf16x2(lop3<0xea>(q << 12, 0x80008000u, em), 0x7e807e80u, 0x80008000u);
}
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  b[0].r[0] = e2m1_pair_bf16(q);
  b[0].r[1] = e2m1_pair_bf16(q >> 4);
  b[1].r[0] = e2m1_pair_bf16(q >> 8);
  b[1].r[1] = e2m1_pair_bf16(q >> 12);
}
