"""The Hopper warpgroup kernel (templates/wgmma.cu.j2, path 'sm90'): planning, compilation for
sm_90a on the CPU, and correctness on an sm_90 GPU for every tile shape, quant type and group."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from gpu_cases import check_forced

from jitmarlin import UnsupportedError
from jitmarlin.jit.profiles import PROFILES, get_profile
from jitmarlin.kernels.launch import MAX_SLOT_FLOATS
from jitmarlin.kernels.mma import plan as mma_plan
from jitmarlin.kernels.planner import (
    ALL_QTYPES,
    WGMMA_MIN_M,
    candidate_specs,
    choose_fused_spec,
    dequant_min_m,
    group_blocks,
    plan,
)
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.render import render
from jitmarlin.kernels.spec import KernelSpec

TILES = [(4, 8), (4, 16), (8, 8), (8, 16), (16, 8)]
GROUP_OF = {"nvfp4": 16, "mxfp4": 32}


def _spec(qtype="uint4b8", act="float16", group=128, tm=8, tn=16, stages=4, occupancy=1):
    p = Problem(256, 4096, 4096, act, qtype, group)
    return KernelSpec("sm90", qtype, act, group_blocks(p), tm, tn, 4, stages, occupancy=occupancy)


# tiles whose sums leave room for two blocks per SM (<= 128 registers a thread)
OCC2_TILES = [(4, 8), (4, 16), (8, 8)]
# 16- and 32-token tiles (M <= 32)
SMALL_TILES = [(1, 8), (1, 16), (2, 8), (2, 16)]


# ---- planning (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize("prof", ["h100", "h200"])
def test_hopper_plans_wgmma_from_17_rows(prof):
    h = get_profile(prof)
    for qt in ALL_QTYPES:
        g = GROUP_OF.get(qt, 128)
        for m in (1, 9, 16):
            assert plan(h, Problem(m, 4096, 4096, "float16", qt, g)).spec.path == "sm80"
        for m in (WGMMA_MIN_M, 32, 33, 63, 100, dequant_min_m(h) - 1, 4096):
            p = Problem(m, 4096, 4096, "bfloat16", qt, g)
            # from dequant_min_m rows up the planner routes to dequant + cuBLAS; the fused
            # kernel it would pick there (and an autotuner can) is still the wgmma one
            pl = plan(h, p) if m < dequant_min_m(h) else plan(h, p, choose_fused_spec(h, p))
            assert pl.spec.path == "sm90" and pl.smem_bytes <= h.smem_per_block
            assert pl.spec.tile_m * pl.spec.tile_n <= MAX_SLOT_FLOATS


def test_other_generations_never_plan_wgmma():
    for prof in PROFILES.values():
        if prof.cc == (9, 0):
            continue
        for m in (64, 1024):
            act = "float16"
            assert plan(prof, Problem(m, 4096, 4096, act, "uint4b8", 128)).spec.path != "sm90"
            assert all(not s.wgmma for s in candidate_specs(prof, Problem(m, 4096, 4096, act, "uint4b8", 128)))
    with pytest.raises(UnsupportedError, match="sm_90a"):
        plan(get_profile("a100"), Problem(256, 4096, 4096, "float16", "uint4b8", 128), _spec())


def test_every_wgmma_plan_fits(rng):
    h = get_profile("h100")
    ran = 0
    for _ in range(300):
        m = int(rng.integers(17, 9000))
        n = 64 * int(rng.integers(1, 900))
        k = 64 * int(rng.integers(1, 460))
        g = int(rng.choice([-1, 32, 64, 128]))
        if g > 0 and k % g:
            continue  # (groups of 128 on an odd number of 64s)
        ran += 1
        p = Problem(m, n, k, "float16", "uint4b8", g)
        pl = plan(h, p, choose_fused_spec(h, p))  # (the planner's own route from 1024 rows up
        assert pl.spec.wgmma and pl.smem_bytes <= h.smem_per_block  # is dequant + cuBLAS)
        assert pl.spec.occupancy * (pl.smem_bytes + 1024) <= h.smem_per_sm
        assert pl.grid <= h.sms * pl.spec.occupancy
        assert sum(e - s for b in range(pl.grid) for s, e in pl.block_ranges(b)) == pl.total_iters
    assert ran >= 200, f"only {ran} of 300 random problems were checked"  # (about 1 in 8 skipped)


def test_whole_tiles_a_block_where_they_cost_little(monkeypatch):
    """Without hybrid plans: tile counts that are multiples of 128 on a 132-SM H100 get whole
    tiles a block (no split tile, no partial sums); the others keep Stream-K. Never more than
    WHOLE_TILES_MAX_LOAD x the Stream-K plan's K-steps for the busiest block."""
    from jitmarlin.kernels import planner

    monkeypatch.setattr(mma_plan, "HYBRID_PLANS", False)
    h = get_profile("h100")
    for (k, n), m, grid, iters in [
        ((4096, 4096), 1024, 128, 64),  # 8B o: 128 tiles
        ((4096, 28672), 1024, 128, 448),  # 8B gate_up: 7 a block
        ((8192, 8192), 1024, 128, 256),  # 70B o: 2 a block
        ((8192, 57344), 512, 128, 896),
    ]:  # 70B gate_up: 7 a block
        pl = plan(h, Problem(m, n, k, "float16", "uint4b8", 128))
        assert pl.spec.wgmma and (pl.grid, pl.iters) == (grid, iters), (k, n, m, pl.grid, pl.iters)
        assert pl.iters % pl.k_tiles == 0
    # 8B qkv at 1024 rows: 192 tiles would load a block with 2 where Stream-K gives 1.45
    pl = plan(h, Problem(1024, 6144, 4096, "float16", "uint4b8", 128))
    assert (pl.grid, pl.iters, pl.whole) == (131, 94, 0)
    # decode past the gemv kernel's 8 rows (mma.sync kernel) keeps Stream-K
    pl = plan(h, Problem(16, 4096, 14336, "float16", "uint4b8", 128))
    assert not pl.spec.wgmma and pl.iters % pl.k_tiles
    rng = np.random.default_rng(5)
    for _ in range(400):
        p = Problem(
            int(rng.integers(65, 2048)),
            64 * int(rng.integers(1, 900)),
            64 * int(rng.integers(1, 460)),
            "float16",
            "uint4b8",
            -1,
        )
        pl = plan(h, p, choose_fused_spec(h, p))
        stream = -(-pl.total_iters // min(h.sms * pl.spec.occupancy, pl.total_iters))
        assert pl.iters <= planner.WHOLE_TILES_MAX_LOAD * stream
        if pl.iters % pl.k_tiles == 0:  # whole tiles: no block range ends inside a tile
            assert pl.grid * pl.iters >= pl.total_iters


def test_two_blocks_per_sm_for_wide_tiles_where_each_gets_enough_steps():
    h = get_profile("h100")
    # K-steps of a 64 x 128 tile a block with two blocks per SM: 8B o 7.8, 8B qkv 11.6 (one
    # block, 128 wide, 8 stages); 8B down 27, 70B o 31, 70B qkv 39 (two blocks, 128 wide; the
    # autotuner's picks of PERF.md entry 54); 8B gate_up 54, 70B down 109, 70B gate_up 217 (two
    # blocks, 256 wide); 4 stages with two
    for (k, n), occ, tn, stages in [
        ((4096, 4096), 1, 8, 8),
        ((4096, 6144), 1, 8, 8),
        ((14336, 4096), 2, 8, 4),
        ((8192, 8192), 2, 8, 4),
        ((8192, 10240), 2, 8, 4),
        ((4096, 28672), 2, 16, 4),
        ((28672, 8192), 2, 16, 4),
        ((8192, 57344), 2, 16, 4),
    ]:
        spec = plan(h, Problem(64, n, k, "float16", "uint4b8", 128)).spec
        assert spec.wgmma and spec.occupancy == occ and spec.name.endswith("o2") == (occ == 2)
        assert (spec.tn, spec.stages) == (tn, stages), spec.name
        assert plan(h, Problem(64, n, k, "float16", "uint4b8", 128)).grid <= 2 * h.sms
    # only M <= 64 takes it, and never where two blocks' shared memory would not fit an SM
    assert plan(h, Problem(200, 57344, 8192, "float16", "uint4b8", 128)).spec.occupancy == 1
    small = replace(h, smem_per_sm=120 * 1024)  # two 4-stage blocks need ~140 KB
    assert plan(small, Problem(64, 57344, 8192, "float16", "uint4b8", 128)).spec.occupancy == 1
    with pytest.raises(ValueError, match="occupancy"):
        _spec(occupancy=3).check()


def test_planner_takes_32_token_tiles_up_to_32_rows():
    """M = 17..32: one 32-token tile, two blocks an SM on every bench layer, 256 features wide
    where a 64 x 128 tile would give each block many K-steps (the tuner's picks at M = 32,
    PERF.md entry 55); M = 33..64: 64-token tiles as before."""
    h = get_profile("h100")
    for (k, n), tn in [
        ((4096, 4096), 8),
        ((4096, 6144), 8),
        ((14336, 4096), 8),
        ((8192, 8192), 8),
        ((8192, 10240), 8),
        ((4096, 28672), 16),
        ((28672, 8192), 16),
        ((8192, 57344), 16),
    ]:
        for m in (17, 20, 32):
            spec = plan(h, Problem(m, n, k, "bfloat16", "uint4b8", 128)).spec
            assert spec.wgmma and (spec.tm, spec.tn, spec.stages, spec.occupancy) == (2, tn, 4, 2), (m, spec.name)
        assert plan(h, Problem(33, n, k, "bfloat16", "uint4b8", 128)).spec.tm == 4
        assert plan(h, Problem(16, n, k, "bfloat16", "uint4b8", 128)).spec.path == "sm80"
    # the tuner's wgmma candidates at M <= 32: 32- and 64-token tiles
    cands = [s for s in candidate_specs(h, Problem(24, 8192, 8192, "float16", "uint4b8", 128)) if s.wgmma]
    assert {s.tm for s in cands} == {2, 4}
    assert not [s for s in candidate_specs(h, Problem(16, 8192, 8192, "float16", "uint4b8", 128)) if s.wgmma]


def test_planner_takes_the_overlapping_kernel_above_64_rows():
    """From 65 rows up the planner's wgmma tiles have one 64-feature slab per warpgroup and
    >= 4 stages: the configurations in which the template dequantises a step while the
    previous step's wgmmas run (OVERLAP_MMA). Up to 2047 rows on H100 where x fits the L2
    cache; then dequant + cuBLAS, unless the wgmma plan has whole tiles a block."""
    h = get_profile("h100")
    for m, tile in [(65, (8, 8)), (128, (8, 8)), (129, (16, 8)), (256, (16, 8)), (1023, (16, 8)), (2047, (16, 8))]:
        for k, n in [(4096, 28672), (8192, 57344), (28672, 8192)]:  # >= 70 K-steps a block
            pl = plan(h, Problem(m, n, k, "bfloat16", "uint4b8", 128))
            spec = pl.spec
            if 2 * m * k > h.l2_bytes and spec.route == "dequant":  # x larger than the L2 cache
                assert m >= 1023, (m, n, k)
                fused = plan(
                    h,
                    Problem(m, n, k, "bfloat16", "uint4b8", 128),
                    choose_fused_spec(h, Problem(m, n, k, "bfloat16", "uint4b8", 128)),
                )
                assert fused.iters % fused.k_tiles and not fused.whole, "whole-tile and hybrid plans stay fused"
                continue
            assert spec.wgmma and (spec.tm, spec.tn) == tile and spec.stages >= 4, (m, n, k, spec.name)
    # 70B down at 1023 rows: 4 x 64 tiles, two a block, so fused although x is 58 MB
    pl = plan(h, Problem(1023, 8192, 28672, "float16", "uint4b8", 128))
    assert pl.spec.wgmma and (pl.grid, pl.iters) == (128, 2 * 448)
    # 2048 rows: fused where tiles deal whole to 128 blocks or to a hybrid plan, dequant + cuBLAS
    # where a Stream-K plan would split them all
    assert plan(h, Problem(2048, 8192, 8192, "float16", "uint4b8", 128)).spec.wgmma
    assert plan(h, Problem(2048, 2560, 8192, "float16", "uint4b8", 128)).whole == 1  # 160 tiles
    assert plan(h, Problem(2048, 2560, 4096, "float16", "uint4b8", 128)).route == "dequant"  # K-steps
    assert plan(h, Problem(2048, 1536, 8192, "float16", "uint4b8", 128)).spec.route == "dequant"  # 96
    assert plan(h, Problem(2048, 4480, 8192, "float16", "uint4b8", 128)).spec.route == "dequant"  # 280:
    # two whole a block would not keep the blocks in step (35 columns)
    # a small layer above 128 rows: 256 x 128 tiles would give a block too few K-steps; up to 256
    # rows the bar is 70 steps (8B o 16, 8B down 54 take 128 x 128 tiles, 70B qkv 78 does not;
    # 70B o, 62, takes 256 x 128 in halves: test_planner's test_tall_tiles_where_no_tile_is_chained);
    # above, 20 (8B o at 512 rows: 31). 8B qkv (N = 6144) takes 128 x 192 tiles (planner._wide3).
    for m, n, k, tile in [
        (256, 4096, 4096, (8, 8, 6)),
        (256, 6144, 4096, (8, 12, 6)),
        (256, 4096, 14336, (8, 8, 6)),
        (256, 8192, 8192, (16, 8, 4)),
        (256, 10240, 8192, (16, 8, 4)),
        (512, 4096, 4096, (16, 8, 4)),
        (512, 6144, 4096, (8, 12, 6)),
        (1024, 6144, 4096, (16, 8, 4)),
    ]:
        s = plan(h, Problem(m, n, k, "float16", "uint4b8", 128)).spec
        assert (s.tm, s.tn, s.stages) == tile, (m, n, k, s.name)


def test_wgmma_candidates_are_valid():
    h = get_profile("h100")
    cands = [s for s in candidate_specs(h, Problem(512, 8192, 8192, "float16", "uint4b8", 128)) if s.wgmma]
    assert {(s.tm, s.tn) for s in cands} == set(TILES)
    for s in cands:
        s.check()
        assert s.smem_bytes() <= h.smem_per_block


@pytest.mark.parametrize(
    "bad,msg",
    [
        (dict(tk=8), "K tiles of 64"),
        (dict(tn=4), "tn 8 or 16"),
        (dict(tm=3), "tm 1, 2, 4, 8 or 16"),
        (dict(tm=16, tn=16), "256 fp32 sums"),
        (dict(tm=16, tn=12, threads=384), "at most 64 with 3 warpgroups"),
        (dict(tn=12), "uses 384 threads"),
        (dict(tm=4, tn=12, threads=384, occupancy=2), "one block an SM"),
        (dict(stages=1), "2..8 stages"),
    ],
)
def test_wgmma_spec_checks(bad, msg):
    with pytest.raises(ValueError, match=msg):
        replace(_spec(), **bad).check()


def test_half_tile_plans_run_in_clusters_of_two(monkeypatch):
    """Where the wgmma plan is a half-tile plan (planner.is_half_plan) whose clusters the GPU
    holds, the planner takes the kernel in clusters of two (the halves trade their sums through
    distributed shared memory, KernelSpec.cluster_bytes more shared memory); the same plan. A
    cluster kernel on a problem without a half-tile plan, or on a GPU without clusters: a clear
    error before anything launches."""
    h = get_profile("h100")
    rows = [
        ((1024, 6144, 4096), (128, 32, 1)),  # 8B qkv: 1 whole tile a block + a half
        ((256, 4096, 14336), (128, 112, 0)),  # 8B down: 64 tiles of 128 x 128, halved
        ((256, 4096, 4096), (128, 32, 0)),  # 8B o: Stream-K's own plan halves every tile
        ((256, 8192, 28672), (128, 224, 0)),
    ]  # 70B down
    for (m, n, k), geom in rows:
        for act in ("float16", "bfloat16"):
            p = Problem(m, n, k, act, "uint4b8", 128)
            pl = plan(h, p)
            assert pl.spec.wgmma and pl.spec.cluster == 2 and (pl.grid, pl.iters, pl.whole) == geom
            plain = replace(pl.spec, cluster=1)
            assert pl.spec.smem_bytes() == plain.smem_bytes() + pl.spec.tile_m * pl.spec.tile_n * 2 + 16
            assert pl.spec.name == plain.name + "c2"
            assert (plan(h, p, plain).grid, plan(h, p, plain).iters) == (pl.grid, pl.iters)
    monkeypatch.setattr(mma_plan, "HALF_TILES_CLUSTER", False)
    assert plan(h, Problem(1024, 6144, 4096, "float16", "uint4b8", 128)).spec.cluster == 1
    monkeypatch.undo()
    two = replace(_spec(tm=16, tn=8), cluster=2)
    with pytest.raises(UnsupportedError, match="half-tile plans only"):
        plan(h, Problem(1024, 10240, 8192, "float16", "uint4b8", 128), two)  # 70B qkv: hybrid
    with pytest.raises(UnsupportedError, match="sm_90"):
        plan(get_profile("a100"), Problem(1024, 6144, 4096, "float16", "uint4b8", 128), two)
    # the autotuner weighs the cluster kernels too
    cands = candidate_specs(h, Problem(1024, 6144, 4096, "float16", "uint4b8", 128))
    assert plan(h, Problem(1024, 6144, 4096, "float16", "uint4b8", 128)).spec in cands
    assert all(replace(c, cluster=1) in cands for c in cands if c.wgmma and c.cluster == 2)
    # at most as many clusters as the GPU holds at once
    p = Problem(256, 4096, 14336, "float16", "uint4b8", 128)  # 64 clusters
    small = replace(h, clusters=((2, 60),))
    assert plan(small, p).spec.cluster == 1 and plan(h, p).spec.cluster == 2


# ---- compilation for sm_90a (NVRTC, no GPU) ------------------------------------------------------


def _compile(spec):
    from jitmarlin.jit.cache import default_cache

    art, _, _ = default_cache().get(spec, "sm_90")
    return art


@pytest.mark.slow
@pytest.mark.parametrize("qt", ALL_QTYPES)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_every_type_compiles_for_sm90a(qt, act):
    g = GROUP_OF.get(qt, 128)
    spec = _spec(qt, act, g, 8, 16, 4)
    art = _compile(spec)
    assert art.arch == "sm_90a"
    assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{'bf16' if act == 'bfloat16' else 'f16'}" in art.ptx
    assert "mma.sync" not in art.ptx and "ldmatrix" not in art.ptx
    assert "fence.proxy.async" in art.ptx
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["registers"] <= 255


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn", TILES)
@pytest.mark.parametrize("group", [-1, 32])
def test_every_tile_compiles_without_spills(tm, tn, group):
    art = _compile(_spec("uint4b8", "float16", group, tm, tn, 3))
    assert f"m64n{16 * tm}k16" in art.ptx
    assert art.resources["spill_stores"] == 0 and art.resources["stack_bytes"] == 0


def test_short_row_block_specs():
    """KernelSpec.tail: the planner builds the wgmma kernel with its own x boxes for a last row
    block short of the tile (planner.tail_spec) and only then; the flag names the kernel and
    enters its canonical text only when set; the mma.sync kernels refuse it; the source takes the
    second map and the row count only with it."""
    h = get_profile("h100")
    for m, tile_m in [(136, 128), (200, 128), (256, 128), (300, 256), (1024, 256), (40, 64), (64, 64), (17, 32)]:
        spec = choose_fused_spec(h, Problem(m, 8192, 4096, "float16", "uint4b8", 128))
        assert spec.wgmma and spec.tile_m == tile_m and spec.tail == (m % tile_m != 0), (m, spec.name)
        assert spec.name.endswith("t") == spec.tail and ('"tail"' in spec.canonical()) == spec.tail
    cands = [s for s in candidate_specs(h, Problem(300, 8192, 8192, "float16", "uint4b8", 128)) if s.wgmma]
    assert cands and all(s.tail == (300 % s.tile_m != 0) for s in cands)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mma_plan, "TAIL_BOXES", False)
        assert not choose_fused_spec(h, Problem(300, 8192, 8192, "float16", "uint4b8", 128)).tail
    with pytest.raises(ValueError, match="tail"):
        KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 4, 4, tail=True).check()
    src, plain = render(replace(_spec(tm=16, tn=8), tail=True)), render(_spec(tm=16, tn=8))
    assert "TmaMap xtail" in src and "int x_tail" in src and "xtail" not in plain


