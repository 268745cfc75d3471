// ---- dequantisation: 8-bit integers (uint8b128, uint8) as q - 128 -> float16 -------------------
// Word w of a lane holds the four codes of n8 sub-tile w in fragment order (k 2t, 2t+1, 2t+8,
// 2t+9; see jitmarlin/packing.py). prmt puts two of them under the exponent byte of 1024.0
// (0x64): halves 1024 + q, exact for q < 1024; subtracting 1152 leaves q - 128.
constexpr int TILES_PER_WORD = 1;
JM_DEV void dequant_word(u32 q, FragB (&b)[1]) {
  const u32 MAGIC = 0x64646464u, SUB = 0x64806480u;  // 1152.0 x2
  b[0].r[0] = sub_f16x2(prmt(q, MAGIC, 0x4140u), SUB);
  b[0].r[1] = sub_f16x2(prmt(q, MAGIC, 0x4342u), SUB);
}
