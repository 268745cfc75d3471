// ---- dequantisation: 8-bit integers (uint8b128, uint8) as q - 128 -> bfloat16 ------------------
// bf16 has 7 mantissa bits: 128.0 (0x4300) + the low 7 bits of q is exact, and the top bit moves
// the subtrahend between 256 (bit clear) and 128 (bit set): (128 + (q & 127)) - (256 - 128 b7)
// = q - 128. Both halves of a pair are built with byte permutes and masks, then one fma.
constexpr int TILES_PER_WORD = 1;
JM_DEV u32 int8_pair_bf16(u32 bytes2) {   // bytes2 = [q0, 0x00, q1, 0x00] little-endian
  const u32 mag = lop3<0xea>(bytes2, 0x007f007fu, 0x43004300u);               // 128 + (q & 127)
  const u32 sub = lop3<0xea>(bytes2 ^ 0x00800080u, 0x00800080u, 0x43004300u);  // 256 or 128
  return fma_bf16x2(sub, 0xbf80bf80u, mag);                                   // mag - sub
}
JM_DEV void dequant_word(u32 q, FragB (&b)[1]) {
  b[0].r[0] = int8_pair_bf16(prmt(q, 0u, 0x4140u));
  b[0].r[1] = int8_pair_bf16(prmt(q, 0u, 0x4342u));
}
