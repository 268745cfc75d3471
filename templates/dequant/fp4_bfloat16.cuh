// ---- dequantisation: e2m1 (nvfp4, mxfp4 values) -> bfloat16 ----------------------------------
// An e2m1 nibble (sign, 2 exponent bits, bias 1, 1 mantissa bit) becomes a bf16 pattern with its
// low three bits at 6..8 and its sign at 15: the value scaled by 2^(1-127), undone by one
// multiply by 2^126 (0x7e80; an fma with -0: packed bf16 mul is sm_90 only). (fp16's byte-table
// decode does not carry over: bf16 values of e2m1 have nonzero low bytes.) Pair p (the nibbles at
// bits 4p..4p+3 and 16+4p..19+4p) is shifted into place from q directly, each shift once: shifting
// q >> 4p again made the compiler mask the sign word twice.
constexpr int TILES_PER_WORD = 2;
template <int P>
JM_DEV u32 e2m1_pair_bf16(u32 q) {
  const u32 em = (P * 4 <= 6 ? q << (6 - 4 * P) : q >> (4 * P - 6)) & 0x01c001c0u;
  return fma_bf16x2(lop3<0xea>(q << (12 - 4 * P), 0x80008000u, em), 0x7e807e80u, 0x80008000u);
}
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  b[0].r[0] = e2m1_pair_bf16<0>(q);
  b[0].r[1] = e2m1_pair_bf16<1>(q);
  b[1].r[0] = e2m1_pair_bf16<2>(q);
  b[1].r[1] = e2m1_pair_bf16<3>(q);
}
