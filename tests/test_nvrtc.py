"""Render + NVRTC compile for every architecture this NVRTC supports, with PTX and resource
checks. Compiles are shared through the session's cache."""

from dataclasses import replace

import pytest

from jitmarlin.errors import UnsupportedError
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import default_cache
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.planner import plan
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.render import partials, render
from jitmarlin.kernels.spec import GemvSpec

SM80_ARCHS = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_120", "sm_121"]
CASES = [(1, "float16", 128), (16, "bfloat16", -1), (64, "float16", 32), (200, "bfloat16", 64)]


def _build(arch, m, act, group, n=4096, k=4096):
    prof = get_profile(arch)
    p = plan(prof, Problem(m, n, k, act, "uint4b8", group))
    art, _, _ = default_cache().get(p.spec, arch)
    return prof, p, art


@pytest.mark.slow
@pytest.mark.parametrize("arch", SM80_ARCHS)
@pytest.mark.parametrize("m,act,group", CASES)
def test_sm80_path_compiles_with_expected_instructions(arch, m, act, group):
    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch}")
    prof, p, art = _build(arch, m, act, group)
    assert art.cubin[:4] == b"\x7fELF"
    ptx = art.ptx
    if p.spec.wgmma:  # sm_90 from M = 17: the warpgroup kernel (more in test_wgmma.py)
        assert arch == "sm_90" and m >= 17 and art.arch == "sm_90a"
        assert "wgmma.mma_async.sync.aligned" in ptx and "mma.sync" not in ptx
    elif isinstance(p.spec, GemvSpec):  # decode without split tiles (more in test_gemv.py)
        assert m <= 8 and "mma.sync.aligned.m16n8k16.row.col.f32" in ptx
        assert "ld.global.nc.L1::no_allocate.v4" in ptx and "ldmatrix" not in ptx
    else:
        assert "mma.sync.aligned.m16n8k16.row.col.f32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert ("bf16.bf16" if act == "bfloat16" else "f16.f16") in ptx
    if p.spec.wgmma and p.spec.occupancy == 1:  # one-block wgmma kernels load every stage by TMA
        assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    elif isinstance(p.spec, GemvSpec):  # registers straight from global memory, no copy pipeline
        assert "cp.async" not in ptx
    else:
        assert "cp.async.cg.shared.global" in ptx
    assert "lop3.b32" in ptx
    r = art.resources
    assert r["registers"] is not None and r["registers"] <= 255
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    assert r["stack_bytes"] == 0, r
    assert p.smem_bytes + r["static_shared_bytes"] <= prof.smem_per_block


# The NVVM 20 targets' (sm_100+) multi-block mma.sync plans: 4-bit per-channel codes at M = 64 and
# 256 spilled with four m16 blocks under NVRTC 12.9 on sm_100, and every such plan under 13.0
# (plan_base.NVVM20_MAX_TM); 70B down's 8-bit codes take the most registers of the bench plans
# with three (252 on sm_100, 248 on sm_120 under 13.0). (profile, m, n, k, act, qtype, group)
NVVM20_CASES = [
    ("b200", 64, 4096, 4096, "float16", "uint4b8", -1),
    ("b200", 256, 4096, 4096, "float16", "uint4b8", -1),
    ("b200", 256, 8192, 28672, "float16", "uint8", 32),
    ("rtx-pro-6000", 64, 4096, 4096, "float16", "uint4b8", 32),
    ("rtx-pro-6000", 256, 4096, 4096, "bfloat16", "uint8", 32),
    ("gb10", 64, 8192, 28672, "float16", "uint8", 128),
    ("gb10", 200, 4096, 4096, "bfloat16", "uint4b8", 64),
]


@pytest.mark.slow
@pytest.mark.parametrize("prof,m,n,k,act,qtype,group", NVVM20_CASES)
def test_nvvm20_multi_block_tiles_do_not_spill(prof, m, n, k, act, qtype, group):
    prof = get_profile(prof)
    if prof.arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {prof.arch}")
    p = plan(prof, Problem(m, n, k, act, qtype, group))
    assert p.route == "fused" and p.spec.tm > 1, p.spec.name
    r = default_cache().get(p.spec, prof.arch)[0].resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, (p.spec.name, r)


LEGACY = [("v100", "sm_70"), ("t4", "sm_75")]


@pytest.mark.slow
@pytest.mark.parametrize("prof,arch", LEGACY)
@pytest.mark.parametrize("m,group", [(1, 128), (16, -1), (33, 32), (200, 64)])
def test_legacy_paths_compile_with_expected_instructions(prof, arch, m, group):
    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch} (install the cu12 extra)")
    p = plan(get_profile(prof), Problem(m, 4096, 4096, "float16", "uint4b8", group))
    art, _, _ = default_cache().get(p.spec, arch)
    ptx = art.ptx
    assert "cp.async" not in ptx and "m16n8k16" not in ptx
    if arch == "sm_70":
        assert "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32" in ptx
        assert "ldmatrix" not in ptx and "m16n8k8" not in ptx
    else:
        assert "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4" in ptx
    r = art.resources
    assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, r
    assert p.smem_bytes <= get_profile(prof).smem_per_block


