// ---- dequantisation: 4-bit integers (uint4b8, uint4) as q - 8 -> bfloat16 ------------------------------
// bf16 has 7 mantissa bits, so only a nibble in bits 0..3 can be OR-ed into 128.0 (0x4300) to give
// 128 + v; the second nibble of each byte is shifted down by 4 first. fma(x, 1, -136) = v - 8
// (packed bf16 subtraction needs sm_90; fma.bf16x2 exists from sm_80).
constexpr int TILES_PER_WORD = 2;
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  FragB& b0 = b[0];
  FragB& b1 = b[1];
  const u32 LO = 0x000f000fu, MAGIC = 0x43004300u;
  const u32 ONE = 0x3f803f80u;     // 1.0 x2
  const u32 NEG = 0xc308c308u;     // -136.0 x2
  b0.r[0] = fma_bf16x2(lop3<0xea>(q, LO, MAGIC), ONE, NEG);
  b0.r[1] = fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG);
  q >>= 8;
  b1.r[0] = fma_bf16x2(lop3<0xea>(q, LO, MAGIC), ONE, NEG);
  b1.r[1] = fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG);
}
// The codes with their offsets left in (KernelSpec.raw_codes): 128 + v, exact; raw_offsets() is
// the FragB of what a weight then carries beyond v - 8 (136 everywhere).
JM_DEV void dequant_word_raw(u32 q, FragB (&b)[2]) {
  const u32 LO = 0x000f000fu, MAGIC = 0x43004300u;
  b[0].r[0] = lop3<0xea>(q, LO, MAGIC);
  b[0].r[1] = lop3<0xea>(q >> 4, LO, MAGIC);
  q >>= 8;
  b[1].r[0] = lop3<0xea>(q, LO, MAGIC);
  b[1].r[1] = lop3<0xea>(q >> 4, LO, MAGIC);
}
JM_DEV FragB raw_offsets() {
  FragB f;
  f.r[0] = 0x43084308u;   // 136.0 x2
  f.r[1] = 0x43084308u;
  return f;
}
