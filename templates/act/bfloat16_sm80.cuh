// ---- activations: bfloat16 (sm_80+) ------------------------------------------------------------
// bf16 -> f32 is a 16-bit shift. Packed bf16 mul/add only arrive with sm_90, fma.bf16x2 is sm_80,
// so multiplication is an fma with -0.0 (exact, and keeps the sign of zero products).
JM_DEV u32 act_pack2(float lo, float hi) { return bf16x2_from_f32(lo, hi); }
JM_DEV float act_lo(u32 v) { return __uint_as_float(v << 16); }
JM_DEV float act_hi(u32 v) { return __uint_as_float(v & 0xffff0000u); }
JM_DEV u32 act_mul2(u32 a, u32 b) { return fma_bf16x2(a, b, 0x80008000u); }
JM_DEV u32 act_fma2(u32 a, u32 b, u32 c) { return fma_bf16x2(a, b, c); }