@pytest.mark.slow
def test_short_row_block_kernels_compile_clean():
    """The tail kernels (KernelSpec.tail) of the planner's tiles compile for sm_90a without spills,
    within the registers of their occupancy."""
    for tm, tn, stages, occ, cl in [
        (16, 8, 4, 1, 1),
        (16, 8, 4, 1, 2),
        (8, 8, 6, 1, 1),
        (4, 8, 8, 1, 1),
        (4, 8, 4, 2, 1),
        (2, 8, 4, 2, 1),
    ]:
        spec = KernelSpec("sm90", "uint4b8", "float16", 8, tm, tn, 4, stages, occupancy=occ, cluster=cl, tail=True)
        art = _compile(spec)
        r = art.resources
        assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, spec.name
        assert r["registers"] <= (128 if occ == 2 else 255), spec.name
        assert art.ptx.count("cp.async.bulk.tensor.2d") >= 2, spec.name


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn,stages", [(16, 8, 4), (8, 8, 6), (8, 16, 4)])
def test_cluster_kernels_trade_sums_in_shared_memory(tm, tn, stages):
    """The wgmma kernel in clusters of two: the halves of a split tile go straight into the other
    block's shared memory (mapa, st.shared::cluster) behind cluster barriers, with no workspace
    protocol left (no GPU-scope fence, no counter); no spills, and it fits the H100."""
    plain = _compile(_spec(tm=tm, tn=tn, stages=stages))
    spec = replace(_spec(tm=tm, tn=tn, stages=stages), cluster=2)
    art = _compile(spec)
    for text in (
        "barrier.cluster.arrive.relaxed",
        "barrier.cluster.arrive.release",
        "barrier.cluster.wait.acquire",
        "mapa.shared::cluster",
        "st.shared::cluster.v4.f32",
    ):
        assert text in art.ptx and text not in plain.ptx, text
    assert "fence.acq_rel.gpu" in plain.ptx and "fence.acq_rel.gpu" not in art.ptx
    assert ".explicitcluster" in art.ptx or ".reqnctapercluster 2" in art.ptx
    r = art.resources
    assert r["spill_stores"] == 0 and r["stack_bytes"] == 0 and r["registers"] <= 255
    assert spec.smem_bytes() <= get_profile("h100").smem_per_block


