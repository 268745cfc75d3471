// ---- dequantisation: float8_e4m3fn -> float16 ------------------------------------------------
// e4m3 (sign, 4 exponent bits, bias 7, 3 mantissa bits) sits inside the fp16 bit pattern once its
// exponent+mantissa bits move to bits 7..14 and the sign to bit 15; the result is the value
// scaled by 2^(7-15), undone by one multiply by 256 (subnormals come out right too).
constexpr int TILES_PER_WORD = 1;
JM_DEV u32 e4m3_pair_f16(u32 x) {   // x = [0, q0, 0, q1]: each code in the high byte of a half
  const u32 em = (x >> 1) & 0x3f803f80u;
  return mul_f16x2(lop3<0xea>(x, 0x80008000u, em), 0x5c005c00u);  // (x & sign) | em, x 256
}
JM_DEV void dequant_word(u32 q, FragB (&b)[1]) {
  b[0].r[0] = e4m3_pair_f16(prmt(q, 0u, 0x1404u));
  b[0].r[1] = e4m3_pair_f16(prmt(q, 0u, 0x3424u));
}
