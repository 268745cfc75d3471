#!/usr/bin/env python3
"""Run tools/bench (or tools/sweep) with the kernel source changed, for A/B runs in one device
session. JM_PROBE_TEMPLATES=DIR renders from another templates directory; JM_PROBE_SUB names
substitutions from SUBS below (comma-separated) applied to every rendered source. The cache key
includes the source's hash, so variants never share compiled kernels.
    JM_PROBE_SUB=l2_256 python3 tools/probe/variant_bench.py bench --m 1,16 ..."""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from pathlib import Path  # noqa: E402

import jitmarlin.cache  # noqa: E402
import jitmarlin.render as R  # noqa: E402

PF_LOOP = """  for (int s = PF_FROM + (int)tid; s < n_steps * TK; s += THREADS) {
    const int st = first + s / TK, row = s % TK;
    const int pkt = st % k_tiles, pnt = (st / k_tiles) % n_tiles;
    if (pnt * WARPS_N < n64) {
      const int4* p = B + (size_t)(pkt * TK + row) * b_row4 + pnt * B_ROW;
      const int nch = jm_min(B_ROW, (n64 - pnt * WARPS_N) * 32 * QI);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(nch * 16) : "memory");
    }
  }
"""
SUBS = {
    # timing only (wrong sums): the int4 dequant and the group-scale multiply replaced by register
    # copies, so the A fragments come from registers without the ALU work (what RS wgmma costs alone)
    "nodq": [('''  b0.r[0] = sub_f16x2(lop3<0xea>(q, LO, MAGIC), SUB);
  b0.r[1] = fma_f16x2(lop3<0xea>(q, HI, MAGIC), MUL, ADD);
  q >>= 8;
  b1.r[0] = sub_f16x2(lop3<0xea>(q, LO, MAGIC), SUB);
  b1.r[1] = fma_f16x2(lop3<0xea>(q, HI, MAGIC), MUL, ADD);''',
              '''  b0.r[0] = q; b0.r[1] = q ^ 1u; b1.r[0] = q ^ 2u; b1.r[1] = q ^ 3u;'''),
             ('''                b[h].r[0] = act_mul2(b[h].r[0], sc);
                b[h].r[1] = act_mul2(b[h].r[1], sc);''', '''                (void)sc;''')],
    # Decode probes at M = 16 (timing only): x fetched for row 0 alone (x1); split-tile partial
    # sums travel for row 0 alone (red1).
    "x1": [("const int a_rows_left = M - mc * TILE_M - a_row0;   // row of pass j",
            "const int a_rows_left = 1 - mc * TILE_M - a_row0;   // row of pass j")],
    "red1": [("const int rows_left = M - mc * TILE_M - (lane >> 2);",
              "const int rows_left = 1 - mc * TILE_M - (lane >> 2);")],
    # gemv at M = 16 (timing only): x fetched for token block 0 alone (what x's loads cost).
    "x0": [("x_end[n] = 8 * n + g < M ?", "x_end[n] = n == 0 && 8 * n + g < M ?")],
    # ... and no x loads at all (x read as zeros: what the loads of x cost in all)
    "xnone": [("fx[buf][u][n][0] = k0 + u * 16 < x_end[n] ? ld_global_u32(x) : 0u;", "fx[buf][u][n][0] = (u32)(size_t)x;"),
              ("fx[buf][u][n][1] = k0 + u * 16 + 8 < x_end[n] ? ld_global_u32(x + 4) : 0u;", "fx[buf][u][n][1] = 0u;")],
    # gemv with the group scale on the weights again (session 21's A/B of the scaled sums)
    "ss_off": [("constexpr bool SCALE_SUMS = true;", "constexpr bool SCALE_SUMS = false;")],
    # Spread gemv kernels (timing only where a run crosses column blocks): without the flush of
    # the sums inside the loop, without the loads' crossing, without both.
    "sp_noflush": [("if (SPREAD && c_left-- == 0) {", "if (false) {")],
    "sp_nocross": [("if (SPREAD && --l_left == 0) {", "if (false) {")],
    "sp_neither": [("if (SPREAD && c_left-- == 0) {", "if (false) {"), ("if (SPREAD && --l_left == 0) {", "if (false) {")],
    # Spread gemv kernels on plans of one column block a block (timing only otherwise): the loop of
    # whole-column-block plans (sp_loop), no slab loads in the final sum (sp_nogather), no
    # division at the start (sp_nodiv, n_cols == G), all three (sp_all).
    "sp_loop": [("  if constexpr (SPREAD) {\n    // The loads run on across", "  if constexpr (false) {\n    // The loads run on across")],
    "sp_nogather": [("      if (piece < pieces) {\n        const int first = pc * bpc;", "      if (false) {\n        const int first = pc * bpc;")],
    "sp_nodiv": [("const int q = (int)((unsigned)n_cols / (unsigned)G);", "const int q = 1;")],
    "sp_all": [("  if constexpr (SPREAD) {\n    // The loads run on across", "  if constexpr (false) {\n    // The loads run on across"),
               ("      if (piece < pieces) {\n        const int first = pc * bpc;", "      if (false) {\n        const int first = pc * bpc;"),
               ("const int q = (int)((unsigned)n_cols / (unsigned)G);", "const int q = 1;")],
    # Session 30 (timing only: wrong sums): gemv kernels in clusters without the cross-block sum;
    # each block stores its own part (what the DSMEM gather and the cluster barriers cost).
    "gv_nocl": [("  if constexpr (CL > 1 && !SPREAD) cluster_arrive_relaxed();", ""),
                ("  if constexpr (CL > 1) cluster_wait();                  // every block of the cluster has started", ""),
                ("    if constexpr (CL == 1) {\n      store(cb0 + c, rem, sum);", "    if constexpr (true) {\n      store(cb0 + c, rem, sum);"),
                ("  if constexpr (CL > 1) {\n    // The other blocks' stores are visible", "  if constexpr (false) {\n    // The other blocks' stores are visible")],
    # Session 30 (timing only: wrong sums): the 4-bit dequantisation without its offsets (the
    # codes OR-ed into 1024 / 64 / 128 and left there): what taking the offsets out of the sums
    # (one correction MMA of x a step) could save at most.
    "nooff": [("  b0.r[0] = sub_f16x2(lop3<0xea>(q, LO, MAGIC), SUB);\n  b0.r[1] = fma_f16x2(lop3<0xea>(q, HI, MAGIC), MUL, ADD);",
               "  b0.r[0] = lop3<0xea>(q, LO, MAGIC);\n  b0.r[1] = lop3<0xea>(q, HI, 0x54005400u); (void)SUB; (void)MUL; (void)ADD;"),
              ("  b1.r[0] = sub_f16x2(lop3<0xea>(q, LO, MAGIC), SUB);\n  b1.r[1] = fma_f16x2(lop3<0xea>(q, HI, MAGIC), MUL, ADD);",
               "  b1.r[0] = lop3<0xea>(q, LO, MAGIC);\n  b1.r[1] = lop3<0xea>(q, HI, 0x54005400u);"),
              ("  b0.r[0] = fma_bf16x2(lop3<0xea>(q, LO, MAGIC), ONE, NEG);\n  b0.r[1] = fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG);",
               "  b0.r[0] = lop3<0xea>(q, LO, MAGIC);\n  b0.r[1] = lop3<0xea>(q >> 4, LO, MAGIC); (void)ONE; (void)NEG;"),
              ("  b1.r[0] = fma_bf16x2(lop3<0xea>(q, LO, MAGIC), ONE, NEG);\n  b1.r[1] = fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG);",
               "  b1.r[0] = lop3<0xea>(q, LO, MAGIC);\n  b1.r[1] = lop3<0xea>(q >> 4, LO, MAGIC);")],
    # Session 30 (timing only: wrong sums): pair gemv kernels store their own part, no exchange.
    "gv_noexch": [("      exchange(cb0 + c, c, rem, sum);", "      store(cb0 + c, rem, sum);")],
    # Session 30 (timing only: wrong sums): the gemv kernel skips the arithmetic of each warp's
    # last batch (its loads are still consumed): what the compute after the last bytes costs.
    "gv_notail": [("      compute(B0, row, i + 1 >= i1);",
                   "      if (i + 1 >= i1) { u32 k = 0; JM_UNROLL for (int u = 0; u < U; ++u) k ^= (u32)fb[B0][u][0].x ^ fx[B0][u][0][0];"
                   " acc[0][0].r[0] += (float)(k & 1u); } else compute(B0, row, false);"),
                  ("      compute(B1, row + U, i + 2 >= i1);",
                   "      if (i + 2 >= i1) { u32 k = 0; JM_UNROLL for (int u = 0; u < U; ++u) k ^= (u32)fb[B1][u][0].x ^ fx[B1][u][0][0];"
                   " acc[0][0].r[0] += (float)(k & 1u); } else compute(B1, row + U, false);")],
    # Session 31 (timing only: wrong sums): the gemv kernel without any arithmetic a batch (its
    # weights, x and scales still loaded and consumed): the stream with the kernel's own loads,
    # sums and stores, what the per-batch work costs on top.
    "gv_nocomp": [("      compute(B0, row, i + 1 >= i1);",
                   "      { u32 k = 0; JM_UNROLL for (int u = 0; u < U; ++u) k ^= (u32)fb[B0][u][0].x ^ fx[B0][u][0][0] ^ fx[B0][u][0][1];"
                   " k ^= (u32)fs[B0][0].x; acc[0][0].r[0] += (float)(k & 1u); (void)row; }"),
                  ("      compute(B1, row + U, i + 2 >= i1);",
                   "      { u32 k = 0; JM_UNROLL for (int u = 0; u < U; ++u) k ^= (u32)fb[B1][u][0].x ^ fx[B1][u][0][0] ^ fx[B1][u][0][1];"
                   " k ^= (u32)fs[B1][0].x; acc[0][0].r[0] += (float)(k & 1u); }")],
    "l2_256": [("cp.async.cg.shared.global [%0]", "cp.async.cg.shared.global.L2::256B [%0]")],
    "l2_128": [("cp.async.cg.shared.global [%0]", "cp.async.cg.shared.global.L2::128B [%0]")],
    "rb1": [("constexpr int RED_BATCH = TM >= 4 ? 1 : 4 / TM;", "constexpr int RED_BATCH = 1;"),
            ("constexpr int RED_BATCH = MW * ACC <= 64 && JM_MIN_BLOCKS == 1 ? 2 : 1;",
             "constexpr int RED_BATCH = 1;")],
    "no_overlap": [("constexpr bool OVERLAP = RED_CHUNKS <= STAGE && OUT_STAGE_CHUNKS <= STAGE;",
                    "constexpr bool OVERLAP = false;")],
    "no_tma": [("constexpr bool X_TMA = JM_MIN_BLOCKS == 1 || (W_BOX_OK && STAGES <= 5);", "constexpr bool X_TMA = false;")],
    "no_wtma": [("constexpr bool W_TMA = X_TMA && W_BOX_OK;", "constexpr bool W_TMA = false;")],
    "mw2": [("constexpr bool OVERLAP_MMA = MW == 1 &&", "constexpr bool OVERLAP_MMA = MW <= 2 &&")],
    "skip_a_rows": [("pipe.fetch16(j, sA + row * A_ROW + a_swizzle(row, chunk), src,\n"
                     "                   A_STAGE % THREADS == 0 || i < A_STAGE, valid);",
                     "pipe.fetch16(j, sA + row * A_ROW + a_swizzle(row, chunk), src,\n"
                     "                   (A_STAGE % THREADS == 0 || i < A_STAGE) && grow < M, valid);")],
    # Decode tail probes (timing only: the results are wrong on purpose).
    "probe_empty": [("const int n_steps = jm_min(first + iters, total) - first;",
                     "const int n_steps = 0 * (jm_min(first + iters, total) - first);")],
    "probe_no_red": [("    if (b_hi > b_lo) {\n      if ((int)blockIdx.x != b_lo) {",
                      "    if (b_hi > b_lo && (int)blockIdx.x != b_lo) continue;\n"
                      "    if (false) {\n      if ((int)blockIdx.x != b_lo) {")],
    "probe_no_wait": [("wait_count(locks + b_lo, b_hi - b_lo);", "")],
    "fence1": [("        fence_gpu();\n        bar_sync();\n        if (tid == 0) arrive(locks + b_lo);",
                "        bar_sync();\n        if (tid == 0) {\n          fence_gpu();\n          arrive(locks + b_lo);\n        }")],
    # Cheaper synchronisation for the split-tile reduction (results stay correct): contributors
    # fence with fence.acq_rel.gpu instead of __threadfence's fence.sc.gpu; the finisher polls the
    # counter without sleeping between reads.
    "acqrel": [("JM_DEV void fence_gpu() { __threadfence(); }",
                'JM_DEV void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }')],
    "no_sleep": [("JM_DEV void spin_pause() { __nanosleep(20); }", "JM_DEV void spin_pause() {}")],
    # Hybrid gemv plans (timing only): the finishers do not clear the slots (later launches find
    # stale tags: no waits), no finishers at all.
    "hy_noclear": [("        st_relaxed_gpu_u64(src, 0ull);\n", "")],
    "hy_nofin": [("  if constexpr (HYBRID) {\n    // The sharers' slots are added", "  if constexpr (false) {\n    // The sharers' slots are added"),
                 ("  if constexpr (HYBRID) h_load(threadIdx.x);", "")],
    # Session 23 (timing; results stay correct; entry 50): the weight streams of the decode kernels
    # (the Stream-K kernel's cp.async of B, the gemv kernel's 16-byte loads) with an L2 evict-first
    # policy, so that they do not push x and the kept partial sums out of L2.
    "w_ef": [("JM_DEV void cp_async_commit() {",
              "JM_DEV void cp_async16_ef(void* smem, const void* gmem, int src_bytes) {\n"
              "  u64 pol;\n  asm(\"createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\" : \"=l\"(pol));\n"
              "  asm volatile(\"cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\"\n"
              "               :: \"r\"(smem_u32(smem)), \"l\"(gmem), \"r\"(src_bytes), \"l\"(pol));\n}\n"
              "JM_DEV void cp_async_commit() {"),
             ("  JM_INL void commit() { cp_async_commit(); }",
              "  JM_INL void fetch16_ef(int, int4* dst, const int4* src, bool active, bool valid) {\n"
              "    if (active) cp_async16_ef(dst, src, valid ? 16 : 0);\n  }\n"
              "  JM_INL void commit() { cp_async_commit(); }"),
             ("pipe.fetch16(A_ITERS + j, sB + tid", "pipe.fetch16_ef(A_ITERS + j, sB + tid"),
             ("  asm volatile(\"ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];\"\n"
              "               : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p));",
              "  u64 pol;\n  asm(\"createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\" : \"=l\"(pol));\n"
              "  asm volatile(\"ld.global.nc.L1::no_allocate.L2::cache_hint.v4.s32 {%0,%1,%2,%3}, [%4], %5;\"\n"
              "               : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p), \"l\"(pol));")],
    # Session 24, the split-tile chain of the mma.sync kernel by link (timing only: racy or wrong
    # sums): finishers that do not wait for the count (sk_nowait), contributors that count
    # themselves in without a fence (sk_nofence).
    "sk_nowait": [("    wait_count(r.locks + b_lo, contributors);\n", "")],
    "sk_nofence": [("  fence_gpu();\n  bar_sync();\n  if (threadIdx.x == 0) arrive(r.locks + b_lo);",
                    "  bar_sync();\n  if (threadIdx.x == 0) arrive(r.locks + b_lo);")],
    # Session 25 (timing only: wrong sums): the wgmma kernel fetches x on even K-steps alone: half
    # of x's L2 reads and of its shared-memory writes (a bound on what a 2-block cluster's TMA
    # multicast of x, which halves the reads only, could save).
    "x_half": [("          mbar_expect_tx(stage_full + stage, TX_BYTES);\n"
                "          tma_load_2d(sA, &xmap, kt * TILE_K, mc * TILE_M, stage_full + stage);",
                "          mbar_expect_tx(stage_full + stage, TX_BYTES - ((kt & 1) ? 16u * A_STAGE : 0u));\n"
                "          if (!(kt & 1)) tma_load_2d(sA, &xmap, kt * TILE_K, mc * TILE_M, stage_full + stage);")],
    # Session 34 (timing only: wrong sums): raw-code Stream-K kernels (bf16, 256-wide tiles) with
    # the offset MMA of x on a quarter of the k16 steps (each of the four warps that share a K
    # range taking its own quarter, as a shared x-sum would), or on none.
    "off4": [("        mma_16816(fa[buf][0], m, xoff[sub % XO]);\n      }",
              "        if (sub / (SUB / WARPS_N) == wn) mma_16816(fa[buf][0], m, xoff[sub % XO]);\n      }")],
    "offnone": [("        mma_16816(fa[buf][0], m, xoff[sub % XO]);\n      }", "        (void)m;\n      }")],
    # Session 47 (timing only: wrong sums; bf16 only, fp16 rows run as head): the raw-code kernels
    # with no offsets MMA (bf_offnone), or with each of the WARPS_N warps that share a K range
    # taking its share of a run's offsets MMAs on x fragments of its own ldmatrix, in the first
    # steps of the run and with no branch on the warp (bf_offld): what a shared x-sum costs before
    # its exchange.
    "bf_offnone": [("        mma_16816(fa[buf][0], m, xoff[sub % XO]);\n      }", "        (void)m;\n      }")],
    "bf_offld": [("        mma_16816(fa[buf][0], m, xoff[sub % XO]);\n      }",
                  "        if (sub % SCALE_RUN < SCALE_RUN / WARPS_N) {\n"
                  "          FragA xa;\n"
                  "          load_a(xa, sA, A_ROW, 0, wk * SUB + sub / SCALE_RUN * SCALE_RUN + (sub % SCALE_RUN) * WARPS_N + wn);\n"
                  "          mma_16816(xa, m, xoff[sub % XO]);\n"
                  "        }\n      }")],
    # Session 47: xs_own, xs_nowait, xs_remap_own (runs 2-5) are on branch wip/xs-shared, whose
    # kernel source they change.
    # Session 47 (branch wip/sk-xtma; session 48's runs 1-2 measured it there): the boxed decode
    # kernels take x by cp.async (correct values; the stages stay 1024-byte aligned, x's map is
    # passed and unused). On main the choice is KernelSpec.xbox: see JM_PROBE_XBOX below.
    # Session 48 run 3 (correct values): with xbox, the weights' box issued before x's boxes (xw_first;
    # main since: the order of entry 93).
    # Session 46: the raw-code kernels' offsets MMAs in one chain of dependent MMAs a run (as before
    # session 46) or two, instead of four (correct values either way).
    "xo1": [("constexpr int XO = RAW_CODES ? 4 : 1;", "constexpr int XO = 1;")],
    "xo2": [("constexpr int XO = RAW_CODES ? 4 : 1;", "constexpr int XO = RAW_CODES ? 2 : 1;")],
    # Session 34 (timing only: wrong sums): the wgmma kernel without its split-tile reduction:
    # contributors go on to their next tile without storing, finishers neither wait nor load.
    "wg_nored": [("      if (b_hi > b_lo) {\n        if ((int)blockIdx.x != b_lo) {",
                  "      if (b_hi > b_lo && (int)blockIdx.x != b_lo) { pos += n_iter; continue; }\n"
                  "      if (false) {\n        if ((int)blockIdx.x != b_lo) {")],
    # ... and its parts (timing only): contributors without the fence after their stores
    # (wg_nofence), without the stores (wg_nostore); finishers that wait but load nothing
    # (wg_noload), that load without waiting (wg_nowait).
    "wg_nofence": [("          fence_gpu();\n          bar_sync();\n          if (tid == 0) arrive(locks + b_lo);\n          pos += n_iter;",
                    "          bar_sync();\n          if (tid == 0) arrive(locks + b_lo);\n          pos += n_iter;")],
    "wg_nostore": [("              if (tok_left > 2 * e)\n                partial_store<false>(",
                    "              if (tok_left > 2 * e && iters < 0)\n                partial_store<false>(")],
    "wg_noload": [("                v[j][s][e / 4] = (b0 + j <= b_hi && tok_left > 2 * e)",
                   "                v[j][s][e / 4] = (b0 + j <= b_hi && tok_left > 2 * e && iters < 0)")],
    "wg_nowait": [("          wait_count(locks + b_lo, b_hi - b_lo);\n", "")],
    # Session 35: contributors count themselves in as CUTLASS's barrier does: a block barrier
    # after the stores, then thread 0 alone fences (acq_rel, GPU scope) and adds, where every
    # thread fenced (fence.sc) before the barrier. Against session 34's source; main does this
    # since entry 72 (the wg_nosplit / async-publish anchors are those of the wip/ branches).
    "wg_relfence": [("          fence_gpu();\n          bar_sync();\n          if (tid == 0) arrive(locks + b_lo);\n",
                     "          bar_sync();\n          if (tid == 0) {\n            asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\");\n"
                     "            arrive(locks + b_lo);\n          }\n")],
    # Session 35 (timing only, tools/probe/timeline.py): thread 0 of each block writes
    # %globaltimer at its start and at five points of each tile piece into the workspace past the
    # plan's partial-sum slots (128 x 128 tiles only); slot 15: an async publish's count-in
    # (branch wip/wgmma-async-publish). A link a source lacks (the per-thread fence since entry
    # 72) leaves its slot empty.
    # Session 40 (results stay correct; sm_90): the mma.sync kernel's block prefetches its whole
    # range of weight bytes into L2 at the start (one cp.async.bulk.prefetch a k16 row segment),
    # so DRAM streams them while the cp.async stages wait on L2 rather than DRAM (pf_all); or the
    # range past its first STAGES steps only, which the stage fetches request at once anyway (pf_late).
    "pf_all": [("  const int n_steps = jm_min(first + iters, total) - first;   // this block's steps (may be <= 0)\n",
                "  const int n_steps = jm_min(first + iters, total) - first;   // this block's steps (may be <= 0)\n"
                + PF_LOOP.replace("PF_FROM", "0"))],
    "pf_late": [("  const int n_steps = jm_min(first + iters, total) - first;   // this block's steps (may be <= 0)\n",
                 "  const int n_steps = jm_min(first + iters, total) - first;   // this block's steps (may be <= 0)\n"
                 + PF_LOOP.replace("PF_FROM", "STAGES * TK"))],
    "wg_timeline": [
        ("  Pipe<CHUNKS> pipe;\n",
         "  Pipe<CHUNKS> pipe;\n"
         "  u64* jm_tl = reinterpret_cast<u64*>(partials + (size_t)gridDim.x * SLOT_F4) + (size_t)blockIdx.x * 16;\n"
         "  int jm_p = 0;\n"
         "  auto jm_mark = [&](int k) {\n"
         "    if (tid == 0 && k < 16) { u64 t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t) :: \"memory\"); jm_tl[k] = t; }\n"
         "  };\n"
         "  jm_mark(0);\n"),
        ("      if constexpr (!W_TMA) pipe.template land<0>();\n      bar_sync();\n",
         "      if constexpr (!W_TMA) pipe.template land<0>();\n      bar_sync();\n      jm_mark(1 + 5 * jm_p);\n"),
        # a contributor: stores issued (slot 2), its fence done (3: where each thread fences),
        # counted in (4); after wg_relfence where both apply
        ("make_float4(acc[s][e], acc[s][e + 1], acc[s][e + 2], acc[s][e + 3]));\n",
         "make_float4(acc[s][e], acc[s][e + 1], acc[s][e + 2], acc[s][e + 3]));\n          jm_mark(2 + 5 * jm_p);\n"),
        ("          fence_gpu();\n          bar_sync();\n",
         "          fence_gpu();\n          jm_mark(3 + 5 * jm_p);\n          bar_sync();\n"),
        ("          pos += n_iter;\n          continue;\n",
         "          jm_mark(4 + 5 * jm_p); ++jm_p;\n          pos += n_iter;\n          continue;\n"),
        # the bulk copy of KernelSpec.async_publish: issued (slot 2), waited for and counted in (15)
        ("            if (tid == 0) bulk_store(mine, pub, SLOT_F4 * 16);\n",
         "            if (tid == 0) bulk_store(mine, pub, SLOT_F4 * 16);\n            jm_mark(2 + 5 * jm_p);\n"),
        ("      arrive(locks + pub_lock);\n", "      arrive(locks + pub_lock);\n      jm_mark(15);\n"),
        ("        bar_sync();\n        for (int b0 = b_lo + 1;",
         "        bar_sync();\n        jm_mark(3 + 5 * jm_p);\n        for (int b0 = b_lo + 1;"),
        ("      // Epilogue: per-channel", "      jm_mark(4 + 5 * jm_p);\n      // Epilogue: per-channel"),
        ("      bar_sync();\n      pos += n_iter;\n    }\n  }\n  if (iters < 0)",
         "      bar_sync();\n      jm_mark(5 + 5 * jm_p); ++jm_p;\n      pos += n_iter;\n    }\n  }\n  if (iters < 0)")],
}
for _n in ("probe_no_red", "sk_nowait", "sk_nofence", "red1"):
    SUBS[_n + "_b"] = SUBS[_n]
