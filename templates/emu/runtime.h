// ---- jitmarlin CPU emulator runtime --------------------------------------------------------------
// Runs a generated kernel on the host: every CUDA thread of every block is a fiber, scheduled
// cooperatively. A fiber runs until it blocks (block barrier, warp collective, spin wait); the
// scheduler then moves on, in an order shuffled by a seed so that missing barriers show up as
// wrong results. All blocks are resident at once, as on the GPU (Stream-K blocks wait on each
// other). It finds deadlocks (no fiber can move), global reads outside the buffers the launch
// was given, misaligned shared/global addresses, and writes past the end of shared memory.
//
// Used by jitmarlin.emu (tests, debugging) only; never part of a CUDA build.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

struct int4 { int x, y, z, w; } __attribute__((aligned(16)));
struct float4 { float x, y, z, w; } __attribute__((aligned(16)));
struct float2 { float x, y; };
struct uint2 { unsigned x, y; } __attribute__((aligned(8)));
struct Dim3 { unsigned x, y, z; };
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }

#if defined(__x86_64__)
// Minimal context switch: saves callee-saved registers, MXCSR and the x87 control word on the old
// stack, stores its pointer, loads the new one. No signal-mask syscalls (ucontext's cost).
extern "C" void jm_emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl jm_emu_switch
.hidden jm_emu_switch
.type jm_emu_switch,@function
jm_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size jm_emu_switch, .-jm_emu_switch
)");
#endif

namespace emu {

constexpr int STACK_BYTES = 128 * 1024;
constexpr int SMEM_GUARD = 4096;
constexpr unsigned char SMEM_FILL = 0xA7;  // uninitialised shared memory reads as NaN-ish halves

struct CopyOp { unsigned char* dst; const unsigned char* src; int bytes; };
// A TMA box copy (cp.async.bulk.tensor.2d): rows of box_cols elements from a 2-D array, zeros
// outside it. Performed when a thread first waits on its mbarrier (as cp.async copies are when
// their group is waited for), so a read of the box before the wait sees the old contents.
struct BoxOp {
  unsigned char* dst;
  const unsigned char* base;
  long long c0, c1, cols, rows, row_bytes;
  int box_cols, box_rows, elem_bytes;
  bool swizzle128;   // CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunk j of 128-byte line i at chunk j ^ (i & 7)
};
// An mbarrier with transaction counts (TMA completion): arrivals pending in the current phase,
// the expected count, the bytes still to land, the phases completed, the boxes not yet copied.
struct TxBar { int count = 0, pending = 0; long long tx = 0; unsigned phases = 0; std::vector<BoxOp> ops; };

// A wgmma.mma_async in flight: performed when a wgmma.wait_group retires its group (emu.cuh).
struct WgmmaOp {
  float* d;
  int n;             // the instruction's N (d holds n / 2 floats of this thread)
  const uint32_t* a; // the A fragment's registers, read when the op is performed
  uint64_t desc;
  bool bf16;
};

struct Thread {
  Dim3 tidx;
  int block = 0;
  bool done = false;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  std::unique_ptr<char[]> stack;
  std::vector<std::vector<CopyOp>> groups;  // committed cp.async groups, oldest first
  std::vector<CopyOp> open;                 // issued, not yet committed
  int cluster_phase = 0;                    // barrier.cluster arrivals of this thread
  bool dep_waited = false;                  // griddepcontrol.wait executed
  std::vector<std::vector<WgmmaOp>> wg_groups;  // committed wgmma groups, oldest first
  std::vector<WgmmaOp> wg_open;                 // issued, not yet committed
  std::map<float*, std::vector<float>> wg_sums; // accumulators of wgmmas in flight (d reads NaN meanwhile)
};

struct Warp {
  int arrived = 0;
  unsigned gen = 0;
  uint32_t words[2][32][8];
  const void* ptrs[2][32];
};

// Shared memory on 1024-byte host boundaries: the kernels align their TMA and wgmma tiles by the
// low address bits (the 128-byte swizzle follows bits 7-9), as on the GPU, where shared addresses
// start at 0.
template <class T>
struct SmemAlloc {
  using value_type = T;
  SmemAlloc() = default;
  template <class U>
  SmemAlloc(const SmemAlloc<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(1024))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(1024)); }
  bool operator==(const SmemAlloc&) const { return true; }
  bool operator!=(const SmemAlloc&) const { return false; }
};

