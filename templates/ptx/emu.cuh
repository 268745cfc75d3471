// ---- instruction layer: CPU emulator --------------------------------------------------------------
// The same names as ptx/cuda.cuh, implemented on the host over the fiber runtime. Each function
// follows the PTX ISA's definition of its instruction (fragment layouts, rounding, zero fill), so
// the primitive partials built on top run here unchanged.
//% include "emu/runtime.h"

#define JM_KERNEL extern "C" void
#define JM_DEV static inline
#define JM_INL inline
#define JM_UNROLL
#define JM_SMEM_DECL(type, name) type* name = reinterpret_cast<type*>(::emu::cur_block().smem.data())
#define __restrict__ __restrict
#define __grid_constant__   // (kernel parameters are plain values here)
#define threadIdx (::emu::cur().tidx)
#define blockIdx (::emu::cur_block().bidx)
#define gridDim (::emu::g_rt->grid)
#define blockDim (::emu::g_rt->block)

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

template <int LUT>
JM_DEV u32 lop3(u32 a, u32 b, u32 c) {
  u32 d = 0;
  for (int m = 0; m < 8; ++m)
    if (LUT & (1 << m))
      d |= ((m & 4) ? a : ~a) & ((m & 2) ? b : ~b) & ((m & 1) ? c : ~c);
  return d;
}

JM_DEV u32 prmt(u32 a, u32 b, u32 sel) {  // default mode: each nibble of sel picks one byte
  const u64 src = (u64)a | ((u64)b << 32);
  u32 d = 0;
  for (int i = 0; i < 4; ++i) {
    const u32 s = (sel >> (4 * i)) & 0xf;
    u32 byte = (u32)(src >> (8 * (s & 7))) & 0xff;
    if (s & 8) byte = (byte & 0x80) ? 0xff : 0x00;  // sign replicate
    d |= byte << (8 * i);
  }
  return d;
}

JM_DEV u32 dup_half(u32 pair, int hi) {  // mov.b32 {l, h}, pair; mov.b32 d, {h, h} (or {l, l})
  const u32 h = hi ? pair >> 16 : pair & 0xffffu;
  return h | (h << 16);
}

JM_DEV u16 f16_from_f32(float f) { return emu::d2h(f); }
JM_DEV float f32_from_f16(u16 h) { return (float)emu::h2d(h); }
JM_DEV u32 f16x2_from_f32(float lo, float hi) { return emu::d2h(lo) | ((u32)emu::d2h(hi) << 16); }
JM_DEV u32 bf16x2_from_f32(float lo, float hi) { return emu::d2b(lo) | ((u32)emu::d2b(hi) << 16); }

#define JM_EMU_F16X2(name, expr)                                            \
  JM_DEV u32 name(u32 a, u32 b) {                                           \
    const double a0 = emu::h2d(a & 0xffff), a1 = emu::h2d(a >> 16);          \
    const double b0 = emu::h2d(b & 0xffff), b1 = emu::h2d(b >> 16);          \
    (void)a0; (void)a1; (void)b0; (void)b1;                                  \
    return emu::d2h(expr(a0, b0)) | ((u32)emu::d2h(expr(a1, b1)) << 16);     \
  }
#define JM_SUB(x, y) ((x) - (y))
#define JM_MUL(x, y) ((x) * (y))
JM_EMU_F16X2(sub_f16x2, JM_SUB)
JM_EMU_F16X2(mul_f16x2, JM_MUL)
JM_DEV u32 fma_f16x2(u32 a, u32 b, u32 c) {
  u32 d = 0;
  for (int i = 0; i < 2; ++i) {
    const double x = emu::h2d(a >> (16 * i)) * emu::h2d(b >> (16 * i)) + emu::h2d(c >> (16 * i));
    d |= (u32)emu::d2h(x) << (16 * i);
  }
  return d;
}
JM_DEV u32 fma_bf16x2(u32 a, u32 b, u32 c) {
  u32 d = 0;
  for (int i = 0; i < 2; ++i) {
    const double x = emu::b2d((a >> (16 * i)) & 0xffff) * emu::b2d((b >> (16 * i)) & 0xffff) +
                     emu::b2d((c >> (16 * i)) & 0xffff);
    d |= (u32)emu::d2b(x) << (16 * i);
  }
  return d;
}

