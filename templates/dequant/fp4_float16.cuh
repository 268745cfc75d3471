// ---- dequantisation: e2m1 (nvfp4, mxfp4 values) -> float16 -----------------------------------
// The eight e2m1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 are fp16 patterns whose low byte is zero, so
// a byte permute is a table lookup: with the masked nibbles as its selector, prmt of the two
// constant words below gives the high byte of each value, four codes at once. A second prmt
// spreads two of those bytes into the high bytes of a half2 (selector 8: byte 0's sign
// replicated, and every table byte is < 0x80, so 0), and one lop3 ORs in the two sign bits. The
// values are exact: no multiply (the bit decode took one, by 2^14, to undo the exponent bias).
// Nibble order in the word is that of the 4-bit integer layout: pair p is the nibbles at bits
// 4p..4p+3 and 16+4p..19+4p.
constexpr int TILES_PER_WORD = 2;
constexpr u32 E2M1_F16_LO = 0x3e3c3800u;   // high bytes of 1.5, 1, .5, 0 (magnitudes 3..0)
constexpr u32 E2M1_F16_HI = 0x46444240u;   // 6, 4, 3, 2 (magnitudes 7..4)
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  const u32 m = q & 0x77777777u;                               // magnitudes: table indices
  const u32 lo = prmt(E2M1_F16_LO, E2M1_F16_HI, m);             // codes 0..3 (bits 0..15)
  const u32 hi = prmt(E2M1_F16_LO, E2M1_F16_HI, m >> 16);       // codes 4..7
  // pair p: [0, lo byte p, 0, hi byte p], its signs (nibble bit 3) shifted to bits 15 and 31
  b[0].r[0] = lop3<0xf8>(prmt(lo, hi, 0x4808u), q << 12, 0x80008000u);
  b[0].r[1] = lop3<0xf8>(prmt(lo, hi, 0x5818u), q << 8, 0x80008000u);
  b[1].r[0] = lop3<0xf8>(prmt(lo, hi, 0x6828u), q << 4, 0x80008000u);
  b[1].r[1] = lop3<0xf8>(prmt(lo, hi, 0x7838u), q, 0x80008000u);
}
