// ---- dequantisation: e2m1 (nvfp4, mxfp4 values) -> float16 -----------------------------------
// An e2m1 nibble (sign, 2 exponent bits, bias 1, 1 mantissa bit) becomes an fp16 pattern with
// its low three bits at 9..11 and its sign at 15: the value scaled by 2^(1-15), undone by one
// multiply by 2^14. Nibble order in the word is that of the 4-bit integer layout.
constexpr int TILES_PER_WORD = 2;
JM_DEV u32 e2m1_pair_f16(u32 q) {   // the nibbles at bits 0..3 and 16..19 of q
  const u32 em = (q << 9) & 0x0e000e00u;
  return mul_f16x2(lop3<0xea>(q << 12, 0x80008000u, em), 0x74007400u);
}
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  b[0].r[0] = e2m1_pair_f16(q);
  b[0].r[1] = e2m1_pair_f16(q >> 4);
  b[1].r[0] = e2m1_pair_f16(q >> 8);
  b[1].r[1] = e2m1_pair_f16(q >> 12);
}