// ---- tensor cores (warp collectives) ----
// ldmatrix .x4: lanes 8q..8q+7 give the row addresses of matrix q; lane l receives 32-bit word
// l % 4 of row l / 4 of each matrix.
JM_DEV void ldmatrix_x4(u32 (&r)[4], const void* p) {
  emu::check_smem(p, 16, 16, "ldmatrix row address");
  const int par = emu::warp_exchange(nullptr, 0, p);
  const emu::Warp& w = emu::cur_warp();
  const int l = emu::lane();
  for (int q = 0; q < 4; ++q) r[q] = static_cast<const u32*>(w.ptrs[par][q * 8 + l / 4])[l % 4];
}

// A half of a 16-bit value pair as a double (bf16 or fp16 bits).
template <bool BF16>
JM_DEV double half_of(u32 v, int hi) {
  const u16 h = hi ? (u16)(v >> 16) : (u16)(v & 0xffff);
  return BF16 ? emu::b2d(h) : emu::h2d(h);
}
// Element (row, k) of an m16 x k16 (or k8) A fragment in the PTX ISA's mma layout, from the
// lanes' deposits of a warp exchange (A's registers first in each deposit).
template <bool BF16>
JM_DEV double frag_a(const emu::Warp& w, int par, int row, int k) {
  const int src = (row % 8) * 4 + (k % 8) / 2, reg = (row >= 8) + 2 * (k >= 8);
  return half_of<BF16>(w.words[par][src][reg], k % 2);
}

// m16n8k16 / m16n8k8, row.col, f32 accumulate. Fragment element (row, k) of A and (k, n) of B
// are found in the deposits of the lane the PTX ISA assigns them to.
template <int K, bool BF16>
JM_DEV void mma_m16n8(float (&c)[4], const u32* a, const u32* b) {
  u32 words[6];
  const int na = K / 4, nb = K / 8;  // registers per lane: A 4 / 2, B 2 / 1
  for (int i = 0; i < na; ++i) words[i] = a[i];
  for (int i = 0; i < nb; ++i) words[na + i] = b[i];
  const int par = emu::warp_exchange(words, na + nb, nullptr);
  const emu::Warp& w = emu::cur_warp();
  auto B = [&](int k, int n) {
    const int src = n * 4 + (k % 8) / 2, reg = k >= 8;
    return half_of<BF16>(w.words[par][src][na + reg], k % 2);
  };
  const int g = emu::lane() / 4, t = emu::lane() % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    double s = c[e];
    for (int k = 0; k < K; ++k) s += frag_a<BF16>(w, par, row, k) * B(k, col);
    c[e] = (float)s;
  }
}
JM_DEV void mma_m16n8k16_f16(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  mma_m16n8<16, false>(c, a, b);
}
JM_DEV void mma_m16n8k16_bf16(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  mma_m16n8<16, true>(c, a, b);
}
JM_DEV void mma_m16n8k8_f16(float (&c)[4], u32 a0, u32 a1, u32 b0) {
  const u32 a[2] = {a0, a1}, b[1] = {b0};
  mma_m16n8<8, false>(c, a, b);
}

// m8n8k4 .row.col, f32 accumulate: four independent 8x8x4 products, one per quad-pair
// (lanes 4q..4q+3 and 16+4q..16+4q+3). PTX ISA: A row r is held by the pair's lane r (r < 4) or
// 16 + (r - 4), as elements k = 0..3; B column n likewise; accumulator element c[i] of lane L is
// at row (L & 1) + (i & 2) + 4 * (L >= 16), column (i & 4) + (L & 2) + (i & 1).
JM_DEV void mma_m8n8k4_f16(float (&c)[8], u32 a0, u32 a1, u32 b0, u32 b1) {
  const u32 words[4] = {a0, a1, b0, b1};
  const int par = emu::warp_exchange(words, 4, nullptr);
  const emu::Warp& w = emu::cur_warp();
  const int L = emu::lane(), q = (L >> 2) & 3;
  auto holder = [&](int r) { return r < 4 ? 4 * q + r : 16 + 4 * q + (r - 4); };
  auto elem = [&](int lane, int base, int k) {
    const u32 v = w.words[par][lane][base + k / 2];
    return emu::h2d((k & 1) ? (u16)(v >> 16) : (u16)(v & 0xffff));
  };
  for (int i = 0; i < 8; ++i) {
    const int row = (L & 1) + (i & 2) + 4 * (L >= 16), col = (i & 4) + (L & 2) + (i & 1);
    double s = c[i];
    for (int k = 0; k < 4; ++k) s += elem(holder(row), 0, k) * elem(holder(col), 2, k);
    c[i] = (float)s;
  }
}

// Shared addresses as the GPU sees them: offsets from the block's shared memory (1024-byte aligned
// on the host, so the low bits agree with the host address's).
JM_DEV u32 smem_u32(const void* p) {
  return (u32)(static_cast<const unsigned char*>(p) - ::emu::cur_block().smem.data());
}

