// ---- fragments (target-neutral) -----------------------------------------------------------------
// Register fragments of one m16n8k16 tensor-core step, as the PTX ISA lays them out per lane
// (g = lane / 4, t = lane % 4):
//   FragA (16x16 activations): r[0] = row g,   k 2t..2t+1    r[1] = row g+8, k 2t..2t+1
//                              r[2] = row g,   k 2t+8..2t+9  r[3] = row g+8, k 2t+8..2t+9
//   FragB (16x8 weights):      r[0] = k 2t..2t+1, col g      r[1] = k 2t+8..2t+9, col g
//   FragC (16x8 fp32 sums):    r[0..1] = row g, cols 2t..2t+1; r[2..3] = row g+8, same cols
struct FragA { u32 r[4]; };
struct FragB { u32 r[2]; };
struct FragC { float r[4]; };

JM_DEV int jm_min(int a, int b) { return a < b ? a : b; }
JM_DEV u32 word(const int4& v, int i) {
  return (u32)(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}