@pytest.mark.slow
def test_overlapping_kernels_issue_before_they_wait():
    """With the dequant / wgmma overlap a warpgroup issues step t's wgmmas before it waits for
    step t - 1's (wait_group 1), so a group is always queued on the tensor pipe (PERF.md entry
    32); the kernels without the overlap (two slabs a warpgroup) wait for everything."""
    for tm, tn, stages, occ in ((16, 8, 4, 1), (4, 8, 5, 1), (4, 16, 6, 1)):
        ptx = _compile(_spec(tm=tm, tn=tn, stages=stages, occupancy=occ)).ptx
        assert "wgmma.wait_group.sync.aligned 1;" in ptx
    ptx = _compile(_spec(tm=4, tn=16, stages=4, occupancy=2)).ptx
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx and "wgmma.wait_group.sync.aligned 0;" in ptx


@pytest.mark.slow
def test_two_slab_kernels_split_each_step_into_two_wgmma_groups():
    """One block of 64 x 256 tiles (two slabs a warpgroup: no room for a second full fragment
    set) issues a step's wgmmas as two commit groups of two k16 steps each, on two half-size
    sets, waiting with one group in flight (SPLIT_MMA); the two-block kernel of that tile keeps
    one group a step."""
    for occ, groups in ((1, 2), (2, 1)):
        stages = 6 if occ == 1 else 4
        ptx = _compile(_spec(tm=4, tn=16, stages=stages, occupancy=occ)).ptx
        # 2 slabs x 4 k16 steps a step; a trip of the main loop runs a round of the stages
        # straight-line (a constant stage a step), the last steps take a tail loop
        steps = stages + 1
        assert ptx.count("wgmma.mma_async") == 8 * steps
        assert ptx.count("wgmma.commit_group.sync.aligned") == groups * steps
        assert ptx.count("wgmma.wait_group.sync.aligned 1;") == (2 * steps if occ == 1 else 0)


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn", [(16, 8), (4, 16)])
def test_epilogue_stages_token_rows_with_stmatrix(tm, tn):
    """The epilogue turns each lane's token pairs into token rows with stmatrix .trans: one
    x4 store per 32 sums a thread, no 2-byte shared stores."""
    ptx = _compile(_spec(tm=tm, tn=tn, stages=4, occupancy=2 if tm * tn <= 64 else 1)).ptx
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == tm * tn // 8
    assert "st.shared.u16" not in ptx and "st.shared.b16" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn", TILES)