// wgmma.mma_async m64nNk16 (.f32 accumulate, A from registers, B from shared memory through a
// matrix descriptor with the 128-byte swizzle, B K-major: token n's 64 k values a 128-byte row,
// groups of 8 rows the descriptor's stride apart). Each warp of the warpgroup owns rows 16w..16w+15
// of D and A (the m16n8k16 A layout); D's lane (g, t) holds rows g (+8), columns 8j + 2t (+1) in
// d[4j + 0..3]. wgmma_issue below defers it to the wait_group that retires its group.
template <bool BF16>
JM_DEV void wgmma_m64k16(float* d, int n, const u32 (&a)[4], u64 desc) {
  if ((desc >> 62) != 1) emu::fail("wgmma: only the 128-byte swizzle descriptor is modelled");
  const u32 start = (u32)(desc & 0x3fffu) << 4, stride = (u32)((desc >> 32) & 0x3fffu) << 4;
  const unsigned char* base = ::emu::cur_block().smem.data();
  u32 words[4] = {a[0], a[1], a[2], a[3]};
  const int par = emu::warp_exchange(words, 4, nullptr);
  const emu::Warp& w = emu::cur_warp();
  const int g = emu::lane() / 4, t = emu::lane() % 4;
  double a_rows[2][16];   // this lane's rows g and g + 8 of A
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) a_rows[h][k] = frag_a<BF16>(w, par, g + 8 * h, k);
  for (int j = 0; j < n / 8; ++j)
    for (int c = 0; c < 2; ++c) {
      const int col = 8 * j + 2 * t + c;
      const u32 row0 = start + (u32)(col / 8) * stride + (u32)(col % 8) * 128;
      emu::check_smem(base + (row0 & ~127u), 128, 16, "wgmma B operand row");
      double b[16];   // column col of B: token col's 16 k values, through the swizzle
      for (int k = 0; k < 16; ++k) {
        u32 at = row0 + 2 * k;
        at ^= ((at >> 7) & 7) << 4;   // the swizzle, on the address bits
        u16 h;
        std::memcpy(&h, base + at, 2);
        b[k] = half_of<BF16>(h, 0);
      }
      for (int h = 0; h < 2; ++h) {
        double s = d[4 * j + 2 * h + c];
        for (int k = 0; k < 16; ++k) s += a_rows[h][k] * b[k];
        d[4 * j + 2 * h + c] = (float)s;
      }
    }
}
// The asynchronous side, as the PTX ISA leaves it to the hardware: an issued wgmma reads its A
// registers and its shared-memory B only when a wgmma.wait_group retires its commit group, and
// its accumulators read as NaN until then (their sums are kept aside). A kernel that rewrote A's
// registers or B's stage, or read the sums, before the wait gets wrong or NaN results.
JM_DEV void wgmma_issue(float* d, int n, const u32 (&a)[4], u64 desc, bool bf16) {
  emu::Thread& th = emu::cur();
  auto it = th.wg_sums.find(d);
  if (it == th.wg_sums.end()) {
    th.wg_sums.emplace(d, std::vector<float>(d, d + n / 2));
    for (int i = 0; i < n / 2; ++i) d[i] = std::nanf("");
  }
  th.wg_open.push_back(emu::WgmmaOp{d, n, a, desc, bf16});
}
JM_DEV void wgmma_commit_group() {
  emu::Thread& th = emu::cur();
  th.wg_groups.push_back(std::move(th.wg_open));
  th.wg_open.clear();
}
JM_DEV void wgmma_wait_group(int pending) {
  emu::Thread& th = emu::cur();
  if (!th.wg_open.empty()) emu::fail("wgmma.wait_group: wgmmas issued after the last commit_group");
  while ((int)th.wg_groups.size() > pending) {
    const std::vector<emu::WgmmaOp> group = std::move(th.wg_groups.front());
    th.wg_groups.erase(th.wg_groups.begin());
    for (const emu::WgmmaOp& op : group) {
      float* sums = th.wg_sums.at(op.d).data();
      const u32(&a)[4] = *reinterpret_cast<const u32(*)[4]>(op.a);
      if (op.bf16)
        wgmma_m64k16<true>(sums, op.n, a, op.desc);
      else
        wgmma_m64k16<false>(sums, op.n, a, op.desc);
    }
  }
  // accumulators no wgmma in flight writes any more get their sums back
  for (auto it = th.wg_sums.begin(); it != th.wg_sums.end();) {
    bool busy = false;
    for (const auto& g : th.wg_groups)
      for (const emu::WgmmaOp& op : g) busy = busy || op.d == it->first;
    if (busy) {
      ++it;
      continue;
    }
    std::copy(it->second.begin(), it->second.end(), it->first);
    it = th.wg_sums.erase(it);
  }
}

