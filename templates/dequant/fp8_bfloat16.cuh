// ---- dequantisation: float8_e4m3fn -> bfloat16 -----------------------------------------------
// As for fp16 with the bf16's fields: sign at bit 15 and the exponent's three high bits at 8-10
// (the high byte), the exponent's low bit and the mantissa at 7 and 4-6 (the low byte). The
// kernel's words keep e1..e3 at bits 0-2 and the sign at 7, m0..m2 and e0 at 3-6
// (weights/kernel_form.py): one mask for the high bytes, a shift and a mask for the low ones, one
// prmt a pair. The values come out times 2^-120 (subnormals included), exact; the scale rows and
// the global scale carry the 2^120 (kernel_form.fold_exponent).
constexpr int TILES_PER_WORD = 1;
JM_DEV void dequant_word(u32 q, FragB (&b)[1]) {
  const u32 hi = q & 0x87878787u, lo = (q << 1) & 0xf0f0f0f0u;
  b[0].r[0] = prmt(hi, lo, 0x1504u);   // bytes: lo.0, hi.0, lo.1, hi.1
  b[0].r[1] = prmt(hi, lo, 0x3726u);
}