def test_wgmmas_stay_asynchronous(tm, tn):
    """ptxas serialises every wgmma (a C7511/C7513/C7515 note) when registers run short or the
    code between a wgmma and its wait touches its registers; the template overlaps dequant and
    MMA only where it does not (OVERLAP_MMA)."""
    for stages in (2, 3, 4, 5, 6):
        for occ in (1, 2) if tm * tn <= 64 else (1,):
            art = _compile(_spec("uint4b8", "float16", 128, tm, tn, stages, occupancy=occ))
            notes = [line for line in art.log.splitlines() if "serialized" in line]
            assert not notes, (art.name, notes)
            assert art.resources["spill_stores"] == 0, art.name


def _inflight_overwrites(sass: str) -> list[str]:
    """SASS instructions (cuobjdump or nvdisasm text) that write a register an HGMMA may still
    be reading: the A-fragment registers of HGMMAs issued since the last WARPGROUP.DEPBAR, on
    the straight-line order of every loop that issues HGMMAs, taken round the loop twice (a
    WARPGROUP.ARRIVE opens a commit group; WARPGROUP.DEPBAR.LE gsb0, N retires all but the newest
    N). A wgmma reads its A registers until its wait; the register allocator does not know that."""
    import re

    ins, label_at = [], {}
    pending = []
    for line in sass.splitlines():
        lab = re.match(r"\s*(\.L_x_\d+):", line)
        if lab:
            pending.append(lab.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);", line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                label_at[name] = addr
            pending = []
            ins.append((addr, m.group(3), m.group(4), line.strip()[:100]))
    index = {a: i for i, (a, _, _, _) in enumerate(ins)}

    def target(ops):
        t = re.search(r"\((\.L_x_\d+)\)", ops)
        if t:
            return label_at.get(t.group(1))
        t = re.search(r"0x([0-9a-f]+)", ops)
        return int(t.group(1), 16) if t else None

    def a_regs(ops):
        a = ops.split(",")[1].strip()
        return set(range(int(a[1:]), int(a[1:]) + 4)) if re.fullmatch(r"R\d+", a) else set()

    def written(opc, ops):
        if opc.startswith(
            (
                "HGMMA",
                "WARPGROUP",
                "BAR",
                "BRA",
                "ST",
                "RED",
                "ATOM",
                "LDGSTS",
                "EXIT",
                "DEPBAR",
                "LDGDEPBAR",
                "ISETP",
                "FSETP",
                "HSETP",
                "PLOP3",
                "NOP",
                "BSSY",
                "BSYNC",
                "MEMBAR",
                "FENCE",
                "CCTL",
                "WARPSYNC",
                "NANOSLEEP",
                "YIELD",
            )
        ) or opc.startswith("U"):
            return set()
        m = re.match(r"R(\d+)$", ops.split(",")[0].strip())
        if not m:
            return set()
        n = 4 if ".128" in opc else 2 if (".64" in opc or "WIDE" in opc) else 1
        return set(range(int(m.group(1)), int(m.group(1)) + n))

    found = []
    for i, (addr, opc, ops, _) in enumerate(ins):
        t = target(ops) if opc == "BRA" else None
        if t is None or t >= addr or t not in index:
            continue
        body = ins[index[t] : i + 1]
        if not any(o.startswith("HGMMA") for _, o, _, _ in body):
            continue
        groups = []  # A registers per commit group in flight, oldest first
        for lap in range(2):
            for _, o, ops2, text in body:
                if o.startswith("WARPGROUP.DEPBAR"):  # .LE gsb0, N: the newest N stay in flight
                    keep = int(re.search(r"0x([0-9a-f]+)\s*$", ops2.strip()).group(1), 16)
                    groups = groups[len(groups) - keep :] if keep else []
                elif o.startswith("WARPGROUP.ARRIVE"):  # wgmma.fence: a new group's wgmmas follow
                    groups.append(set())
                elif o.startswith("HGMMA"):
                    if not groups:
                        groups.append(set())
                    groups[-1] |= a_regs(ops2)
                elif lap and written(o, ops2) & set().union(*groups):
                    found.append(text)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn", TILES)