struct Block {
  Dim3 bidx;
  std::vector<unsigned char, SmemAlloc<unsigned char>> smem;
  std::map<const void*, TxBar> txbars;   // mbarriers used by TMA copies, by address
  int smem_bytes = 0;
  int arrived = 0;
  unsigned gen = 0;
  int exited = 0;      // threads that have returned from the kernel
  std::vector<Warp> warps;
};

// after_wait: a buffer a grid launched behind another (programmatic dependent launch) may touch
// only after griddepcontrol.wait (x, the output, bias, the workspace: the grid before it may write
// or still read them); the weights are not.
struct Buffer { const unsigned char* lo; const unsigned char* hi; const char* name; bool after_wait = false; };

struct Runtime {
  Dim3 grid{1, 1, 1}, block{1, 1, 1};
  std::vector<Thread> threads;
  std::vector<Block> blocks;
  std::vector<Buffer> buffers;
  Thread* cur = nullptr;
#if defined(__x86_64__)
  void* main_sp = nullptr;
#else
  ucontext_t main_ctx;
#endif
  unsigned long long progress = 0;
  int cluster = 1;                   // blocks per thread-block cluster (set by the launcher)
  std::vector<int> cluster_arrived;  // barrier.cluster arrivals, per cluster
  std::function<void()> entry;
  std::string error;
};

inline Runtime* g_rt = nullptr;

inline Thread& cur() { return *g_rt->cur; }
inline Block& cur_block() { return g_rt->blocks[g_rt->cur->block]; }

inline void yield() {
#if defined(__x86_64__)
  jm_emu_switch(&g_rt->cur->sp, g_rt->main_sp);
#else
  swapcontext(&g_rt->cur->ctx, &g_rt->main_ctx);
#endif
}

// Record the first error and park the fiber forever; the scheduler stops at the end of the round.
[[noreturn]] inline void fail(const std::string& msg) {
  if (g_rt->error.empty()) {
    char where[96];
    std::snprintf(where, sizeof where, " (block %u, thread %u)", cur_block().bidx.x, cur().tidx.x);
    g_rt->error = msg + where;
  }
  for (;;) yield();
}

inline void check_global(const void* p, size_t bytes, const char* what) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  for (const Buffer& b : g_rt->buffers)
    if (c >= b.lo && c + bytes <= b.hi) {
      if (b.after_wait && !cur().dep_waited)
        fail(std::string(what) + ": access to " + b.name + " before griddepcontrol.wait");
      return;
    }
  char msg[160];
  std::snprintf(msg, sizeof msg, "%s: global access of %zu bytes at %p is outside every buffer",
                what, bytes, p);
  fail(msg);
}

inline void pdl_wait() { cur().dep_waited = true; }

inline void check_smem(const void* p, size_t bytes, size_t align, const char* what) {
  Block& b = cur_block();
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const unsigned char* lo = b.smem.data();
  if (c < lo || c + bytes > lo + b.smem_bytes) fail(std::string(what) + ": shared-memory access out of range");
  if (reinterpret_cast<uintptr_t>(p) % align) fail(std::string(what) + ": misaligned shared-memory address");
}

