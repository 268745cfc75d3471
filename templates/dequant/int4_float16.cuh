// ---- dequantisation: 4-bit integers (uint4b8, uint4) as q - 8 -> float16 -------------------------------
// A nibble v OR-ed into the low mantissa bits of 1024.0 (0x6400) gives the half 1024 + v; in bits
// 4..7 it gives 1024 + 16 v. One lop3 extracts two such halves (one per 16-bit lane), then
//   lo: (1024 + v) - 1032          = v - 8
//   hi: (1024 + 16 v) / 16 - 72    = v - 8       (one fma)
// Each 32-bit word holds 8 nibbles packed so that word j of a lane yields the FragBs of n8
// sub-tiles 2j and 2j+1 (see jitmarlin/packing.py for the layout).
constexpr int TILES_PER_WORD = 2;
JM_DEV void dequant_word(u32 q, FragB (&b)[2]) {
  FragB& b0 = b[0];
  FragB& b1 = b[1];
  const u32 LO = 0x000f000fu, HI = 0x00f000f0u, MAGIC = 0x64006400u;
  const u32 SUB = 0x64086408u;  // 1032.0 x2
  const u32 MUL = 0x2c002c00u;  // 1/16 x2
  const u32 ADD = 0xd480d480u;  // -72.0 x2
  b0.r[0] = sub_f16x2(lop3<0xea>(q, LO, MAGIC), SUB);
  b0.r[1] = fma_f16x2(lop3<0xea>(q, HI, MAGIC), MUL, ADD);
  q >>= 8;
  b1.r[0] = sub_f16x2(lop3<0xea>(q, LO, MAGIC), SUB);
  b1.r[1] = fma_f16x2(lop3<0xea>(q, HI, MAGIC), MUL, ADD);
}