def test_no_register_of_an_inflight_wgmma_is_overwritten(tm, tn):
    """The dequant of step t may overlap the wgmmas of step t - 1 only if it never writes their
    A registers (a race no CPU test and few GPU runs would catch): checked in the SASS."""
    from jitmarlin.jit import nvrtc

    # the test extra installs nvdisasm: a missing one is a broken set-up, not a reason to skip
    assert nvrtc.find_disassembler() is not None, "no SASS disassembler: pip install -e '.[test]'"
    for stages in (2, 3, 4, 5):
        for occ in (1, 2) if tm * tn <= 64 else (1,):
            art = _compile(_spec("uint4b8", "float16", 128, tm, tn, stages, occupancy=occ))
            sass = nvrtc.disassemble(art.cubin)
            assert "HGMMA" in sass
            bad = _inflight_overwrites(sass)
            assert not bad, (art.name, bad[:3])


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn", SMALL_TILES)
def test_small_token_tiles_compile_clean(tm, tn):
    """16- and 32-token tiles at the planner's depths (4 stages two blocks an SM, 8 one block):
    m64n16 / m64n32 wgmmas, no spills (128 registers with two blocks), none serialised, and
    where a warpgroup overlaps dequant and wgmmas (one slab) no in-flight A register is
    overwritten in the SASS."""
    from jitmarlin.jit import nvrtc

    for stages, occ in ((4, 2), (8, 1)):
        if (tm, tn, stages, occ) == (1, 16, 4, 2):
            continue  # spills at 128 registers; 16-token tiles are no planner or tuner choice
        art = _compile(_spec("uint4b8", "bfloat16", 128, tm, tn, stages, occupancy=occ))
        assert f"wgmma.mma_async.sync.aligned.m64n{16 * tm}k16.f32.bf16" in art.ptx
        r = art.resources
        assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (art.name, r)
        assert occ == 1 or r["registers"] <= 128, (art.name, r)
        assert not [line for line in art.log.splitlines() if "serialized" in line], art.name
        if tn == 8:
            assert nvrtc.find_disassembler() is not None, "no SASS disassembler: pip install -e '.[test]'"
            assert "wgmma.wait_group.sync.aligned 1;" in art.ptx  # the overlap is on
            assert not _inflight_overwrites(nvrtc.disassemble(art.cubin)), art.name