// stmatrix.m8n8.x4.trans: register q of lane (g, t) holds row g, columns 2t, 2t + 1 of matrix q;
// lane 8q + c gives the address where column c of matrix q lands as a 16-byte row.
JM_DEV void stmatrix_x4_trans(const u32 (&r)[4], void* smem) {
  emu::check_smem(smem, 16, 16, "stmatrix row address");
  u32 words[4] = {r[0], r[1], r[2], r[3]};
  const int par = emu::warp_exchange(words, 4, smem);
  const emu::Warp& w = emu::cur_warp();
  const int l = emu::lane(), q = l / 8, c = l % 8;
  u16 row[8];
  for (int i = 0; i < 8; ++i) {
    const u32 v = w.words[par][4 * i + c / 2][q];
    row[i] = (c & 1) ? (u16)(v >> 16) : (u16)(v & 0xffff);
  }
  std::memcpy(static_cast<unsigned char*>(const_cast<void*>(w.ptrs[par][l])), row, 16);
}

// ---- memory movement ----
JM_DEV void cp_async16(void* smem, const void* gmem, int src_bytes) {
  emu::cp_async_issue(smem, gmem, src_bytes);
}
JM_DEV void cp_async16(void* smem, const void* gmem, int src_bytes, u64 /*pol*/) {
  emu::cp_async_issue(smem, gmem, src_bytes);
}
JM_DEV u64 l2_stream_policy(bool /*once*/) { return 0; }
JM_DEV void cp_async_commit() { emu::cp_async_commit(); }
template <int N>
JM_DEV void cp_async_wait() { emu::cp_async_wait(N); }

