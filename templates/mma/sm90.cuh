// ---- tensor-core step: warpgroup MMA, wgmma.mma_async (sm_90a) --------------------------------
// One warpgroup (4 consecutive warps) computes D[64 x N] += A[64 x 16] * B[16 x N]: A (the
// dequantised weights, 64 output features) comes from registers in the m16n8k16 A layout per
// warp (warp w of the group holds rows 16w..16w+15), B (the activations, N tokens) from shared
// memory through a matrix descriptor, D stays in registers: lane (g, t) of warp w holds rows
// 16w + g (+8) and columns 8j + 2t (+1) in d[4j + 0..3], the mma C layout repeated along N.
//
// B tiles are stored K-major with the 128-byte swizzle: token row r at r * 128 bytes (64 k
// values), its 16-byte chunk c at chunk position c ^ (r % 8), tile base 1024-byte aligned.
// The descriptor then needs only the start address and the 1024-byte stride between groups of
// 8 rows; k16 step s of a 64-wide K tile starts 32 * s bytes further (the swizzle is applied
// by the hardware on absolute address bits).
JM_DEV u64 wgmma_desc_sw128(u32 smem_addr) {
  return (u64)((smem_addr & 0x3ffffu) >> 4)   // start address, 16-byte units
         | ((u64)1 << 16)                        // leading byte offset: unused with this swizzle
         | ((u64)(1024 >> 4) << 32)              // stride byte offset: 8 rows x 128 bytes
         | ((u64)1 << 62);                       // swizzle mode: 128 bytes
}
// Registers written by ordinary instructions must be fenced before a wgmma reads them.
JM_DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
JM_DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
JM_DEV void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// The accumulators are outputs of an asynchronous instruction: this empty asm, placed after
// the wait, stops the compiler from reading them any earlier.
JM_DEV void wgmma_hold(float& r) { asm volatile("" : "+f"(r) :: "memory"); }
// A real instruction reading `r` (an A-fragment register of a wgmma that was in flight), placed
// after its wait: ptxas keeps `r` untouched until here. Volatile: not moved or removed.
JM_DEV u32 wgmma_keep(u32 sink, u32 r) {
  u32 out;
  asm volatile("xor.b32 %0, %1, %2;" : "=r"(out) : "r"(sink), "r"(r) : "memory");
  return out;
}
// Four 8x8 16-bit matrices stored transposed (sm_90): register q of lane (g, t) holds row g,
// columns 2t and 2t + 1 of matrix q (the mma C layout, packed); lanes 8q..8q+7 give the shared
// addresses (16-byte aligned) where columns 0..7 of matrix q land as 16-byte rows.
JM_DEV void stmatrix_x4_trans(const u32 (&r)[4], void* smem) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(smem_u32(smem)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
// cp.async writes shared memory through the generic proxy, wgmma reads it through the async
// proxy: each writer fences before the barrier that publishes a stage.
JM_DEV void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
//% set n = spec.tile_m
//% set nreg = n // 2
// D[64 x {{ n }}] += A * B for one k16 step ({{ act_ptx }} inputs, fp32 sums).
JM_DEV void wgmma_k16(float (&d)[{{ nreg }}], const u32 (&a)[4], u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %{{ nreg + 5 }}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ act_ptx }}.{{ act_ptx }} {"
//% for i in range(0, nreg, 8)
      "<% for j in range(i, i + 8) %>%{{ j }}{{ '' if j == nreg - 1 else ',' }}<% endfor %>"
//% endfor
      "}, {%{{ nreg }},%{{ nreg + 1 }},%{{ nreg + 2 }},%{{ nreg + 3 }}}, %{{ nreg + 4 }}, p, 1, 1, 0;\n}\n"
//% for i in range(0, nreg, 8)
      {{ ':' if i == 0 else ',' }} <% for j in range(i, i + 8) %>"+f"(d[{{ j }}]){{ '' if j == i + 7 else ', ' }}<% endfor %>

//% endfor
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