# nodq for both kernels: also the decode kernel's group-scale multiply (scale_tile)
SUBS["nodq_all"] = SUBS["nodq"] + [("  b.r[0] = act_mul2(b.r[0], s);\n  b.r[1] = act_mul2(b.r[1], s);",
                                    "  (void)s;")]
# Session 41 (timing only: wrong sums), the wgmma kernel's group-scale multiply: kept but by 1.0,
# so the A fragments are the exact small integers q - 8 (what the tensor cores' operand width costs
# at the power cap, the ALU work unchanged; the 1.0 is opaque to the compiler) -- intw; or removed
# (integer operands and 4 multiplies a k16 step fewer) -- nosc.
SUBS["intw"] = [("                  const u32 sc = bcast(sp, h);\n",
                 "                  const u32 sc = gscale != 12345.f ? act_pack2(1.f, 1.f) : bcast(sp, h);\n")]
SUBS["nosc"] = [("                  b[h].r[0] = act_mul2(b[h].r[0], sc);\n                  b[h].r[1] = act_mul2(b[h].r[1], sc);\n",
                 "                  (void)sc;\n")]
# Session 42 (timing only: wrong weights), bf16 int4 dequantisation with fp16's one shift a word:
# the nibbles of bits 4..7 taken by a mask in place (their values land in the exponent), so the
# bf16 kernels do exactly fp16's ALU work a word (what the two extra shifts cost).
SUBS["bf_1sh"] = [("fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG)",
                   "fma_bf16x2(lop3<0xea>(q, 0x00f000f0u, MAGIC), ONE, NEG)")]
