// ---- fragments (target-neutral) -----------------------------------------------------------------
// The common register layouts of one m16n8k16 tensor-core step, as the PTX ISA lays them out per
// lane (g = lane / 4, t = lane % 4):
//   A (16x16 activations): r[0] = row g,   k 2t..2t+1    r[1] = row g+8, k 2t..2t+1
//                          r[2] = row g,   k 2t+8..2t+9  r[3] = row g+8, k 2t+8..2t+9
//   FragB (16x8 weights):  r[0] = k 2t..2t+1, col g      r[1] = k 2t+8..2t+9, col g
//   C (16x8 fp32 sums):    r[0..1] = row g, cols 2t..2t+1; r[2..3] = row g+8, same cols
// Weights are packed (and dequantised) in the FragB layout on every architecture. The mma
// partial decides how A, B and C live in registers during the K loop (FragA, MmaB, FragC);
// after finish_c() the first four floats of a FragC are in the common C layout.
struct FragA { u32 r[4]; };
struct FragB { u32 r[2]; };

JM_DEV int jm_min(int a, int b) { return a < b ? a : b; }
constexpr int jm_cmax(int a, int b) { return a > b ? a : b; }   // for compile-time sizes
JM_DEV u32 word(const int4& v, int i) {
  return (u32)(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}