// ---- thread-block clusters: consecutive blocks; any of them may address the others' shared memory ----
inline int cluster_id() { return cur().block / g_rt->cluster; }
// The address in block `rank` of this cluster that `p` (in this block's shared memory) has in its own.
inline unsigned char* cluster_map(const void* p, unsigned rank) {
  Block& b = cur_block();
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c < b.smem.data() || c >= b.smem.data() + b.smem_bytes) fail("mapa: not a shared-memory address");
  if ((int)rank >= g_rt->cluster) fail("mapa: rank outside the cluster");
  Block& t = g_rt->blocks[(size_t)cluster_id() * g_rt->cluster + rank];
  return t.smem.data() + (c - b.smem.data());
}
// A shared::cluster access must land inside a block of this cluster that has not exited.
inline void check_cluster_smem(const unsigned char* p, size_t bytes, size_t align, const char* what) {
  for (int r = 0; r < g_rt->cluster; ++r) {
    const Block& t = g_rt->blocks[(size_t)cluster_id() * g_rt->cluster + r];
    if (p >= t.smem.data() && p + bytes <= t.smem.data() + t.smem_bytes) {
      if (t.exited == (int)g_rt->block.x) fail(std::string(what) + ": the target block has exited");
      if (reinterpret_cast<uintptr_t>(p) % align) fail(std::string(what) + ": misaligned address");
      return;
    }
  }
  fail(std::string(what) + ": not the shared memory of a block of this cluster");
}
// barrier.cluster: a thread's k-th wait returns once every thread of the cluster has arrived k times.
inline void cluster_arrive() {
  g_rt->cluster_arrived[cluster_id()]++;
  cur().cluster_phase++;
  g_rt->progress++;
}
inline void cluster_wait() {
  const int need = cur().cluster_phase * g_rt->cluster * (int)g_rt->block.x;
  while (g_rt->cluster_arrived[cluster_id()] < need) yield();
}
inline unsigned cluster_rank() { return (unsigned)(cur().block % g_rt->cluster); }

// ---- block barrier ----
inline void syncthreads() {
  Block& b = cur_block();
  const unsigned g = b.gen;
  g_rt->progress++;
  if (++b.arrived == (int)(g_rt->block.x)) {
    b.arrived = 0;
    b.gen++;
  } else {
    while (b.gen == g) yield();
  }
}

// ---- warp collectives: every lane deposits its operands, waits for all 32, reads the others' ----
// Two deposit buffers alternate, so a fast lane can deposit for the next collective while a slow
// one still reads this one (no lane can get two collectives ahead).
inline int warp_exchange(const uint32_t* words, int n, const void* ptr) {
  Block& b = cur_block();
  const int lane = cur().tidx.x % 32;
  Warp& w = b.warps[cur().tidx.x / 32];
  const unsigned g = w.gen;
  const int par = g & 1;
  for (int i = 0; i < n; ++i) w.words[par][lane][i] = words[i];
  w.ptrs[par][lane] = ptr;
  g_rt->progress++;
  if (++w.arrived == 32) {
    w.arrived = 0;
    w.gen++;
  } else {
    while (w.gen == g) yield();
  }
  return par;
}
inline Warp& cur_warp() { return cur_block().warps[cur().tidx.x / 32]; }
inline int lane() { return cur().tidx.x % 32; }