# Session 42: right shifts of the int4 dequantisation done as IMAD.HI (a multiply-high by 2^(32-n)
# from constant memory, which the compilers cannot fold back into a shift) on the FMA pipe, to
# take load off the integer pipe that the shifts and lop3s share (correct values). bf16: the two
# q >> 4 (bf_imad2), and the q >>= 8 too (bf_imad3); fp16: its one q >>= 8 (f_imad).
_SHR_DECL = ("constexpr int TILES_PER_WORD = 2;\n",
             "__constant__ u32 JM_SHR4 = 1u << 28, JM_SHR8 = 1u << 24;\nconstexpr int TILES_PER_WORD = 2;\n")
SUBS["bf_imad2"] = [_SHR_DECL, ("fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG)",
                                "fma_bf16x2(lop3<0xea>(__umulhi(q, JM_SHR4), LO, MAGIC), ONE, NEG)")]
SUBS["bf_imad3"] = SUBS["bf_imad2"] + [("  q >>= 8;\n", "  q = __umulhi(q, JM_SHR8);\n")]
# Session 45 (timing only, wrong sums): the Stream-K kernel's MMAs replaced by one xor a tile into
# the sums' first register (the B fragment and x's fragment stay live, so the dequantisation and the
# ldmatrix are kept): what the tensor pipe costs at M = 9..16.
SUBS["sk_nomma"] = [("          for (int i = 0; i < TM; ++i) mma_16816(fa[buf][i], m, SCALE_SUMS ? grp[s] : acc[i][s]);",
                     "          for (int i = 0; i < TM; ++i) { FragC& c_ = SCALE_SUMS ? grp[s] : acc[i][s];"
                     " c_.r[0] = __int_as_float(__float_as_int(c_.r[0]) ^ m.r[0] ^ m.r[1] ^ fa[buf][i].r[0]); }")]