@pytest.mark.slow
@pytest.mark.parametrize("prof,arch", [("t4", "sm_75"), ("a100", "sm_80"), ("h100", "sm_90")])
def test_l2_policies_of_the_mma_kernel_from_sm80(prof, arch):
    """The mma.sync kernel's split-tile partial sums carry an L2 evict-last policy from sm_80
    (createpolicy) and its weights' cp.async (sm_90: TMA box) an evict-first one (one M chunk) or evict-normal;
    sm_75 has no policies; the wgmma kernel's larger slots are not kept, its weights' TMA loads
    take the same stream policy."""
    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch}")
    p = plan(get_profile(prof), Problem(16, 4096, 14336, "float16", "uint4b8", 128))
    assert not p.spec.wgmma and p.iters % p.k_tiles, "the plan must split tiles over blocks"
    ptx = default_cache().get(p.spec, arch)[0].ptx
    kept = (
        "createpolicy.fractional.L2::evict_last" in ptx,
        "st.global.cg.L2::cache_hint.v4.f32" in ptx,
        "ld.global.cg.L2::cache_hint.v4.f32" in ptx,
    )
    assert kept == ((True,) * 3 if arch != "sm_75" else (False,) * 3), kept
    # (on sm_90 the plan takes its weights by TMA boxes, KernelSpec.bulk: the policy is the box's)
    w_copy = "complete_tx::bytes.L2::cache_hint" if p.spec.bulk else "cp.async.cg.shared.global.L2::cache_hint"
    assert p.spec.bulk == (arch == "sm_90")
    streamed = (
        "createpolicy.fractional.L2::evict_first" in ptx,
        "createpolicy.fractional.L2::evict_normal" in ptx,
        w_copy in ptx,
    )
    assert streamed == ((True,) * 3 if arch != "sm_75" else (False,) * 3), streamed
    if arch == "sm_90":
        w = plan(get_profile(prof), Problem(256, 4096, 4096, "float16", "uint4b8", 128))
        wptx = default_cache().get(w.spec, arch)[0].ptx
        assert w.spec.wgmma and "createpolicy.fractional.L2::evict_last" not in wptx
        assert "cg.L2::cache_hint" not in wptx  # partial sums: plain .cg
        assert "complete_tx::bytes.L2::cache_hint" in wptx and "L2::evict_first" in wptx  # weights


def test_partials_select_per_path():
    from jitmarlin.kernels.spec import KernelSpec

    s80 = KernelSpec("sm80", "uint4b8", "bfloat16", 8, 1, 8, 8, 4)
    assert partials(s80)["mma"] == "mma/sm80.cuh"
    assert partials(s80)["pipe"] == "copy/cp_async.cuh"
    s70 = KernelSpec("sm70", "uint4b8", "float16", 8, 1, 8, 8, 2)
    assert partials(s70)["mma"] == "mma/sm70.cuh"
    assert partials(s70)["ldsm"] == "ldsm/quadpair.cuh"
    assert partials(s70)["pipe"] == "copy/register_staged.cuh"
    s75 = KernelSpec("sm75", "uint4b8", "float16", 8, 1, 8, 8, 2)
    assert partials(s75)["mma"] == "mma/sm75.cuh"
    assert partials(s75)["pipe"] == "copy/register_staged.cuh"
    assert partials(s75)["act"] == "act/float16_sm70.cuh"


def test_source_is_readable_and_self_describing():
    from jitmarlin.kernels.spec import KernelSpec

    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
    src = render(s)
    assert src.startswith(f"// {s.name}")
    assert s.canonical() in src
    assert "{{" not in src and "//%" not in src


def test_compile_error_names_spec_and_arch():
    from jitmarlin.errors import CompileError
    from jitmarlin.kernels.spec import KernelSpec

    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
    with pytest.raises(CompileError) as ei:
        nvrtc.compile_source("this is not C++", s.name, "sm_90", s)
    msg = str(ei.value)
    assert s.name in msg and "sm_90" in msg and "NVRTC log" in msg
    assert ei.value.log


def test_resource_parser():
    log = """ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 2048 bytes smem, 412 bytes cmem[0]
"""
    r = nvrtc.parse_resources(log, "k1")
    assert r == {
        "registers": 96,
        "spill_stores": 4,
        "spill_loads": 12,
        "stack_bytes": 8,
        "static_shared_bytes": 2048,
        "param_bytes": 412,
    }


def test_sm70_needs_cuda12_nvrtc(monkeypatch):
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: ("sm_75", "sm_80", "sm_90"))
    monkeypatch.setattr(nvrtc, "version", lambda: (13, 0))
    with pytest.raises(UnsupportedError, match=r"cu12"):
        nvrtc.check_arch("sm_70")