// ---- cp.async groups ----
inline void do_copy(const CopyOp& op) {
  if (op.bytes > 0) std::memcpy(op.dst, op.src, op.bytes);
  if (op.bytes < 16) std::memset(op.dst + op.bytes, 0, 16 - op.bytes);
}
inline void cp_async_issue(void* dst, const void* src, int bytes) {
  check_smem(dst, 16, 16, "cp.async destination");
  if (bytes > 0) {
    check_global(src, bytes, "cp.async source");
    if (reinterpret_cast<uintptr_t>(src) % 16) fail("cp.async: misaligned global address");
  }
  cur().open.push_back(CopyOp{static_cast<unsigned char*>(dst),
                              static_cast<const unsigned char*>(src), bytes});
}
// ---- TMA: box copies completing on mbarriers with transaction counts ----
inline TxBar& txbar(const void* bar, const char* what) {
  check_smem(bar, 8, 8, what);
  auto it = cur_block().txbars.find(bar);
  if (it == cur_block().txbars.end()) fail(std::string(what) + ": mbarrier not initialised");
  return it->second;
}
inline void txbar_settle(TxBar& b) {
  if (b.tx < 0) fail("mbarrier: more bytes landed than the phase expects (expect_tx too small)");
  if (b.pending == 0 && b.tx == 0) {
    ++b.phases;
    b.pending = b.count;
    g_rt->progress++;
  }
}
inline void txbar_init(void* bar, unsigned count) {
  check_smem(bar, 8, 8, "mbarrier.init");
  TxBar& b = cur_block().txbars[bar];
  b = TxBar{};
  b.count = b.pending = (int)count;
}
inline void txbar_arrive_expect(void* bar, unsigned bytes) {
  TxBar& b = txbar(bar, "mbarrier.arrive.expect_tx");
  if (b.pending <= 0) fail("mbarrier.arrive.expect_tx: more arrivals than the barrier's count");
  b.tx += bytes;
  --b.pending;
  txbar_settle(b);
}
inline void tma_box(void* dst, const unsigned char* base, long long cols, long long rows, long long row_bytes,
                    int box_cols, int box_rows, int elem_bytes, long long c0, long long c1, void* bar,
                    bool swizzle128 = false) {
  const size_t bytes = (size_t)box_cols * box_rows * elem_bytes;
  // the 128-byte swizzle follows address bits 7-9, so its boxes start on 1024-byte boundaries
  check_smem(dst, bytes, swizzle128 ? 1024 : 128, "cp.async.bulk.tensor destination");
  if (swizzle128 && box_cols * elem_bytes != 128) fail("cp.async.bulk.tensor: 128-byte swizzle needs 128-byte box rows");
  for (int r = 0; r < box_rows; ++r) {        // the part of each box row inside the array
    const long long row = c1 + r, lo = c0 < 0 ? 0 : c0, hi = c0 + box_cols < cols ? c0 + box_cols : cols;
    if (row >= 0 && row < rows && hi > lo)
      check_global(base + row * row_bytes + lo * elem_bytes, (size_t)(hi - lo) * elem_bytes, "cp.async.bulk.tensor source");
  }
  txbar(bar, "cp.async.bulk.tensor mbarrier").ops.push_back(
      BoxOp{static_cast<unsigned char*>(dst), base, c0, c1, cols, rows, row_bytes, box_cols, box_rows, elem_bytes,
            swizzle128});
}
inline void do_box(const BoxOp& op) {
  for (int r = 0; r < op.box_rows; ++r)
    for (int e = 0; e < op.box_cols; ++e) {
      size_t o = ((size_t)r * op.box_cols + e) * op.elem_bytes;
      if (op.swizzle128) o ^= ((o >> 7) & 7) << 4;
      unsigned char* d = op.dst + o;
      const long long row = op.c1 + r, col = op.c0 + e;
      if (row >= 0 && row < op.rows && col >= 0 && col < op.cols)
        std::memcpy(d, op.base + row * op.row_bytes + col * op.elem_bytes, op.elem_bytes);
      else
        std::memset(d, 0, op.elem_bytes);
    }
}
// Returns once the phase of parity `parity` has completed (mbarrier.try_wait.parity in a loop).
inline void txbar_wait(void* bar, unsigned parity) {
  for (;;) {
    TxBar& b = txbar(bar, "mbarrier.try_wait");
    if ((b.phases & 1u) != parity) return;
    if (!b.ops.empty()) {
      std::vector<BoxOp> ops;
      ops.swap(b.ops);
      for (const BoxOp& op : ops) {
        do_box(op);
        b.tx -= (long long)op.box_cols * op.box_rows * op.elem_bytes;   // zero-filled bytes count too
      }
      txbar_settle(b);
      continue;
    }
    yield();
  }
}
inline void cp_async_commit() {
  Thread& t = cur();
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}
inline void cp_async_wait(int pending) {
  Thread& t = cur();
  while ((int)t.groups.size() > pending) {
    for (const CopyOp& op : t.groups.front()) do_copy(op);
    t.groups.erase(t.groups.begin());
    g_rt->progress++;
  }
}