def test_the_sass_check_finds_an_overwrite():
    sass = """
        /*0100*/                   HGMMA.64x64x16.F32 R24, R56, gdesc[UR20], R24, gsb0 ;
        /*0110*/                   LOP3.LUT R57, R1, 0xf, RZ, 0xc0, !PT ;
        /*0120*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0130*/                   LOP3.LUT R58, R1, 0xf, RZ, 0xc0, !PT ;
        /*0140*/              @P0 BRA 0x100 ;
    """
    assert [b.split()[1] for b in _inflight_overwrites(sass)] == ["LOP3.LUT"]
    assert "R57" in _inflight_overwrites(sass)[0]
    # with one group left in flight (wait_group 1) only the newest group's registers are busy:
    # R57 at 0x130 (its group is the newest) and R62, not R57 at 0x170 (its group retired)
    two = """
        /*0100*/                   WARPGROUP.ARRIVE ;
        /*0110*/                   HGMMA.64x64x16.F32 R24, R56, gdesc[UR20], R24, gsb0 ;
        /*0120*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0130*/                   LOP3.LUT R57, R1, 0xf, RZ, 0xc0, !PT ;
        /*0140*/                   WARPGROUP.ARRIVE ;
        /*0150*/                   HGMMA.64x64x16.F32 R24, R60, gdesc[UR20], R24, gsb0 ;
        /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0170*/                   LOP3.LUT R57, R1, 0xf, RZ, 0xc0, !PT ;
        /*0180*/                   LOP3.LUT R62, R1, 0xf, RZ, 0xc0, !PT ;
        /*0190*/              @P0 BRA 0x100 ;
    """
    assert [b.split()[2].rstrip(",") for b in _inflight_overwrites(two)] == ["R57", "R62"]


@pytest.mark.slow
@pytest.mark.parametrize("tm,tn", OCC2_TILES)
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("uint8", 32), ("nvfp4", 16)])
def test_two_blocks_per_sm_fit_128_registers_without_spills(tm, tn, qt, group):
    """With 4 stages (the planner's) the main loop runs a round of the stages a trip, with 5 one
    step a trip; neither spills."""
    for stages in (4, 5):
        art = _compile(_spec(qt, "bfloat16", group, tm, tn, stages, occupancy=2))
        assert ".maxnreg" in art.ptx or ".minnctapersm 2" in art.ptx
        r = art.resources
        assert r["registers"] <= 128 and r["spill_stores"] == 0 and r["stack_bytes"] == 0, (art.name, r)


# ---- GPU: correctness on sm_90 -----------------------------------------------------------------


def _hopper() -> bool:
    if os.environ.get("JITMARLIN_EMULATE"):
        return False
    import cupy

    return cupy.cuda.Device(0).compute_capability == "90"


@pytest.mark.gpu
@pytest.mark.parametrize("tm,tn", TILES)
@pytest.mark.parametrize("stages", [2, 4, 6])
def test_every_tile_matches_reference(tm, tn, stages, seed, rng):
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    # N = 320: not a multiple of the 128/256 feature tile; K = 576: 9 K tiles, uneven split-K
    w = rng.standard_normal((320, 576)) * 0.05
    for group in (-1, 64):
        for act in ("float16", "bfloat16"):
            qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
            spec = KernelSpec(
                "sm90", "uint4b8", act, group_blocks(Problem(1, 320, 576, act, "uint4b8", group)), tm, tn, 4, stages
            )
            for m in (64, 77, 300):
                check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("tm,tn", SMALL_TILES)