@pytest.mark.slow
@pytest.mark.parametrize("act,k,n", [("float16", 8192, 8192), ("bfloat16", 28672, 8192)])
def test_cluster_decode_compiles_for_sm90(act, k, n):
    """The cluster decode kernel (planner.CLUSTER_DECODE's plans for 70B o and down on H100):
    compile-time cluster dims, partial sums through mapa + st.shared::cluster, an mbarrier waited
    on at cluster scope, the split cluster barrier; no global workspace traffic (no fence, no
    polled counter)."""
    from jitmarlin.kernels.spec import KernelSpec

    if "sm_90" not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target sm_90")
    prof = get_profile("sm_90")
    p = plan(prof, Problem(1, n, k, act, "uint4b8", 128), KernelSpec("sm80", "uint4b8", act, 8, 1, 8, 16, 8, cluster=2))
    art, _, _ = default_cache().get(p.spec, "sm_90")
    assert art.arch == "sm_90"
    ptx = art.ptx
    assert ".explicitcluster" in ptx and ".reqnctapercluster 2, 1, 1" in ptx
    for instr in (
        "mapa.shared::cluster",
        "st.shared::cluster.v4.f32",
        "mbarrier.arrive.release.cluster.shared::cluster.b64",
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
        "barrier.cluster.arrive.release",
        "barrier.cluster.wait.acquire",
    ):
        assert instr in ptx, instr
    assert "atom.global" not in ptx and "ld.global.acquire" not in ptx and "membar" not in ptx
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, r
    assert p.smem_bytes <= prof.smem_per_block
    # the same spec cannot be built for a GPU without clusters
    with pytest.raises(UnsupportedError, match="need sm_90 or newer"):
        default_cache().get(p.spec, "sm_80")


@pytest.mark.parametrize("path,arch,m", [("sm80", "sm_80", 16), ("sm90", "sm_90", 256)])
def test_stream_k_contributors_count_in_with_one_release(path, arch, m):
    """A block that leaves partial sums for a split tile counts itself in after a block barrier
    with one thread's release fence (fence.acq_rel.gpu, then the atomic add), not with every
    thread's sequentially consistent fence (membar.gl / fence.sc.gpu): PERF.md entry 72. The
    finisher acquires the counter."""
    from jitmarlin.kernels.spec import KernelSpec

    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch}")
    if path == "sm90":
        spec = KernelSpec("sm90", "uint4b8", "float16", 8, 8, 8, 4, 6)  # 128 x 128, Stream-K
    else:
        spec = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 16, 3)  # decode Stream-K
    p = plan(get_profile(arch), Problem(m, 6144, 4096, "float16", "uint4b8", 128), spec)
    assert any(p.block_ranges(b)[-1][1] % p.k_tiles for b in range(p.grid)), "no split tile"
    ptx = default_cache().get(p.spec, arch)[0].ptx
    assert "fence.acq_rel.gpu" in ptx and "ld.global.acquire.gpu" in ptx
    assert "membar.gl" not in ptx and "fence.sc.gpu" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize("arch", SM80_ARCHS)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_k512_tiles_compile_clean(arch, act):
    """K-tiles of 512 (tk 32): on sm_90 the planner's kernel for Llama-3-8B qkv at M = 16, on the
    other archs the autotuner's deepest such candidate that fits; no spills, no stack."""
    from jitmarlin.kernels.planner import _fits
    from jitmarlin.kernels.spec import KernelSpec

    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch}")
    prof = get_profile(arch)
    if arch == "sm_90":
        spec = plan(prof, Problem(16, 6144, 4096, act, "uint4b8", 128)).spec
        assert (spec.tn, spec.tk, spec.whole) == (4, 32, True)
    else:
        spec = next(
            s for st in (8, 6, 5, 4, 3, 2) if _fits(prof, s := KernelSpec("sm80", "uint4b8", act, 8, 1, 4, 32, st))
        )
    art, _, _ = default_cache().get(spec, arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32" in art.ptx and "cp.async.cg.shared.global" in art.ptx
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, (spec.name, r)


@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_bulk_weight_boxes_compile_for_sm90(act):
    """KernelSpec.bulk (the planner's kernel for Llama-3-70B gate_up at M = 16 on H100): the weights
    by one TMA box a stage, the map prefetched, an mbarrier wait a step; the scales keep cp.async,
    and so does x in fp16 (in bf16, KernelSpec.xbox: x's map too); no spills. Without bulk, no TMA
    at all."""
    if "sm_90" not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target sm_90")
    p = plan(get_profile("sm_90"), Problem(16, 57344, 8192, act, "uint4b8", 128))
    assert p.spec.bulk and p.spec.xbox == (act == "bfloat16")
    art, _, _ = default_cache().get(p.spec, "sm_90")
    ptx = art.ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "prefetch.tensormap" in ptx and "mbarrier.try_wait.parity" in ptx
    assert "cp.async.cg.shared.global" in ptx  # the scales (and x without xbox)
    assert ptx.count(".param .align 64 .b8") == (2 if p.spec.xbox else 1)  # the maps, by value
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, (p.spec.name, r)
    plain = default_cache().get(replace(p.spec, bulk=False, xbox=False), "sm_90")[0].ptx
    assert "cp.async.bulk" not in plain and "tensormap" not in plain
