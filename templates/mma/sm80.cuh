// ---- tensor-core step: native mma.sync m16n8k16 (sm_80+) ---------------------------------------
JM_DEV void mma_16816(const FragA& a, const FragB& b, FragC& c) {
  mma_m16n8k16_{{ act_ptx }}(c.r, a.r, b.r);
}