@pytest.mark.parametrize("occ", [1, 2])
def test_small_token_tiles_match_reference(tm, tn, occ, seed, rng):
    """16- and 32-token tiles (wgmma m64n16 / m64n32; x always by TMA): one M chunk at decode
    sizes, a short last chunk, several chunks; split tiles (K = 2048 over the grid)."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    w = rng.standard_normal((1024 + 64, 2048)) * 0.03
    for act, group in (("float16", 128), ("bfloat16", 64)):
        qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
        for stages in (4, 8):
            spec = KernelSpec(
                "sm90",
                "uint4b8",
                act,
                group_blocks(Problem(16, qw.n, qw.k, act, "uint4b8", group)),
                tm,
                tn,
                4,
                stages,
                occupancy=occ,
            )
            for m in (1, 9, 16 * tm, 16 * tm + 7, 70):
                check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("qt", ALL_QTYPES)
def test_every_type_matches_reference(qt, seed, rng):
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    g = GROUP_OF.get(qt, 32)
    w = rng.standard_normal((448, 1024)) * 0.05
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
        for m, (tm, tn, st, occ) in (
            (96, (8, 8, 3, 1)),
            (1000, (8, 16, 3, 1)),
            (130, (16, 8, 3, 1)),
            (24, (2, 8, 4, 2)),
            (31, (2, 16, 4, 2)),
            (17, (2, 8, 8, 1)),
        ):
            spec = KernelSpec(
                "sm90", qt, act, group_blocks(Problem(m, qw.n, qw.k, act, qt, g)), tm, tn, 4, st, occupancy=occ
            )
            check_forced(qw, m, act, spec, rng, lda=1024 + 64, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("tm,tn", [(8, 8), (16, 8)])
def test_x_tile_edges_match_reference(tm, tn, seed, rng):
    """x by TMA: in_features 1000 (the last K tile is part padding, read as zeros past column
    1000), a row stride of 1024 + 8 elements, and M short of a whole row block."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    w = rng.standard_normal((192, 1000)) * 0.05
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, "uint4b8", -1, scale_dtype=act)
        assert qw.k == 1024 and qw.in_features == 1000
        spec = KernelSpec(
            "sm90", "uint4b8", act, group_blocks(Problem(1, qw.n, qw.k, act, "uint4b8", -1)), tm, tn, 4, 4
        )
        for m in (70, 16 * tm + 5):
            check_forced(qw, m, act, spec, rng, lda=1032, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("tm,tn", OCC2_TILES)
def test_two_blocks_per_sm_match_reference(tm, tn, seed, rng):
    """Two blocks per SM: twice the blocks, each with a short K range, split tiles everywhere."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    w = rng.standard_normal((2048 + 64, 8192)) * 0.02
    for act, group in (("float16", 128), ("bfloat16", -1)):
        qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
        spec = KernelSpec(
            "sm90",
            "uint4b8",
            act,
            group_blocks(Problem(64, qw.n, 8192, act, "uint4b8", group)),
            tm,
            tn,
            4,
            5,
            occupancy=2,
        )
        for m in (64, 41, 150):
            check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
def test_two_block_plans_on_a_workspace_from_dirty_memory(seed, rng):
    """A workspace carved from pool memory that held large values: a two-blocks-an-SM plan (a
    grid of 2 x SMs, finishers past block SMs - 1) must still find every counter zero, so that no
    finisher adds partial sums before its contributors stored them; the counters are zero again
    after the launch (run_forced checks). Before session 19 the workspace had one counter an SM."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import cupy as cp
    import torch

    import jitmarlin
    from jitmarlin.jit import launch
    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.kernels import launch as family_launch

    sms = live_profile(0).sms
    counters, floats, words = family_launch.workspace_capacity(sms)
    with cp.cuda.Device(0), launch.private_stream(0):  # the stream workspaces are allocated on
        junk = [
            cp.full(counters, 1 << 30, dtype=cp.int32),
            cp.full(floats, np.nan, dtype=cp.float32),
            cp.full(words, 1 << 62, dtype=cp.uint64),
        ]
    launch.private_stream(0).synchronize()
    del junk  # back to the pool, values left in place
    w = rng.standard_normal((2048 + 64, 8192)) * 0.02
    qw = jitmarlin.quantize(w, "uint4b8", 128)
    spec = KernelSpec("sm90", "uint4b8", "float16", 8, 4, 16, 4, 4, occupancy=2)
    with torch.cuda.stream(torch.cuda.Stream()):  # a new stream: a new workspace
        for m in (64, 150):
            check_forced(qw, m, "float16", spec, rng, seed=seed)


@pytest.mark.gpu
def test_whole_tile_plans_match_reference(seed, rng, monkeypatch):
    """128 output tiles (one a block on a 132-SM GPU) and 256 (two a block, the second row block
    part padding): plans without split tiles (hybrid plans off)."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin
    from jitmarlin.jit.profiles import live_profile

    monkeypatch.setattr(mma_plan, "HYBRID_PLANS", False)

    w = rng.standard_normal((16384, 512)) * 0.05
    for act, group in (("float16", 128), ("bfloat16", -1)):
        qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
        for m in (256, 300):
            p = Problem(m, qw.n, qw.k, act, "uint4b8", group)
            spec = KernelSpec("sm90", "uint4b8", act, group_blocks(p), 16, 8, 4, 4)
            if live_profile(0).sms == 132:
                pl = plan(live_profile(0), p, spec)
                assert (pl.grid, pl.iters) == (128, (m + 255) // 256 * 8), (pl.grid, pl.iters)
            check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
def test_whole_tile_plans_with_a_short_last_block(seed, rng, monkeypatch):
    """Whole-tile plans over six and nine row blocks (the last short of 256 tokens) whose last
    block has fewer tiles than the others: every output element written, with the right sums
    (the poisoned output shows a missed tile). Hybrid plans off: these stay whole-tile plans."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    monkeypatch.setattr(mma_plan, "HYBRID_PLANS", False)
    for m, n, geom in ((1499, 10624, (125, 4 * 8)), (2267, 3712, (131, 2 * 8))):
        _check_256_token_plans(rng, m, n, geom, lambda pl: (pl.grid, pl.iters), seed=seed)


def _check_256_token_plans(rng, m, n, geom, geom_of, tm=16, stages=4, cluster=1, seed=None):
    """The 256 x 128 x 4-stage wgmma kernel (or tm x 8 with `stages`, in clusters of `cluster`)
    on M x N x 512, fp16 with groups of 128 and bf16 with per-channel scales, against the
    reference; on a 132-SM GPU its plan's geom_of(plan) is geom."""
    import jitmarlin
    from jitmarlin.jit.profiles import live_profile

    w = rng.standard_normal((n, 512)) * 0.05
    for act, group in (("float16", 128), ("bfloat16", -1)):
        qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
        p = Problem(m, n, 512, act, "uint4b8", group)
        spec = KernelSpec("sm90", "uint4b8", act, group_blocks(p), tm, 8, 4, stages, cluster=cluster)
        if live_profile(0).sms == 132:
            assert geom_of(plan(live_profile(0), p, spec)) == geom
        check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m,n,geom",
    [
        (520, 5888, (132, 1, 1)),  # 138 tiles: 6 striped, 8 blocks a tile
        (520, 8960, (132, 5, 1)),  # 210 tiles: 1 whole a block + 78
        (1499, 6912, (132, 4, 2)),
    ],
)  # 324 tiles: 2 whole a block + 60
def test_hybrid_plans_match_reference(m, n, geom, seed, rng):
    """Hybrid plans (planner._hybrid): whole tiles for the full waves, the last wave's tiles
    striped over every block, their partial sums added at the end; row blocks short of 256 tokens,
    both dtypes, grouped and per-channel scales. The poisoned output shows a missed tile, the
    workspace check a counter left set."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    _check_256_token_plans(rng, m, n, geom, lambda pl: (pl.grid, pl.iters, pl.whole), seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize(
    "m,n,tm,geom",
    [
        (300, 4096, 16, (128, 4, 0)),  # 64 tiles: each in two halves
        (1000, 6144, 16, (128, 4, 1)),  # 192 tiles: 1 whole a block + 64 halved
        (200, 4096, 8, (128, 4, 0)),
    ],
)  # 128 x 128 tiles
def test_half_tile_plans_match_reference(m, n, tm, geom, cluster, seed, rng):
    """Half-tile plans (planner._half_tiles): blocks 2j and 2j + 1 take the two halves of tile j's
    K-steps (after their whole tiles, if any) and add them at the end, through the workspace
    (cluster 1) or each other's shared memory (cluster 2, each writing out one warpgroup's
    features); row blocks short of the tile, both dtypes, grouped and per-channel scales, against
    the reference (the poisoned output shows a half left unwritten)."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    _check_256_token_plans(
        rng,
        m,
        n,
        geom,
        lambda pl: (pl.grid, pl.iters, pl.whole),
        tm=tm,
        stages=4 if tm == 16 else 6,
        cluster=cluster,
        seed=seed,
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m,n,k,name_end",
    [
        (256, 8192, 6144, "m16n8k4s4c2"),  # 64 tiles in halves
        (200, 8192, 6144, "m16n8k4s4c2"),  # one short row block
        (256, 16384, 3072, "m16n8k4s4"),
    ],
)  # 128 whole tiles
def test_tall_unsplit_plans_match_reference(m, n, k, name_end, seed, rng):
    """Up to 256 rows, the planner's 256 x 128 tiles below the tall-tile bar (planner._tall_unsplit):
    halves in clusters of two and whole tiles a block, both dtypes, against the reference (the
    poisoned output shows a tile or a half left unwritten)."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin
    from jitmarlin.jit.profiles import live_profile

    w = rng.standard_normal((n, k)) * 0.02
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype=act)
        spec = choose_fused_spec(live_profile(0), Problem(m, n, k, act, "uint4b8", 128))
        if live_profile(0).sms == 132:  # (200 rows: a short row block, KernelSpec.tail)
            assert spec.name.endswith(name_end + ("t" if m % 256 else "")), spec.name
        check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("qt", ["uint4b8", "uint4"])
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_wide3_kernels_compile_clean(qt, act):
    """The 128 x 192 kernels the planner may take (planner._wide3: three warpgroups, 384 threads,
    6 stages, 5 with a short row block, groups of 128; alone and in clusters of two) compile for sm_90a
    without spills within the 168 registers a thread of 384 threads; the clusters trade half the
    tile's tokens each way."""
    for cl, tail, stages in [(1, False, 6), (2, False, 6), (2, True, 5), (1, True, 6), (1, True, 5)]:
        spec = KernelSpec("sm90", qt, act, 8, 8, 12, 4, stages, threads=384, cluster=cl, tail=tail)
        art = _compile(spec)
        r = art.resources
        assert r["spill_stores"] == 0 and r["stack_bytes"] == 0 and r["registers"] <= 168, (spec.name, r)
        assert ".maxntid 384" in art.ptx and "m64n128k16" in art.ptx
        assert ("st.shared::cluster.v4.f32" in art.ptx) == (cl == 2)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m,n,k,name_end",
    [
        (256, 6144, 4096, "m8n12k4s6c2"),  # 8B qkv: 64 tiles in halves
        (200, 6144, 4096, "m8n12k4s5c2t"),  # a short row block
        (512, 6144, 4096, "m8n12k4s6"),  # 128 whole tiles
        (300, 3072, 2048, "m8n12k4s4t"),  # Stream-K (a tuner candidate)
        (64, 6144, 4096, "m4n12k4s4"),  # 64-token tiles (candidates)
        (40, 3072, 2048, "m4n12k4s4t"),
    ],
)
def test_wide3_plans_match_reference(m, n, k, name_end, seed, rng):
    """128 x 192 tiles (three warpgroups; planner._wide3 and the tuner's candidates) and the
    tuner's 64 x 192 ones: halves in clusters of two trading token halves, whole tiles, and
    Stream-K plans through the workspace, both dtypes, a zero-point type, against the reference
    (the poisoned output shows a tile, a half or a row left unwritten)."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin
    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.kernels import planner

    w = rng.standard_normal((n, k)) * 0.02
    for act, qt in (("float16", "uint4b8"), ("bfloat16", "uint4b8"), ("float16", "uint4")):
        qw = jitmarlin.quantize(w, qt, 128, scale_dtype=act)
        p = Problem(m, n, k, act, qt, 128)
        if name_end.endswith(("s6c2", "s5c2t", "s6")) and live_profile(0).sms == 132:
            spec = choose_fused_spec(live_profile(0), p)
        else:
            tm = 8 if m > 64 else 4
            spec = planner.tail_spec(p, KernelSpec("sm90", qt, act, 8, tm, 12, 4, 4, threads=384))
        assert spec.name.endswith(name_end), spec.name
        check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "m,n,tm,stages,occ,cluster",
    [
        (136, 4096, 8, 6, 1, 1),  # 128-token tiles, 8 rows left
        (200, 8192, 16, 4, 1, 2),  # halves in clusters, 200 rows
        (300, 4096, 16, 4, 1, 1),  # a full row block, then 44 rows
        (1000, 6144, 16, 4, 1, 1),  # a hybrid plan, 232 rows left
        (40, 4096, 4, 8, 1, 1),  # one 64-token block of 40 rows
        (17, 4096, 2, 4, 2, 1),
    ],
)  # 32-token tiles, two blocks an SM
def test_short_row_block_boxes_match_reference(m, n, tm, stages, occ, cluster, seed, rng):
    """Kernels built for a short last row block (KernelSpec.tail): that block's x boxes hold just
    its rows (a second tensor map, fewer bytes on the stage's mbarrier) and the rest of every stage
    is zeroed; tiles of 32 to 256 tokens, one and two row blocks, whole, Stream-K, hybrid and
    half-tile plans, both dtypes, grouped and per-channel scales, against the reference (the
    poisoned output shows a row left unwritten)."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    w = rng.standard_normal((n, 512)) * 0.05
    for act, group in (("float16", 128), ("bfloat16", -1)):
        qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=act)
        p = Problem(m, n, 512, act, "uint4b8", group)
        spec = KernelSpec(
            "sm90", "uint4b8", act, group_blocks(p), tm, 8, 4, stages, occupancy=occ, cluster=cluster, tail=True
        )
        check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,name_end", [(4096, 4096, "m4n8k4s8"), (8192, 8192, "m4n8k4s4o2")])
