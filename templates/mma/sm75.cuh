// ---- tensor-core step: m16n8k16 as two m16n8k8 (sm_75) -----------------------------------------
// The k16 fragments split cleanly: a[0..1] and b[0] hold k 0..7, a[2..3] and b[1] hold k 8..15,
// each exactly the m16n8k8 layout.
constexpr int C_REGS = 4;
struct FragC { float r[C_REGS]; };
typedef FragB MmaB;
JM_DEV void prep_b(const FragB& b, MmaB& m) { m = b; }
JM_DEV void mma_16816(const FragA& a, const MmaB& b, FragC& c) {
  mma_m16n8k8_f16(c.r, a.r[0], a.r[1], b.r[0]);
  mma_m16n8k8_f16(c.r, a.r[2], a.r[3], b.r[1]);
}
JM_DEV void finish_c(FragC&) {}