# Session 45 (correct values): a bf16 raw-code kernel (KernelSpec.raw_codes) back to the plain decode,
# no offsets MMA, no offset taken off the runs' sums: is entry 60's H100 gain there on the H200, whose
# M = 16 kernel pays for each MMA (entry 86)?
SUBS["bf_noraw"] = [("constexpr bool RAW_CODES = true;", "constexpr bool RAW_CODES = false;"),
                    ("dequant_word_raw(word(fb[buf][w / 4], w % 4), b);", "dequant_word(word(fb[buf][w / 4], w % 4), b);"),
                    *SUBS["offnone"]]
SUBS["f_imad"] = [_SHR_DECL, ("  q >>= 8;\n", "  q = __umulhi(q, JM_SHR8);\n")]
# Session 42: the bf16 int4 dequantisation's byte shift (q >>= 8) as a byte permute (PRMT), which
# may issue elsewhere than SHF: the lop3 windows and the later q >> 4 see the same bits (correct).
SUBS["bf_prmt"] = [("  q >>= 8;\n  b1.r[0] = fma_bf16x2(", "  q = __byte_perm(q, 0u, 0x3311);\n  b1.r[0] = fma_bf16x2(")]
# Session 43 (correct values): the bf16 int4 dequantisation's nibbles of bits 4..7 moved without a
# shift. OR-ed into fp16's 1024.0 (0x6400) such a nibble v is the half 1024 + 16 v, and one fp16 fma,
# (1024 + 16 v) * 2^-13 + 3.375 = 3.5 + v / 512, gives the half whose bits are 0x4300 | v: the bf16
# 128 + v. So the two q >> 4 become two HFMA2 on the FMA pipe (SASS at M = 64: SHF 163 -> 83,
# HFMA2 160 -> 240). Measured slower or even (entry 83), so the library keeps the shifts.
_HF_DECL = ("constexpr int TILES_PER_WORD = 2;\n",
            "constexpr int TILES_PER_WORD = 2;\nJM_DEV u32 bf16_magic_hi(u32 q) {\n"
            "  return fma_f16x2(lop3<0xea>(q, 0x00f000f0u, 0x64006400u), 0x08000800u, 0x42c042c0u);\n}\n")
