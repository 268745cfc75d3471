// ---- dequantisation: e2m1 (nvfp4, mxfp4 values) -> float16 -----------------------------------
// The kernel's words keep each code's bits where an fp16's high byte wants them
// (weights/kernel_form.py): v0..v3 one a byte at bits 1-3 (mantissa top bit, two exponent low
// bits) and 7 (sign), v4..v7 at bits 4-6 and 0 of the same bytes. So a code is a whole byte:
// after one mask (v0..v3) or two shifts and a merge (v4..v7), one prmt a pair puts two of them in
// the high bytes of a half2 and zero in the low bytes. The halves are the e2m1 values times 2^-14
// (subnormals included: e = 0, m = 1 is 2^-15), exact; the scale rows and the global scale carry
// the 2^14 (kernel_form.fold_exponent). Pairs: (v0, v1), (v2, v3) of sub-tile 2j, the same for
// v4..v7 of sub-tile 2j + 1 (jitmarlin/packing.py).
constexpr int TILES_PER_WORD = 2;
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  const u32 x = q & 0x8e8e8e8eu;                                      // v0..v3
  const u32 y = ((q >> 3) & 0x0e0e0e0eu) | ((q << 7) & 0x80808080u);  // v4..v7, the same bits
  b[0].r[0] = prmt(x, 0u, 0x1404u);   // bytes: 0, v0, 0, v1 (selector 4: the zero word's byte)
  b[0].r[1] = prmt(x, 0u, 0x3424u);
  b[1].r[0] = prmt(y, 0u, 0x1404u);
  b[1].r[1] = prmt(y, 0u, 0x3424u);
}
