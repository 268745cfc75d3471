// ---- dequantisation: float8_e4m3fn -> float16 ------------------------------------------------
// An e4m3 code (sign, 4 exponent bits, bias 7, 3 mantissa bits) sits in an fp16 with its sign
// at bit 15, exponent at 10-13 and mantissa at 7-9: seven bits in the high byte and the
// mantissa's low bit at the top of the low byte. The kernel's words keep each code's bits in that
// order (weights/kernel_form.py: m1 m2 e0..e3 at bits 0-5, sign at 7, m0 at 6), so one mask gives
// the high bytes, a shift and a mask the low bytes, and one prmt a pair interleaves them. The
// halves are the e4m3 values times 2^-8 (subnormals included), exact; the scale rows and the
// global scale carry the 2^8 (kernel_form.fold_exponent).
constexpr int TILES_PER_WORD = 1;
JM_DEV void dequant_word(u32 q, FragB (&b)[1]) {
  const u32 hi = q & 0xbfbfbfbfu, lo = (q << 1) & 0x80808080u;
  b[0].r[0] = prmt(hi, lo, 0x1504u);   // bytes: lo.0, hi.0, lo.1, hi.1
  b[0].r[1] = prmt(hi, lo, 0x3726u);
}