SUBS["bf_hf"] = [_HF_DECL,
                 ("fma_bf16x2(lop3<0xea>(q >> 4, LO, MAGIC), ONE, NEG)", "fma_bf16x2(bf16_magic_hi(q), ONE, NEG)"),
                 ("= lop3<0xea>(q >> 4, LO, MAGIC);", "= bf16_magic_hi(q);")]
# Session 42 (timing only as a schedule, values correct): the second half of the grid's blocks (the
# second block on each SM where blocks are placed one an SM first) starts N ns late, so that two
# blocks on one SM begin out of phase (one dequantising while the other's wgmmas run). Whether
# they stay so or fall back into step shows in the time. late2 is the control: the same code (it
# costs the two-block kernels 8 bytes of spills) with no delay.
for _ns in (2, 300, 600, 1200):
    SUBS[f"late{_ns}"] = [("  JM_SMEM_DECL(int4, smem_raw);\n  // 1024-byte aligned base",
                           f"  __nanosleep(blockIdx.x >= gridDim.x / 2 ? {_ns}u : 1u);\n  JM_SMEM_DECL(int4, smem_raw);\n  // 1024-byte aligned base")]
# JM_PROBE_SS=1 (session 38): the wgmma kernels of one slab a warpgroup with A from shared memory
# (tools/probe/ss_templates.py), their shared memory grown by the slabs; =nofence / =nosync: timing
# only, without the proxy fence / without the fence and the warpgroup barrier.
if os.environ.get("JM_PROBE_SS"):
    sys.path.insert(0, HERE)
    import ss_templates
    from jitmarlin.spec import KernelSpec

    os.environ["JM_PROBE_TEMPLATES"] = str(ss_templates.write(Path("/tmp/jm-ss-templates"), os.environ["JM_PROBE_SS"]))
    _smem_ss = KernelSpec.smem_bytes
    KernelSpec.smem_bytes = lambda self: _smem_ss(self) + ss_templates.ss_bytes(self)