JM_DEV u64 ld_shared_u64(const void* p) {
  emu::check_smem(p, 8, 8, "ld.shared.v2.u32");
  return *static_cast<const u64*>(p);
}
JM_DEV u32 shfl_xor(u32 v, int mask) {
  const int par = emu::warp_exchange(&v, 1, nullptr);
  return emu::cur_warp().words[par][(emu::lane() ^ mask) & 31][0];
}
JM_DEV float shfl_xor_f(float v, int mask) {
  u32 u;
  std::memcpy(&u, &v, 4);
  u = shfl_xor(u, mask);
  std::memcpy(&v, &u, 4);
  return v;
}
JM_DEV float shfl_idx_f(float v, int src) {
  u32 u;
  std::memcpy(&u, &v, 4);
  const int par = emu::warp_exchange(&u, 1, nullptr);
  u = emu::cur_warp().words[par][src & 31][0];
  std::memcpy(&v, &u, 4);
  return v;
}
JM_DEV int4 ld_global_v4(const int4* p) {
  emu::check_global(p, 16, "ld.global.v4");
  return *p;
}
JM_DEV int4 ld_stream_v4(const int4* p) {
  emu::check_global(p, 16, "ld.global.nc.L1::no_allocate.v4");
  return *p;
}
JM_DEV u32 ld_global_u32(const u32* p) {
  emu::check_global(p, 4, "ld.global.u32");
  return *p;
}
JM_DEV float4 ld_cg_f32x4(const float4* p) {
  emu::check_global(p, 16, "ld.global.cg.v4.f32");
  return *p;
}
JM_DEV void st_cg_f32x4(float4* p, float4 v) {
  emu::check_global(p, 16, "st.global.cg.v4.f32");
  *p = v;
}
JM_DEV u64 l2_keep() { return 0; }
JM_DEV float4 ld_cg_keep_f32x4(const float4* p, u64 /*pol*/) { return ld_cg_f32x4(p); }
JM_DEV void st_cg_keep_f32x4(float4* p, float4 v, u64 /*pol*/) { st_cg_f32x4(p, v); }
JM_DEV int atomic_add_gpu(int* p, int v) {
  emu::check_global(p, 4, "atom.add");
  const int old = *p;
  *p = old + v;
  emu::g_rt->progress++;
  return old;
}
JM_DEV int ld_acquire_gpu(const int* p) {
  emu::check_global(p, 4, "ld.acquire.gpu");
  return *reinterpret_cast<const volatile int*>(p);
}
JM_DEV void st_relaxed_gpu(int* p, int v) {
  emu::check_global(p, 4, "st.relaxed.gpu");
  *reinterpret_cast<volatile int*>(p) = v;
  emu::g_rt->progress++;
}
JM_DEV void st_relaxed_gpu_u64(u64* p, u64 v) {
  emu::check_global(p, 8, "st.relaxed.gpu.b64");
  *reinterpret_cast<volatile u64*>(p) = v;
  emu::g_rt->progress++;
}
JM_DEV u64 ld_relaxed_gpu_u64(const u64* p) {
  emu::check_global(p, 8, "ld.relaxed.gpu.b64");
  return *reinterpret_cast<const volatile u64*>(p);
}
JM_DEV void atom_exch_gpu_b128(u64* p, u64& lo, u64& hi) {
  emu::check_global(p, 16, "atom.exch.gpu.b128");
  if (reinterpret_cast<uintptr_t>(p) % 16) emu::fail("atom.exch.b128 address not 16-byte aligned");
  volatile u64* q = reinterpret_cast<volatile u64*>(p);
  const u64 o0 = q[0], o1 = q[1];
  q[0] = lo;
  q[1] = hi;
  lo = o0;
  hi = o1;
  emu::g_rt->progress++;
}
JM_DEV u32 f32_bits(float v) {
  u32 u;
  std::memcpy(&u, &v, 4);
  return u;
}
JM_DEV float f32_of(u32 u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
JM_DEV void syncwarp() {
  const u32 none = 0;
  emu::warp_exchange(&none, 0, nullptr);
}
JM_DEV int atomic_add_cta(int* p, int v) {
  emu::check_smem(p, 4, 4, "atom.shared.add");
  const int old = *p;
  *p = old + v;
  emu::g_rt->progress++;
  return old;
}
JM_DEV void fence_cta() {}
JM_DEV void fence_release_gpu() {}
JM_DEV void spin_pause() { emu::yield(); }
// Programmatic dependent launch: the emulator runs one grid at a time, so there is nothing to
// wait for; the wait still records that global memory was not touched before it (emu::pdl_wait).
JM_DEV void grid_dep_wait() { emu::pdl_wait(); }
JM_DEV void grid_dep_launch() {}
JM_DEV float rcp_rn(float x) { return 1.0f / x; }   // 1 / x, rounded to nearest
JM_DEV void bar_sync() { emu::syncthreads(); }
JM_DEV u32 shfl_idx(u32 v, int src_lane) {
  const int par = emu::warp_exchange(&v, 1, nullptr);
  return emu::cur_warp().words[par][src_lane & 31][0];
}

// ---- thread-block clusters ----
typedef unsigned char* cl_addr;
JM_DEV cl_addr cluster_map(const void* smem, u32 rank) { return emu::cluster_map(smem, rank); }
JM_DEV void st_cluster_f32x4(cl_addr a, float4 v) {
  emu::check_cluster_smem(a, 16, 16, "st.shared::cluster.v4.f32");
  std::memcpy(a, &v, 16);
}
JM_DEV float4 ld_cluster_f32x4(cl_addr a) {
  emu::check_cluster_smem(a, 16, 16, "ld.shared::cluster.v4.f32");
  float4 v;
  std::memcpy(&v, a, 16);
  return v;
}
// mbarrier model: low word = arrivals still pending in this phase, high word = expected count
// << 1 | phase parity.
JM_DEV void cl_bar_init(u64* bar, u32 count) {
  emu::check_smem(bar, 8, 8, "mbarrier.init");
  *bar = (u64)count | ((u64)(count << 1) << 32);
}
JM_DEV void cl_bar_arrive_remote(cl_addr bar) {
  emu::check_cluster_smem(bar, 8, 8, "mbarrier.arrive.shared::cluster");
  u64 v;
  std::memcpy(&v, bar, 8);
  u32 pending = (u32)v, hi = (u32)(v >> 32);
  if (pending == 0 || pending > (hi >> 1)) emu::fail("mbarrier.arrive: barrier not initialised");
  if (--pending == 0) {
    hi ^= 1u;
    pending = hi >> 1;
  }
  v = (u64)pending | ((u64)hi << 32);
  std::memcpy(bar, &v, 8);
  emu::g_rt->progress++;
}
JM_DEV void cl_bar_wait(u64* bar, u32 parity) {
  emu::check_smem(bar, 8, 8, "mbarrier.try_wait");
  while (((*reinterpret_cast<volatile u64*>(bar) >> 32) & 1u) == parity) emu::yield();
}
JM_DEV void cluster_arrive() { emu::cluster_arrive(); }
JM_DEV void cluster_arrive_relaxed() { emu::cluster_arrive(); }
JM_DEV u32 cluster_rank() { return emu::cluster_rank(); }
JM_DEV void cluster_wait() { emu::cluster_wait(); }
JM_DEV void jm_trap() { emu::fail("trap"); }