// ---- floating-point formats ----
// Round a double to a binary format with `ebits` exponent and `mbits` mantissa bits, to nearest
// even; returns the bit pattern. Doubles hold every f16/bf16 sum and product we form exactly, so
// this single rounding matches the hardware's.
inline uint32_t round_binary(double x, int ebits, int mbits) {
  const uint32_t sign = std::signbit(x) ? 1u : 0u;
  const uint32_t sign_bit = sign << (ebits + mbits);
  const uint32_t emax = (1u << ebits) - 1;
  const int bias = (1 << (ebits - 1)) - 1;
  if (std::isnan(x)) return sign_bit | (emax << mbits) | (1u << (mbits - 1));
  x = std::fabs(x);
  if (x == 0) return sign_bit;
  if (std::isinf(x)) return sign_bit | (emax << mbits);
  int e;
  std::frexp(x, &e);
  int exp = e - 1;
  const int min_exp = 1 - bias;
  if (exp < min_exp) exp = min_exp;
  double r = std::nearbyint(std::ldexp(x, mbits - exp));
  uint64_t ir = (uint64_t)r;
  if (ir >= (1ull << (mbits + 1))) { ir >>= 1; exp++; }
  if (ir < (1ull << mbits)) return sign_bit | (uint32_t)ir;  // subnormal
  if (exp > bias) return sign_bit | (emax << mbits);        // overflow -> inf
  return sign_bit | ((uint32_t)(exp + bias) << mbits) | (uint32_t)(ir & ((1ull << mbits) - 1));
}
inline double decode_binary(uint32_t v, int ebits, int mbits) {
  const uint32_t emax = (1u << ebits) - 1;
  const int bias = (1 << (ebits - 1)) - 1;
  const bool neg = (v >> (ebits + mbits)) & 1;
  const uint32_t ef = (v >> mbits) & emax, mf = v & ((1u << mbits) - 1);
  double r;
  if (ef == emax) r = mf ? NAN : INFINITY;
  else if (ef == 0) r = std::ldexp((double)mf, 1 - bias - mbits);
  else r = std::ldexp((double)(mf | (1u << mbits)), (int)ef - bias - mbits);
  return neg ? -r : r;
}
inline double h2d(uint16_t h) { return decode_binary(h, 5, 10); }
inline double b2d(uint16_t h) { return decode_binary(h, 8, 7); }
inline uint16_t d2h(double x) { return (uint16_t)round_binary(x, 5, 10); }
inline uint16_t d2b(double x) { return (uint16_t)round_binary(x, 8, 7); }

// ---- scheduler ----
inline void fiber_main() {
  g_rt->entry();
  if (!g_rt->cur->wg_groups.empty() || !g_rt->cur->wg_open.empty())
    fail("a thread exited with wgmmas in flight (no wgmma.wait_group retired them)");
  g_rt->cur->done = true;
  cur_block().exited++;
  g_rt->progress++;
  for (;;) yield();  // never resumed once done
}

#if defined(__x86_64__)
inline void start_fiber(Thread& t) {
  t.stack.reset(new char[STACK_BYTES]);
  uintptr_t top = (reinterpret_cast<uintptr_t>(t.stack.get()) + STACK_BYTES) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                             // fake return address of fiber_main
  *--sp = reinterpret_cast<uint64_t>(&fiber_main);       // popped by `ret`
  for (int i = 0; i < 6; ++i) *--sp = 0;                 // rbp rbx r12 r13 r14 r15
  --sp;
  uint32_t mx = 0x1f80;
  uint16_t cw = 0x037f;
  std::memcpy(sp, &mx, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &cw, 2);
  t.sp = sp;
}
inline void resume(Thread& t) { jm_emu_switch(&g_rt->main_sp, t.sp); }
#else
inline void start_fiber(Thread& t) {
  t.stack.reset(new char[STACK_BYTES]);
  getcontext(&t.ctx);
  t.ctx.uc_stack.ss_sp = t.stack.get();
  t.ctx.uc_stack.ss_size = STACK_BYTES;
  t.ctx.uc_link = nullptr;
  makecontext(&t.ctx, (void (*)())fiber_main, 0);
}
inline void resume(Thread& t) { swapcontext(&g_rt->main_ctx, &t.ctx); }
#endif