tdir = os.environ.get("JM_PROBE_TEMPLATES")
if tdir:
    R.templates_dir = lambda: Path(tdir).resolve()
subs = [s for s in os.environ.get("JM_PROBE_SUB", "").split(",") if s]
if subs:
    real = R.render

    def patched(spec, target="cuda"):
        src = real(spec, target)
        for name in subs:
            before = src
            for old, new in SUBS[name]:
                src = src.replace(old, new)
            bf16_only = name.startswith("bf_") and getattr(spec, "act", "") != "bfloat16"   # (fp16 rows run as head)
            if src == before and getattr(spec, "path", "") in ("sm70", "sm75", "sm80") and not bf16_only:
                raise SystemExit(f"probe substitution {name} does not apply")
        return src

    jitmarlin.cache.render = patched
# JM_PROBE_WHOLE=TN,TK,STAGES: decode (M <= 16, mma.sync path) with that tile and whole output
# tiles per block (iters a multiple of the K-tiles: no tile is split, no cross-block reduction).
whole = os.environ.get("JM_PROBE_WHOLE")
if whole:
    import dataclasses

    import jitmarlin.planner as P
    from jitmarlin.spec import KernelSpec

    tn, tk, st = map(int, whole.split(","))
    real_plan = P.plan

    def plan_whole(profile, p, spec=None):
        pl = real_plan(profile, p, spec)
        s = pl.spec
        if p.m > 16 or s.route != "fused" or s.wgmma:
            return pl
        s = KernelSpec(s.path, s.qtype, s.act, s.group_blocks, s.tm, tn, tk, st)
        k_tiles = p.k // s.tile_k
        tiles = -(-p.m // s.tile_m) * -(-p.n // s.tile_n)
        per = -(-tiles // profile.sms)
        return dataclasses.replace(pl, spec=s, iters=per * k_tiles, grid=-(-tiles // per),
                                   smem_bytes=s.smem_bytes())

    P.plan = plan_whole
# JM_PROBE_BULK=1 (session 46): the sm80-path kernel's plans on sm_90 take KernelSpec.bulk (the
# weights of a stage by bulk copies from warp 0 instead of every thread's cp.asyncs).
if os.environ.get("JM_PROBE_BULK"):
    import dataclasses

    import jitmarlin.planner as P

    real_plan_b = P.plan

    def plan_bulk(profile, p, spec=None):
        pl = real_plan_b(profile, p, spec)
        s = pl.spec
        if getattr(s, "path", "") != "sm80" or s.cluster > 1 or s.bulk or profile.cc < (9, 0):
            return pl
        s = dataclasses.replace(s, bulk=True)
        return dataclasses.replace(pl, spec=s, smem_bytes=s.smem_bytes())

    P.plan = plan_bulk
# JM_PROBE_XBOX=both|none (session 48): the planner's boxed decode plans take x by TMA boxes too
# (KernelSpec.xbox) in both dtypes, or in neither (planner.XBOX_ACTS; the rule: bf16 only).
if os.environ.get("JM_PROBE_XBOX"):
    import jitmarlin.planner as P

    P.XBOX_ACTS = {"both": ("float16", "bfloat16"), "none": ()}[os.environ["JM_PROBE_XBOX"]]
# JM_PROBE_NOBULK=1 (session 46): no TMA weight boxes in the planner's plans (planner.BULK_DECODE off).
if os.environ.get("JM_PROBE_NOBULK"):
    import jitmarlin.planner as P

    P.BULK_DECODE = False
# JM_PROBE_CLUSTER=1 (or a CLUSTER_MAX_LOAD): decode plans with thread-block clusters where they deal evenly
# (planner.CLUSTER_DECODE, off by default since session 8: tools/PERF.md entry 29).
if os.environ.get("JM_PROBE_CLUSTER"):
    import jitmarlin.planner as P

    P.CLUSTER_DECODE = True
    if os.environ["JM_PROBE_CLUSTER"] != "1":   # a value: planner.CLUSTER_MAX_LOAD
        P.CLUSTER_MAX_LOAD = float(os.environ["JM_PROBE_CLUSTER"])
# JM_PROBE_TILE=TN,TK,STAGES[,OCC]: decode (M <= 16, sm80 path) plans with that tile (Stream-K).
tile = os.environ.get("JM_PROBE_TILE")
if tile:
    import jitmarlin.planner as P
    from jitmarlin.spec import KernelSpec

    tn_, tk_, st_, *oc_ = map(int, tile.split(","))   # a fourth value: blocks an SM
    real_choose = P.choose_fused_spec

    def choose_tile(profile, p):
        s = real_choose(profile, p)
        if p.m > 16 or s.path != "sm80":
            return s
        return KernelSpec("sm80", s.qtype, s.act, s.group_blocks, s.tm, tn_, tk_, st_,
                          occupancy=oc_[0] if oc_ else 1)

    P.choose_fused_spec = choose_tile
# JM_PROBE_STREAM_K=1: the wgmma kernel's plans stripe K over every SM even where whole tiles a
# block would do (planner.WHOLE_TILES_MAX_LOAD = 0: the plans before session 9).
if os.environ.get("JM_PROBE_STREAM_K"):
    import jitmarlin.planner as P

    P.WHOLE_TILES_MAX_LOAD = 0.0
# JM_PROBE_WHOLE_LOAD=PCT: the wgmma kernel's plans take whole tiles a block up to PCT/100 x the
# Stream-K plan's K-steps for the busiest block (planner.WHOLE_TILES_MAX_LOAD, 1.035).
if os.environ.get("JM_PROBE_WHOLE_LOAD"):
    import jitmarlin.planner as P

    P.WHOLE_TILES_MAX_LOAD = float(os.environ["JM_PROBE_WHOLE_LOAD"]) / 100
# JM_PROBE_HYBRID=off: no hybrid wgmma plans (planner.HYBRID_PLANS); =split: hybrid plans only where
# the plan would otherwise be Stream-K (no whole-tile plan within WHOLE_TILES_MAX_LOAD; session 28's
# run 2, before planner._hybrid took that condition itself: now the same as unset).
if os.environ.get("JM_PROBE_HYBRID"):
    import jitmarlin.planner as P

    if os.environ["JM_PROBE_HYBRID"] == "off":
        P.HYBRID_PLANS = False
    elif os.environ["JM_PROBE_HYBRID"] == "split":
        _hybrid = P._hybrid

        def _split_only(profile, p, spec):
            n_tiles = -(-p.n // spec.tile_n)
            tiles = -(-p.m // spec.tile_m) * n_tiles
            k_tiles = p.k // spec.tile_k
            stream = -(-tiles * k_tiles // profile.sms)
            return None if P._whole_tiles(profile, spec, tiles, n_tiles, k_tiles, stream) else _hybrid(profile, p, spec)

        P._hybrid = _split_only
# JM_PROBE_HYBRID_GRID=G (session 36): hybrid wgmma plans on G blocks instead of one an SM, so that
# the last wave's tiles split into equal halves where G divides twice the leftover tiles (8B qkv
# and 70B qkv at M = 1024 on 128 blocks: every split tile shared by two blocks that start and end
# it together). Planner geometry only: the kernel takes any grid.
if os.environ.get("JM_PROBE_HYBRID_GRID"):
    import jitmarlin.planner as P

    _g = int(os.environ["JM_PROBE_HYBRID_GRID"])
    _hybrid0 = P._hybrid

    def _hybrid_grid(profile, p, spec):
        h = _hybrid0(profile, p, spec)
        if h is None:
            return None
        tiles = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n)
        whole, rest = divmod(tiles, _g)
        return (_g, -(-rest * (p.k // spec.tile_k) // _g), whole) if whole and rest else h

    P._hybrid = _hybrid_grid
# JM_PROBE_HALVES=off | l2 | LOAD[:MIN_M] (session 36): no half-tile plans (planner.HALF_TILES),
# half-tile plans without clusters (HALF_TILES_CLUSTER), or
# half-tile plans up to LOAD x the Stream-K steps (HALF_TILES_MAX_LOAD, with no cap on the extra
# steps), with hybrid ones from MIN_M rows (HYBRID_MIN_M) where given.
if os.environ.get("JM_PROBE_HALVES"):
    import jitmarlin.planner as P

    _v = os.environ["JM_PROBE_HALVES"]
    if _v == "off":
        P.HALF_TILES = False
    elif _v == "l2":      # half-tile plans, their sums through the workspace (no clusters)
        P.HALF_TILES_CLUSTER = False
    else:
        _load, _, _min_m = _v.partition(":")
        P.HALF_TILES_MAX_LOAD = float(_load)
        P.HALF_TILES_MAX_EXTRA = 1 << 30
        if _min_m:
            P.HYBRID_MIN_M = int(_min_m)
# JM_PROBE_HALF_TM=4 (session 37): half-tile plans also for 64-token wgmma tiles
# (planner.HALF_TILES_MIN_TM), whose kernel then carries the hybrid loop (whole tiles, then half
# a tile: 8B qkv at M = 256 as 192 tiles of 64 x 128 on 128 blocks, 1.5 a block). With
# JM_PROBE_HALVES=LOAD:256 the hybrid ones apply from 256 rows.
if os.environ.get("JM_PROBE_HALF_TM"):
    import jitmarlin.planner as P
    from jitmarlin.spec import KernelSpec

    P.HALF_TILES_MIN_TM = int(os.environ["JM_PROBE_HALF_TM"])
    KernelSpec.hybrid_loop = property(
        lambda s: s.wgmma and s.tm in (P.HALF_TILES_MIN_TM, 16) and s.occupancy == 1)
# JM_PROBE_TALL=off | N (session 37): no 256 x 128 tiles below the tall-tile bar at M <= 256 where
# their plan is whole tiles or halves in clusters (planner.TALL_UNSPLIT), or from N K-steps a
# block (TALL_UNSPLIT_MIN_STEPS).
if os.environ.get("JM_PROBE_TALL"):
    import jitmarlin.planner as P

    if os.environ["JM_PROBE_TALL"] == "off":
        P.TALL_UNSPLIT = False
    else:
        P.TALL_UNSPLIT_MIN_STEPS = int(os.environ["JM_PROBE_TALL"])
# JM_PROBE_WIDE3=off (session 39): no 128 x 192 tiles (planner.WIDE3): the tiles taken before.
if os.environ.get("JM_PROBE_WIDE3") == "off":
    import jitmarlin.planner as P

    P.WIDE3 = False
# JM_PROBE_XPAD=1 (session 37): tools/bench's x drawn with its rows rounded up to 256 and passed
# as the first M rows, and the wgmma kernel's x tensor map given whole row blocks, so no TMA box of
# x reaches past the map (rows past M are read, their outputs discarded): what the out-of-bounds
# rows of a short last row block cost. Timing only.
if os.environ.get("JM_PROBE_XPAD"):
    sys.path.insert(0, os.path.join(HERE, ".."))
    import benchlib
    import jitmarlin.launch as L

    _dv = benchlib.draw_values

    def _padded_x(torch, shape, dtype, scale=1.0, shared_values=False):
        if len(shape) == 2 and scale == 1.0:
            m, k = shape
            return _dv(torch, (-(-m // 256) * 256, k), dtype, scale, shared_values)[:m]
        return _dv(torch, shape, dtype, scale, shared_values)

    benchlib.draw_values = _padded_x
    _xmap = L.x_tensor_map
    L.x_tensor_map = lambda ptr, rows, cols, lda, box_rows: _xmap(ptr, -(-rows // box_rows) * box_rows,
                                                                  cols, lda, box_rows)
# JM_PROBE_TAIL=off (session 37): wgmma kernels without the short-row-block x boxes
# (planner.TAIL_BOXES; KernelSpec.tail).
if os.environ.get("JM_PROBE_TAIL") == "off":
    import jitmarlin.planner as P

    P.TAIL_BOXES = False
# JM_PROBE_NO_ROUTE=1: no dequant + cuBLAS route; the fused kernel (wgmma on sm_90) at every M.
if os.environ.get("JM_PROBE_NO_ROUTE"):
    import jitmarlin.planner as P

    P.dequant_route = lambda profile, p: False
# JM_PROBE_WGMMA_DEPTH=N: the one-block wgmma plans above 64 rows take up to N stages (planner: 4).
depth = os.environ.get("JM_PROBE_WGMMA_DEPTH")
if depth:
    import jitmarlin.planner as P

    real_deepest = P._deepest_wgmma

    def deepest(profile, p, tm, tn, d, occupancy):
        if p.m > 64 and occupancy == 1:
            d = int(depth)
        return real_deepest(profile, p, tm, tn, d, occupancy)

    P._deepest_wgmma = deepest
# JM_PROBE_WGMMA=M[+M...]:TM,TN,STAGES,OCC: problems of exactly those M rows run that wgmma kernel
# (also below the planner's wgmma rows).
force = os.environ.get("JM_PROBE_WGMMA")
if force:
    import jitmarlin.planner as P
    from jitmarlin.spec import KernelSpec, wgmma_threads

    fm, rest = force.split(":")
    ftm, ftn, fst, focc = map(int, rest.split(","))
    real_fused = P.choose_fused_spec

    def fused(profile, p):
        s = real_fused(profile, p)
        if p.m not in [int(v) for v in fm.replace("/", "+").split("+")]:   # ("/": env_ab.sh's lists)
            return s
        spec = KernelSpec("sm90", p.qtype, p.act, P.group_blocks(p), ftm, ftn, 4, fst, occupancy=focc,
                          threads=wgmma_threads(ftn))   # (session 39: tn 12, three warpgroups)
        return P.tail_spec(p, P._half_cluster_spec(profile, p, spec))   # (since session 37: clusters where the planner's would be)

    P.choose_fused_spec = fused
# JM_PROBE_GEMV: decode (M <= 8) plans and the gemv kernel (planner.GEMV_MIN_FILL). "off": the
# Stream-K kernel everywhere; "fill=X": gemv where its plan fills X of the SMs; otherwise
# comma-separated overrides of the planner's gemv choice: cb=C (column blocks a block), cl=L
# (cluster size), w=W (warps a block), u=U (k16 rows a batch), o=O (blocks an SM; plans of up to
# O x SMs blocks too), pm=P (planner.GEMV_PLAN_MAX_M: gemv planned up to P rows), sp=0/1 (no spread
# plans / spread plans only), pa=0/1 (no pair plans / pair plans only); with cb, cl, o or sp=1, gemv
# is taken wherever such a plan fits.
gemv = os.environ.get("JM_PROBE_GEMV")
if gemv:
    import dataclasses

    import jitmarlin.planner as P

    if gemv == "off":
        P.GEMV_MIN_FILL = float("inf")
    elif gemv.startswith("fill="):
        P.GEMV_MIN_FILL = float(gemv[5:])
    else:
        want = {k: int(v) for k, v in (kv.split("=") for kv in gemv.split(","))}
        P.GEMV_PLAN_MAX_M = want.pop("pm", P.GEMV_PLAN_MAX_M)
        real_specs = P.gemv_specs

        def forced_specs(profile, p):
            out = []
            for s in real_specs(profile, p):
                if want.get("cb", s.col_blocks) != s.col_blocks or want.get("cl", s.cluster) != s.cluster:
                    continue
                if want.get("sp", int(s.spread)) != int(s.spread) or want.get("pa", int(s.pair)) != int(s.pair):
                    continue
                w = want.get("w", s.warps)
                out.append(dataclasses.replace(s, warps=w, kwarps=w // s.col_blocks, unroll=want.get("u", s.unroll),
                                               occupancy=want.get("o", s.occupancy)))
            if "o" in want:   # plans of occupancy x SMs blocks: build the cb / cl ones that fill that
                for cl in (1, 2):
                    for cb in P.GEMV_COL_BLOCKS:
                        if want.get("cb", cb) != cb or want.get("cl", cl) != cl:
                            continue
                        blocks = -(-(p.n // 64) // cb) * cl
                        if profile.sms < blocks <= want["o"] * profile.sms and (cl == 1 or profile.clusters):
                            w, u, mm = P._gemv_shape(p)
                            w = want.get("w", w)
                            out.append(P.GemvSpec(profile.path, p.qtype, p.act, P.group_blocks(p), w, w // cb,
                                                  want.get("u", u), cl, mm, want["o"]))
            return out

        P.gemv_specs = forced_specs
        if "cb" in want or "cl" in want or "o" in want or want.get("sp") == 1:
            P.GEMV_MIN_FILL = 0.0
# JM_PROBE_GEMV_SMEM=F: gemv kernels of whole column blocks launched with F times their shared
# memory (what a spread kernel's second slab a warp costs by its size alone).
if os.environ.get("JM_PROBE_GEMV_SMEM"):
    from jitmarlin.spec import GemvSpec

    _smem = GemvSpec.smem_bytes
    _f = float(os.environ["JM_PROBE_GEMV_SMEM"])
    GemvSpec.smem_bytes = lambda self: _smem(self) if self.spread else int(_smem(self) * _f) // 16 * 16
# JM_PROBE_TK32=S (session 40): decode plans (M 9..16) of the mma.sync kernel with K-tiles of 512
# instead of 256 where K allows: the planner's tile, plan kind (whole or Stream-K) and about its
# shared memory: S = "half" (stages // 2), "half1" (stages // 2 + 1) or a number of stages.
if os.environ.get("JM_PROBE_TK32"):
    import dataclasses

    import jitmarlin.planner as P

    _tk32 = os.environ["JM_PROBE_TK32"]
    _real_plan32 = P.plan

    def plan_tk32(profile, p, spec=None):
        pl = _real_plan32(profile, p, spec)
        s = pl.spec
        if spec is not None or p.m <= 8 or p.m > 16 or s.route != "fused" or s.wgmma or s.tk != 16 or p.k % 512:
            return pl
        st = s.stages // 2 if _tk32 == "half" else s.stages // 2 + 1 if _tk32 == "half1" else int(_tk32)
        for st in range(max(2, st), 1, -1):   # the most of S stages that fit
            try:
                return _real_plan32(profile, p, dataclasses.replace(s, tk=32, stages=st))
            except P.UnsupportedError:
                pass
        return pl

    P.plan = plan_tk32
# JM_PROBE_SET=NAME=VALUE[,NAME=VALUE...] (session 41): planner module constants set for the run
# (ints, floats or True/False), e.g. JM_PROBE_SET=WHOLE_DECODE_TK32_STAGES=6.
if os.environ.get("JM_PROBE_SET"):
    import ast

    import jitmarlin.planner as P

    for _kv in os.environ["JM_PROBE_SET"].split(","):
        _k, _v = _kv.split("=", 1)
        if not hasattr(P, _k):
            raise SystemExit(f"JM_PROBE_SET: planner has no {_k}")
        setattr(P, _k, ast.literal_eval(_v))
tool = sys.argv[1]
sys.argv = [os.path.join(HERE, "..", tool)] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
