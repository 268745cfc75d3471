#!/usr/bin/env python3
"""Session 38 probe: the wgmma kernel with both operands in shared memory (SS) instead of the
dequantised weights as the register operand (RS). Entry 33 of tools/PERF.md found the RS kernel
~7% more cycles than cuBLAS's SS kernel even with no dequantisation at all. Here each warp
still dequantises its A fragments in registers, then writes them with one stmatrix a k16 step
into a 64 x 64 K-major, 128-byte-swizzled slab of its warpgroup (two slabs a warpgroup,
alternating by step); after a proxy fence and a warpgroup barrier the wgmmas read A through a
descriptor like x. Applies to the one-slab-a-warpgroup kernels (tn 8) with an even number of
at least 4 stages, one block an SM and no cluster (every other kernel renders as on main).

    python3 tools/probe/ss_templates.py DIR     # writes templates/ with the SS form to DIR
variant_bench.py does this itself under JM_PROBE_SS=1 (and adds the slabs' shared memory to
KernelSpec.smem_bytes)."""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (file, old, new): each old text must occur exactly once.
PATCHES = [
    ("mma/sm90.cuh",
     '''      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
''',
     '''      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
// SS form (probe): A, 64 x 16, from shared memory through a descriptor (K-major, 128-byte swizzle).
JM_DEV void wgmma_k16_ss(float (&d)[{{ nreg }}], u64 desc_a, u64 desc_b) {
  asm volatile(
      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %{{ nreg + 2 }}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ act_ptx }}.{{ act_ptx }} {"
//% for i in range(0, nreg, 8)
      "<% for j in range(i, i + 8) %>%{{ j }}{{ '' if j == nreg - 1 else ',' }}<% endfor %>"
//% endfor
      "}, %{{ nreg }}, %{{ nreg + 1 }}, p, 1, 1, 0, 0;\\n}\\n"
//% for i in range(0, nreg, 8)
      {{ ':' if i == 0 else ',' }} <% for j in range(i, i + 8) %>"+f"(d[{{ j }}]){{ '' if j == i + 7 else ', ' }}<% endfor %>

//% endfor
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
// Four 8x8 16-bit matrices stored as they are held (the mma A / ldmatrix layout).
JM_DEV void stmatrix_x4(const u32 (&r)[4], u32 addr) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
// The 128 threads of one warpgroup (named barrier `id`).
JM_DEV void bar_sync_wg(int id) { asm volatile("bar.sync %0, 128;" :: "r"(id) : "memory"); }
'''),
    ("wgmma.cu.j2",
     '''#define JM_MIN_BLOCKS {{ spec.occupancy }}
''',
     '''//% set ss = spec.tn == 8 and spec.cluster == 1 and spec.occupancy == 1 and spec.stages >= 4 and spec.stages % 2 == 0
// PROBE (tools/probe/ss_templates.py): {{ "A from shared memory (SS wgmma)" if ss else "unchanged (RS)" }}
#define JM_MIN_BLOCKS {{ spec.occupancy }}
'''),
    ("wgmma.cu.j2",
     '''static_assert(TK == 4 && A_ROW == 8,''',
     '''//% if ss
// Two 64 x 64 fp16 A slabs a warpgroup (8 KB, 512 chunks each; slab (step & 1) * 2 + wg), after
// everything else, 1024-byte aligned.
constexpr int ABUF_CHUNK = (RECV_CHUNK + (8 * STAGES + 16 + 15) / 16 + 63) / 64 * 64;
static_assert(STAGES % 2 == 0 && MW == 1 && KS == 4 && OVERLAP_MMA, "SS probe: one slab a warpgroup, even stages");
//% endif
static_assert(TK == 4 && A_ROW == 8,'''),
    ("wgmma.cu.j2",
     '''            a[s][i][3] = b[1].r[1];
''',
     '''            a[s][i][3] = b[1].r[1];
//% if ss
            {   // matrix q = lane / 8: rows 8 (q & 1) + lane % 8 of the warp's 16, k 8 (q >> 1) of step kk
              const int rr = 16 * w + (lane & 7) + 8 * ((lane >> 3) & 1);
              const int cc = 2 * kk + (lane >> 4);
              stmatrix_x4(a[s][i], smem_u32(smem + ABUF_CHUNK + ((stage & 1) * 2 + wg) * 512)
                                       + rr * 128 + ((cc ^ (rr & 7)) << 4));
            }
//% endif
'''),
    ("wgmma.cu.j2",
     '''      auto issue = [&](int stage, int k0, const u32 (&a)[MW][KS][4]) {
        wgmma_fence();
''',
     '''      auto issue = [&](int stage, int k0, const u32 (&a)[MW][KS][4]) {
//% if ss
        fence_proxy_async();     // the slab's stmatrix writes, read by the wgmmas' async proxy
        bar_sync_wg(1 + wg);     // every warp's 16 rows of the slab are in
        const u32 adesc_lo = desc_lo + (ABUF_CHUNK + ((stage & 1) * 2 + wg) * 512) ;
//% endif
        wgmma_fence();
'''),
    ("wgmma.cu.j2",
     '''          for (int s = 0; s < MW; ++s) wgmma_k16(acc[s], a[s][i], desc);
''',
     '''//% if ss
          for (int s = 0; s < MW; ++s) wgmma_k16_ss(acc[s], desc_hi | (u32)(adesc_lo + 2 * (k0 + i)), desc);
//% else
          for (int s = 0; s < MW; ++s) wgmma_k16(acc[s], a[s][i], desc);
//% endif
'''),
    ("wgmma.cu.j2",
     '''          wgmma_wait<1>();       // the group on `prev` is done: the set is free
          keep_alive(prev);
''',
     '''          wgmma_wait<1>();       // the group on `prev` is done: the set is free
//% if not ss
          keep_alive(prev);
//% endif
'''),
]


def ss_bytes(spec) -> int:
    """Shared memory the SS form adds to `spec` (0 where it does not apply): the slabs, and 2 KB
    for the alignment of their base (up to 1008 bytes) and the copy of the mbarrier area that
    ABUF_CHUNK skips. (Runs 2 and 4 ran with 1 KB there, which a 4-stage kernel can overrun by a
    few bytes where the base rounds up by a full 1008; the tested kernels ran clean.)"""
    if not (spec.wgmma and spec.tn == 8 and spec.cluster == 1 and spec.occupancy == 1
            and spec.stages >= 4 and spec.stages % 2 == 0):
        return 0
    return 2048 + 2 * 2 * 64 * 64 * 2


# Timing-only variants (wrong sums possible): without the proxy fence, without fence and barrier.
DROPS = {"nofence": ["        fence_proxy_async();     // the slab's stmatrix writes, read by the wgmmas' async proxy\n"],
         "nosync": ["        fence_proxy_async();     // the slab's stmatrix writes, read by the wgmmas' async proxy\n",
                    "        bar_sync_wg(1 + wg);     // every warp's 16 rows of the slab are in\n"]}


def write(dst: Path, variant: str = "1") -> Path:
    dst = Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "templates", dst)
    for name, old, new in PATCHES:
        f = dst / name
        text = f.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"ss_templates: patch does not apply once to {name}: {old[:60]!r}")
        f.write_text(text.replace(old, new))
    f = dst / "wgmma.cu.j2"
    text = f.read_text()
    for line in DROPS.get(variant, []):
        assert text.count(line) == 1, line
        text = text.replace(line, "")
    f.write_text(text)
    return dst


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
