// ---- dequantisation: float8_e4m3fn -> bfloat16 -----------------------------------------------
// As for fp16, with the exponent+mantissa bits at 4..10 of the bf16 pattern (bias 127): the
// value comes out scaled by 2^(7-127), undone by multiplying by 2^120 (0x7b80).
constexpr int TILES_PER_WORD = 1;
JM_DEV u32 e4m3_pair_bf16(u32 x) {  // x = [0, q0, 0, q1]
  const u32 em = (x >> 4) & 0x07f007f0u;
  return fma_bf16x2(lop3<0xea>(x, 0x80008000u, em), 0x7b807b80u, 0x80008000u);
}
JM_DEV void dequant_word(u32 q, FragB (&b)[1]) {
  b[0].r[0] = e4m3_pair_bf16(prmt(q, 0u, 0x1404u));
  b[0].r[1] = e4m3_pair_bf16(prmt(q, 0u, 0x3424u));
}
