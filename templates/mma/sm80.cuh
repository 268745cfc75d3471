// ---- tensor-core step: native mma.sync m16n8k16 (sm_80+) ---------------------------------------
// A, B and C stay in the common layouts.
constexpr int C_REGS = 4;
struct FragC { float r[C_REGS]; };
typedef FragB MmaB;
JM_DEV void prep_b(const FragB& b, MmaB& m) { m = b; }
JM_DEV void mma_16816(const FragA& a, const MmaB& b, FragC& c) {
  mma_m16n8k16_{{ act_ptx }}(c.r, a.r, b.r);
}
JM_DEV void finish_c(FragC&) {}