def test_planners_m64_plans_match_reference(n, k, name_end, seed, rng):
    """The planner's M = 64 kernels on the bench's 8B o shape (one block of 8 stages) and 70B o
    shape (two blocks an SM), both dtypes, against the float64 reference."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin
    from jitmarlin.jit.profiles import live_profile

    w = rng.standard_normal((n, k)) * 0.02
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype=act)
        spec = plan(live_profile(0), Problem(64, n, k, act, "uint4b8", 128)).spec
        if live_profile(0).sms == 132:
            assert spec.name.endswith(name_end), spec.name
        check_forced(qw, 64, act, spec, rng, seed=seed)


@pytest.mark.gpu
def test_large_problem_split_over_all_sms(seed, rng):
    """A 70B-like K with many tiles per block and split tiles at block edges."""
    if not _hopper():
        pytest.skip("needs an sm_90 GPU without JITMARLIN_EMULATE")
    import jitmarlin

    w = rng.standard_normal((2048, 8192)) * 0.02
    qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype="float16")
    for m in (64, 2048):
        spec = choose_fused_spec(get_profile("h100"), Problem(m, 2048, 8192, "float16", "uint4b8", 128))
        assert spec.wgmma  # (at M = 2048 the planner's route is dequant + cuBLAS)
        check_forced(qw, m, "float16", spec, rng, seed=seed)
