// ---- tensor-core step: m16n8k16 on Volta, from mma.sync m8n8k4 (sm_70) ------------------------
// One m8n8k4 is four independent 8x8x4 products, one per quad-pair QP q (lanes 4q..4q+3 = "low"
// and 16+4q..16+4q+3 = "high"). A m16n8k16 step is 2 row blocks x 4 k-chunks = 8 such products,
// so two m8n8k4 keep all four quad-pairs busy:
//   QP q works on row block h = q / 2 (rows 8h..8h+7) and, in instruction j = 0, 1, on k-chunk
//   kq = 2j + (q & 1) (k 4kq..4kq+3). QPs 0 and 1 (2 and 3) thus hold partial sums of the same
//   8x8 output block over different k-chunks, in the m8n8k4 accumulator layout, for the whole K
//   loop; finish_c() adds the two partials and moves the sums into the common C layout once.
// Registers: FragA r[2j..2j+1] = the lane's A row (4 halves) for instruction j (load_a in
// ldsm/quadpair.cuh reads them straight from shared memory); MmaB r[2j..2j+1] = the lane's B
// column (4 halves) for instruction j; FragC r[0..7] = the m8n8k4 accumulators (PTX ISA: c[i] of
// lane L is row (L & 1) + (i & 2) + 4 * (L >= 16), column (i & 4) + (L & 2) + (i & 1)).
constexpr int C_REGS = 8;
struct FragC { float r[C_REGS]; };
struct MmaB { u32 r[4]; };

// The lane's B column n = (lane % 4) + 4 * (lane >= 16) for k-chunk kq = 2j + (q & 1) is held, in
// the common layout, by lanes 4n + 2(q & 1) (k 4kq, 4kq+1) and 4n + 2(q & 1) + 1 (k 4kq+2,
// 4kq+3) in register j: every lane sends the same register, one shuffle per word.
JM_DEV void prep_b(const FragB& b, MmaB& m) {
  const int lane = threadIdx.x & 31;
  const int n = (lane & 3) + 4 * (lane >> 4);
  const int src = 4 * n + 2 * ((lane >> 2) & 1);
  JM_UNROLL
  for (int j = 0; j < 2; ++j) {
    m.r[2 * j] = shfl_idx(b.r[j], src);
    m.r[2 * j + 1] = shfl_idx(b.r[j], src + 1);
  }
}

JM_DEV void mma_16816(const FragA& a, const MmaB& b, FragC& c) {
  mma_m8n8k4_f16(c.r, a.r[0], a.r[1], b.r[0], b.r[1]);
  mma_m8n8k4_f16(c.r, a.r[2], a.r[3], b.r[2], b.r[3]);
}

// Add the partner quad-pair's partial sums (lane ^ 4 holds the same elements), then fetch the
// common-layout elements: lane (g, t) wants row g (block 0, from QP 0) and row g + 8 (block 1,
// from QP 2), columns 2t, 2t + 1: accumulators (g & 2) | 4 (t >> 1) and the next one of lane
// (g & 1) | 2 (t & 1) | 16 (g >> 2) (+ 8 for QP 2). Senders cannot know which register a receiver
// wants, so all 8 are shuffled and the receiver selects.
JM_DEV void finish_c(FragC& c) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  JM_UNROLL
  for (int i = 0; i < 8; ++i) c.r[i] += shfl_xor_f(c.r[i], 4);
  const int src = (g & 1) | 2 * (t & 1) | 16 * (g >> 2);
  float top[8], bot[8];
  JM_UNROLL
  for (int i = 0; i < 8; ++i) {
    top[i] = shfl_idx_f(c.r[i], src);
    bot[i] = shfl_idx_f(c.r[i], src | 8);
  }
  const bool hi_row = (g & 2) != 0, hi_col = (t >> 1) != 0;
  auto pick = [&](const float (&v)[8], int odd) {
    return hi_col ? (hi_row ? v[6 + odd] : v[4 + odd]) : (hi_row ? v[2 + odd] : v[0 + odd]);
  };
  const float r0 = pick(top, 0), r1 = pick(top, 1), r2 = pick(bot, 0), r3 = pick(bot, 1);
  c.r[0] = r0;
  c.r[1] = r1;
  c.r[2] = r2;
  c.r[3] = r3;
}