// Run `entry` as a grid of `grid` blocks of `threads` threads. Returns 0, or 1 with `err` filled.
inline int run(Runtime& rt, int grid, int threads, int smem_bytes, unsigned seed, char* err, int errlen) {
  g_rt = &rt;
  rt.grid = Dim3{(unsigned)grid, 1, 1};
  rt.block = Dim3{(unsigned)threads, 1, 1};
  rt.blocks.resize(grid);
  if (rt.cluster < 1 || grid % rt.cluster) {
    std::snprintf(err, errlen, "grid of %d blocks is not a whole number of clusters of %d", grid, rt.cluster);
    g_rt = nullptr;
    return 1;
  }
  rt.cluster_arrived.assign(grid / rt.cluster, 0);
  for (int b = 0; b < grid; ++b) {
    Block& blk = rt.blocks[b];
    blk.bidx = Dim3{(unsigned)b, 0, 0};
    blk.smem_bytes = smem_bytes;
    blk.smem.assign(smem_bytes + SMEM_GUARD, SMEM_FILL);
    blk.warps.resize((threads + 31) / 32);
  }
  rt.threads.resize((size_t)grid * threads);
  for (int b = 0; b < grid; ++b)
    for (int t = 0; t < threads; ++t) {
      Thread& th = rt.threads[(size_t)b * threads + t];
      th.tidx = Dim3{(unsigned)t, 0, 0};
      th.block = b;
      start_fiber(th);
    }
  std::mt19937 rng(seed);
  std::vector<size_t> order(rt.threads.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // With a seed, each block gets a speed (the share of rounds it runs in, from 1/32 to 31/32; a
  // quarter of its warps get another) and 15 rounds in 16 run each warp with that probability,
  // so warps and blocks drift apart as
  // they can on a GPU (one block may finish before another starts, one warp may race ahead to
  // the next barrier): code that assumes they progress together shows up. Only full rounds count
  // towards deadlock detection.
  const int warps_per_block = (threads + 31) / 32;
  std::vector<char> active((size_t)grid * warps_per_block, 1);
  // speed: out of 32 rounds; blocks get a common speed and their warps vary around it.
  std::vector<unsigned> speed(active.size(), 32);
  static const unsigned block_speeds[4] = {1, 4, 16, 31};
  for (int b = 0; b < grid; ++b) {
    const unsigned base = block_speeds[rng() % 4];
    for (int w = 0; w < warps_per_block; ++w)
      speed[(size_t)b * warps_per_block + w] = (rng() % 4 == 0) ? block_speeds[rng() % 4] : base;
  }
  int idle_rounds = 0;
  for (unsigned long long round = 0;; ++round) {
    const bool full = !seed || round % 16 == 15;
    if (seed) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t w = 0; w < active.size(); ++w) active[w] = full || (rng() % 32) < speed[w];
    }
    const unsigned long long before = rt.progress;
    bool any = false;
    for (size_t i : order) {
      Thread& t = rt.threads[i];
      if (t.done) continue;
      any = true;
      if (!active[(size_t)t.block * warps_per_block + t.tidx.x / 32]) continue;
      // cp.async copies land at some time between issue and the wait: here the oldest group
      // may land early (else at the wait), so that a stage reused while copies into it are
      // still in flight shows up as corrupted data.
      if (seed && !t.groups.empty() && rng() % 4 == 0) {
        for (const CopyOp& op : t.groups.front()) do_copy(op);
        t.groups.erase(t.groups.begin());
      }
      rt.cur = &t;
      resume(t);
      if (!rt.error.empty()) break;
    }
    if (!rt.error.empty() || !any) break;
    if (!full) continue;
    if (rt.progress == before) {
      if (++idle_rounds >= 3) {
        rt.error = "deadlock: no thread can make progress (a barrier or a lock is never reached)";
        break;
      }
    } else {
      idle_rounds = 0;
    }
  }
  if (rt.error.empty()) {
    for (int b = 0; b < grid; ++b) {
      const Block& blk = rt.blocks[b];
      for (int i = 0; i < SMEM_GUARD; ++i)
        if (blk.smem[smem_bytes + i] != SMEM_FILL) {
          rt.error = "write past the end of dynamic shared memory";
          break;
        }
    }
  }
  g_rt = nullptr;
  if (!rt.error.empty()) {
    std::snprintf(err, errlen, "%s", rt.error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace emu
