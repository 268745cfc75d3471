// ---- dequantisation: e2m1 (nvfp4, mxfp4 values) -> bfloat16 ----------------------------------
// A bf16 holds a code in two bytes: mantissa top bit and exponent bit 0 at bits 6-7 of its low
// byte, exponent bit 1 and sign at bits 0 and 7 of its high byte. The kernel's words
// (weights/kernel_form.py) keep each code's bits so that four masks, one shift and two rotates
// leave clean low-byte (l) and high-byte (h) registers, four codes each, and one prmt a pair
// assembles two bf16 from them. The values are the e2m1 values times 2^-126 (subnormals
// included), exact; the scale rows and the global scale carry the 2^126
// (kernel_form.fold_exponent). Pairs: (v0, v1), (v2, v3) of sub-tile 2j from l1 / h1, the same
// for v4..v7 of sub-tile 2j + 1 from l2 / h2 (jitmarlin/packing.py).
constexpr int TILES_PER_WORD = 2;
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  const u32 l1 = q & 0xc0c0c0c0u;
  const u32 h1 = ((q >> 1) | (q << 31)) & 0x81818181u;
  const u32 l2 = (q << 4) & 0xc0c0c0c0u;
  const u32 h2 = ((q >> 5) | (q << 27)) & 0x81818181u;
  b[0].r[0] = prmt(l1, h1, 0x5140u);   // bytes: l1.0, h1.0, l1.1, h1.1
  b[0].r[1] = prmt(l1, h1, 0x7362u);
  b[1].r[0] = prmt(l2, h2, 0x5140u);
  b[1].r[1] = prmt(l2, h2, 0x7362u);
}
