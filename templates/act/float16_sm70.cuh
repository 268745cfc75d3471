// ---- activations: float16 (sm_70/sm_75: no packed f32->f16x2 conversion, two scalar cvt) -------
JM_DEV u32 act_pack2(float lo, float hi) {
  return (u32)f16_from_f32(lo) | ((u32)f16_from_f32(hi) << 16);
}
JM_DEV float act_lo(u32 v) { return f32_from_f16((u16)(v & 0xffffu)); }
JM_DEV float act_hi(u32 v) { return f32_from_f16((u16)(v >> 16)); }
JM_DEV u32 act_mul2(u32 a, u32 b) { return mul_f16x2(a, b); }
JM_DEV u32 act_fma2(u32 a, u32 b, u32 c) { return fma_f16x2(a, b, c); }
