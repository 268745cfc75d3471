import itertools
from dataclasses import replace

import numpy as np
import pytest

from jitmarlin import InputError, UnsupportedError
from jitmarlin.jit.profiles import PROFILES, get_profile
from jitmarlin.kernels.mma import plan as mma_plan
from jitmarlin.kernels.planner import (
    GEMV_MIN_FILL,
    GEMV_PLAN_MAX_M,
    GEMV_SCALED_MIN_FILL,
    WGMMA_MIN_M,
    _gemv_fill,
    candidate_specs,
    choose_fused_spec,
    dequant_min_m,
    dequant_route,
    plan,
    spread_clusters,
)
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import DequantSpec, GemvSpec, KernelSpec, spec_from_canonical
from jitmarlin.kernels.wgmma import plan as wgmma_plan


@pytest.mark.parametrize("prof", list(PROFILES.values()), ids=lambda p: p.name)
def test_every_plan_fits_the_profile(prof):
    """Planner guarantee: for every supported combination and a sweep of shapes the chosen spec
    fits the profile's shared memory, thread and register budgets (256 threads, or 384 for the
    three-warpgroup wgmma kernel, `occupancy` blocks per SM: 64K registers is 255 a thread for
    one block of 256, 168 for one of 384, 128 for two blocks of 256, which ptxas enforces
    through the launch bounds; spills are checked in test_nvrtc)."""
    ms = [1, 2, 15, 16, 17, 48, 64, 65, 256, 1000, 4096, 8192]
    nks = [64, 128, 192, 4160, 6144, 14336, 28672, 57344]
    acts = ["float16", "bfloat16"] if prof.path == "sm80" else ["float16"]
    for m, n, k, g, act in itertools.product(ms, nks, [64, 128, 4096, 14336, 57344], [-1, 32, 64, 128], acts):
        if g > 0 and k % g:
            continue
        p = plan(prof, Problem(m, n, k, act, "uint4b8", g))
        s = p.spec
        assert p.route == ("dequant" if dequant_route(prof, p.problem) else "fused")
        big = m >= dequant_min_m(prof) or (m >= 256 and 2 * m * k > prof.l2_bytes)
        if big and prof.cc == (9, 0):  # unless the wgmma plan has whole tiles a block
            fused = plan(prof, p.problem, choose_fused_spec(prof, p.problem))
            big = fused.iters % fused.k_tiles != 0 and not fused.whole
        assert dequant_route(prof, p.problem) == big
        if p.route == "dequant":  # a warp per 16 x 64 block of the weight, no shared memory
            assert s.path == prof.path
            assert p.grid * s.threads // 32 >= (k // 16) * (n // 64) > (p.grid - 1) * s.threads // 32
            assert p.smem_bytes == 0 and s.group_blocks == (-1 if g < 0 else g // 16)
            continue
        wgmma = prof.cc == (9, 0) and m >= WGMMA_MIN_M
        assert s.path == ("sm90" if wgmma else prof.path)
        assert s.smem_bytes() <= prof.smem_per_block
        if isinstance(s, GemvSpec):  # decode without split tiles: one wave, column blocks on chip
            assert m <= GEMV_PLAN_MAX_M and prof.path == "sm80"
            if s.spread == 2:  # hybrid: a block an SM, each owning one column block, the rest shared
                whole = prof.sms
                assert prof.sms < n // 64 < 2 * prof.sms and s.cluster == 1 and s.max_m == 8
            elif s.spread:
                whole = spread_clusters(prof, s.cluster, n // 64) * s.cluster
            else:
                whole = -(-(n // 64) // s.col_blocks) * s.cluster
            assert p.grid == whole <= prof.sms * s.occupancy
            if s.occupancy == 1:  # a hybrid plan's alternative may fill less where it scales the sums
                assert _gemv_fill(prof, s, n // 64) >= (
                    GEMV_SCALED_MIN_FILL if s.scale_sums and prof.sms < n // 64 else GEMV_MIN_FILL
                )
            else:  # more column blocks than SMs, two 8-warp blocks an SM
                assert prof.sms < p.grid <= 2 * prof.sms and s.warps == 8 and s.smem_per_sm() <= prof.smem_per_sm
            assert s.threads <= prof.max_threads_per_sm and s.cluster in ((1, 2) if prof.clusters else (1,))
            assert k % s.tile_k == 0
            continue
        assert s.occupancy * (s.smem_bytes() + 1024) <= prof.smem_per_sm
        assert s.occupancy * s.threads <= prof.max_threads_per_sm
        # registers a thread the launch bounds leave: 255 (256 threads), 168 (the three-warpgroup
        # wgmma kernel's 384), 128 (two blocks an SM)
        cap = 128 if s.occupancy == 2 else {256: 255, 384: 168}[s.threads]
        assert s.occupancy * s.threads * cap <= prof.regs_per_sm
        assert k % s.tile_k == 0
        assert 1 <= p.grid <= prof.sms * s.occupancy
        assert s.occupancy == 1 or (wgmma and m <= 64)
        if s.cluster > 1 and wgmma:  # a half-tile plan: blocks 2j, 2j + 1 halve the striped tiles
            assert prof.clusters and s.cluster == 2 and s.tm >= 8 and p.grid % 2 == 0
            assert 2 * p.iters == p.k_tiles and p.grid // 2 <= prof.cluster_capacity(2)
            assert (p.whole * p.grid + p.grid // 2) * p.k_tiles == p.total_iters
        elif s.cluster > 1:  # whole tiles per cluster, no idle cluster
            assert prof.clusters and m <= 16 and s.path == "sm80"
            assert p.grid % s.cluster == 0 and (s.cluster * p.iters) % p.k_tiles == 0
            assert p.grid // s.cluster <= prof.cluster_capacity(s.cluster)
            assert p.grid * p.iters >= p.total_iters > (p.grid - s.cluster) * p.iters
        elif p.whole:  # hybrid: every block takes its whole tiles, the striped rest covers the work
            assert wgmma and s.tm >= 8 and p.whole * p.grid * p.k_tiles < p.total_iters
            assert p.whole * p.grid * p.k_tiles + p.grid * p.iters >= p.total_iters
        else:
            assert p.grid * p.iters >= p.total_iters > (p.grid - 1) * p.iters  # no idle block
        if not wgmma:  # 4-bit codes; the NVVM 20 targets (sm_100+) hold 3 m16 blocks, spread evenly
            blocks = -(-m // 16)
            tm = -(-blocks // -(-blocks // 3)) if prof.cc >= (10, 0) else min(2 if prof.path == "sm70" else 4, blocks)
            assert s.tm == tm, (m, s.name)
        if prof.path != "sm80":
            assert s.stages == 2


def test_decode_tiles_follow_layer_size(monkeypatch):
    monkeypatch.setattr(mma_plan, "WHOLE_DECODE", False)  # (the Stream-K tile choice)
    h100 = get_profile("h100")
    # (M <= 8 takes the gemv kernel on these layers: tests/test_gemv.py)
    small = plan(h100, Problem(16, 6144, 4096, "float16", "uint4b8", 128))
    assert (small.spec.tm, small.spec.tn, small.spec.tk, small.spec.stages) == (1, 8, 16, 8)
    assert small.grid >= 120
    big = plan(h100, Problem(16, 57344, 8192, "float16", "uint4b8", 128))
    assert (big.spec.tn, big.spec.tk, big.spec.stages) == (16, 16, 3)
    # the same rule on a 99 KB part keeps the tile and trims the pipeline
    sm120 = plan(get_profile("rtx-pro-6000"), Problem(16, 6144, 4096, "float16", "uint4b8", 128))
    assert (sm120.spec.tn, sm120.spec.tk) == (8, 16) and sm120.spec.stages == 4


# Llama layers (K, N) of tools/bench; on H100 the planner deals whole tiles to clusters of 2 for
# the three 70B layers whose tiles spread evenly over 66 clusters (tools/PERF.md entries 25, 29)
BENCH_LAYERS = {
    "8B qkv": (4096, 6144),
    "8B o": (4096, 4096),
    "8B gate_up": (4096, 28672),
    "8B down": (14336, 4096),
    "70B qkv": (8192, 10240),
    "70B o": (8192, 8192),
    "70B gate_up": (8192, 57344),
    "70B down": (28672, 8192),
}


@pytest.mark.parametrize("m", [9, 16])  # (M <= 8: the gemv kernel on these layers)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_decode_clusters_where_tiles_deal_evenly(m, act, monkeypatch):
    from jitmarlin.kernels import planner

    h100 = get_profile("h100")
    # off by default (measured slower on H100, tools/PERF.md entry 29): Stream-K everywhere
    for k, n in BENCH_LAYERS.values():
        assert plan(h100, Problem(m, n, k, act, "uint4b8", 128)).spec.cluster == 1
    monkeypatch.setattr(mma_plan, "CLUSTER_DECODE", True)
    for name, (k, n) in BENCH_LAYERS.items():
        p = Problem(m, n, k, act, "uint4b8", 128)
        pl = plan(h100, p)
        stream_k = plan(replace(h100, clusters=()), p)
        assert stream_k.spec.cluster == 1
        if name.startswith("70B") and name != "70B qkv":
            s = pl.spec
            assert (s.cluster, s.tn, s.tk) == (2, 8, 16), name
            t = planner.cluster_tiles(h100, p, s)
            assert s.cluster * pl.iters == t * pl.k_tiles and pl.grid == -(-pl.n_tiles // t) * 2
            # the busiest block streams at most 3% more weight bytes than under Stream-K
            mine = pl.iters * s.tile_n * s.tile_k
            theirs = stream_k.iters * stream_k.spec.tile_n * stream_k.spec.tile_k
            assert mine <= planner.CLUSTER_MAX_LOAD * theirs, name
        else:
            assert pl.spec == stream_k.spec and pl.grid == stream_k.grid, name
    # no clusters past decode, on GPUs without them, or where the count was not measured
    assert plan(h100, Problem(64, 8192, 8192, act, "uint4b8", 128)).spec.cluster == 1
    for other in ("a100", "rtx-pro-6000", "rtx4090"):
        assert plan(get_profile(other), Problem(m, 8192, 8192, act, "uint4b8", 128)).spec.cluster == 1


def test_cluster_specs_are_checked():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 16, 8, cluster=2)
    assert s.name == "jm_sm80_uint4b8_f16_g128_m1n8k16s8c2"
    assert '"cluster":2' in s.canonical() and spec_from_canonical(s.canonical()) == s
    plain = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 16, 8)
    assert "cluster" not in plain.canonical()  # pre-cluster cache keys and bundles stay valid
    assert s.smem_bytes() == plain.smem_bytes() + s.slot_bytes() + 16
    for bad, msg in [
        (dict(cluster=3), "cluster"),
        (dict(path="sm90", tk=4, tm=4, cluster=4), "clusters of 2"),
        (dict(path="sm90", tk=4, tm=4, stages=4, cluster=2, occupancy=2), "clusters of 2"),
        (dict(path="sm75", stages=2, cluster=2), "mma.sync"),
        (dict(tk=64), "tk"),
    ]:
        with pytest.raises(ValueError, match=msg):
            replace(s, **bad).check()
    # a cluster kernel on a GPU without clusters: a clear error before anything compiles
    with pytest.raises(UnsupportedError, match="clusters, which need sm_90"):
        plan(get_profile("a100"), Problem(1, 1024, 4096, "float16", "uint4b8", 128), s)


def test_n_not_multiple_of_tile_prefers_dividing_tiles():
    p = plan(get_profile("h100"), Problem(16, 4160, 4096, "float16", "uint4b8", 128))
    assert 4160 % p.spec.tile_n == 0


@pytest.mark.parametrize("prof,act,msg", [("t4", "bfloat16", "sm_75"), ("v100", "bfloat16", "sm_70")])
def test_bf16_on_old_gpus_is_clear(prof, act, msg):
    with pytest.raises(UnsupportedError, match=msg):
        plan(get_profile(prof), Problem(16, 4096, 4096, act, "uint4b8", 128))


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(n=96), "multiple of 64"),
        (dict(k=96), "multiple of 64"),
        (dict(m=0), ">= 1"),
        (dict(group_size=48), "group_size"),
        (dict(qtype="nvfp4"), "groups of 16"),
        (dict(k=192, group_size=128), "multiple of group_size"),
    ],
)
def test_bad_problems(kw, msg):
    base = dict(m=4, n=256, k=256, act="float16", qtype="uint4b8", group_size=128)
    base.update(kw)
    with pytest.raises((InputError, UnsupportedError), match=msg):
        plan(get_profile("h100"), Problem(**base))


def test_spec_identity():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
    assert KernelSpec.from_canonical(s.canonical()) == s
    assert s.name == "jm_sm80_uint4b8_f16_g128_m1n8k8s4"
    assert hash(s) == hash(KernelSpec.from_canonical(s.canonical()))
    with pytest.raises(ValueError):
        KernelSpec("sm80", "uint4b8", "float16", 8, 5, 8, 8, 4).check()


def test_pre_volta_is_rejected():
    from jitmarlin.jit.profiles import code_path

    with pytest.raises(UnsupportedError, match="older than sm_70"):
        code_path((6, 1))


# ---- route choice: fused kernel below the threshold, dequant + cuBLAS at or above it ------------


@pytest.mark.parametrize(
    "prof,threshold",
    [
        ("h100", 2048),
        ("h200", 2048),
        ("a100", 1024),
        ("rtx-pro-6000", 1024),
        ("gb10", 1024),
        ("v100", 256),
        ("t4", 256),
    ],
)
def test_route_follows_the_m_threshold(prof, threshold):
    pr = get_profile(prof)
    assert dequant_min_m(pr) == threshold
    # on sm_90, N = 896: 7 wgmma tiles wide, 56 / 112 tiles at 2048 / 4096 rows: less than one
    # wave of 132 SMs, and not close enough to 128 to deal whole
    n = 896 if pr.cc == (9, 0) else 4096
    for m, route in [
        (1, "fused"),
        (threshold - 1, "fused"),
        (threshold, "dequant"),
        (threshold + 1, "dequant"),
        (4096, "dequant"),
    ]:
        p = plan(pr, Problem(m, n, 4096, "float16", "uint8", 64))
        assert p.route == route, (m, p.spec.name)
    if pr.cc == (9, 0):  # 4096 x 4096 at 2048 and 4096 rows: 256 / 512 tiles, whole to 128 blocks
        for m in (threshold, 4096):
            p = plan(pr, Problem(m, 4096, 4096, "float16", "uint8", 64))
            assert p.spec.wgmma and p.grid == 128 and p.iters % p.k_tiles == 0 and not p.whole
    p = plan(pr, Problem(4096, n, 4096, "float16", "uint4", -1))
    assert p.spec == DequantSpec(pr.path, "uint4", "float16", 0)  # zero points: permuted
    assert p.spec.name == f"jm_dq_{pr.path}_uint4_f16_gk"


def test_dequant_route_keeps_the_problem_checks():
    with pytest.raises(UnsupportedError, match="sm_75"):
        plan(get_profile("t4"), Problem(4096, 4096, 4096, "bfloat16", "uint4b8", 128))
    with pytest.raises(InputError, match="multiple of 64"):
        plan(get_profile("h100"), Problem(4096, 4000, 4096, "float16", "uint4b8", 128))


def test_candidate_specs_offer_the_dequant_route_from_256_rows():
    h100 = get_profile("h100")
    for m, offered in [(1, False), (255, False), (256, True), (1024, True)]:
        cands = candidate_specs(h100, Problem(m, 4096, 4096, "bfloat16", "nvfp4", 16))
        dq = [c for c in cands if c.route == "dequant"]
        assert dq == ([DequantSpec("sm80", "nvfp4", "bfloat16", 1)] if offered else [])
        assert any(c.route == "fused" for c in cands)
        for c in cands:  # every candidate plans (what an autotuner does with it)
            assert plan(h100, Problem(m, 4096, 4096, "bfloat16", "nvfp4", 16), c).spec == c


def test_forced_spec_must_match_the_problem():
    h100 = get_profile("h100")
    p = Problem(64, 4096, 4096, "float16", "uint4b8", 128)
    forced = plan(h100, p, DequantSpec("sm80", "uint4b8", "float16", 8))  # any M
    assert forced.route == "dequant" and forced.grid == (4096 // 16) * (4096 // 64) // 8
    with pytest.raises(InputError, match="not a kernel for"):
        plan(h100, p, DequantSpec("sm80", "uint4b8", "float16", 4))
    with pytest.raises(InputError, match="not a kernel for"):
        plan(h100, p, KernelSpec("sm80", "uint8b128", "float16", 8, 1, 8, 8, 4))


def test_dequant_spec_identity_and_checks():
    d = DequantSpec("sm80", "uint4", "bfloat16", 8)
    assert spec_from_canonical(d.canonical()) == d and hash(spec_from_canonical(d.canonical())) == hash(d)
    assert '"route":"dequant"' in d.canonical()
    k = KernelSpec("sm80", "uint4", "bfloat16", 8, 1, 8, 8, 4)
    assert spec_from_canonical(k.canonical()) == k and "route" not in k.canonical()
    assert d.name == "jm_dq_sm80_uint4_bf16_g128" and d.smem_bytes() == 0
    for bad in [
        DequantSpec("sm90", "uint4", "float16", 8),
        DequantSpec("sm80", "int3", "float16", 8),
        DequantSpec("sm75", "uint4b8", "bfloat16", 8),
        DequantSpec("sm80", "uint4", "float16", -1),
        DequantSpec("sm80", "uint4b8", "float16", 0),
        DequantSpec("sm80", "uint4b8", "float16", 8, 128),
    ]:
        with pytest.raises(ValueError):
            bad.check()
    with pytest.raises(ValueError, match="not a kernel spec"):
        spec_from_canonical('{"route": "other"}')


# ---- whole-tile plans of the mma.sync kernel (KernelSpec.whole: an autotuner candidate) -------


def test_whole_tile_spec_identity_and_checks():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 4, 16, 8, whole=True)
    assert s.name == "jm_sm80_uint4b8_f16_g128_m1n4k16s8w"
    assert spec_from_canonical(s.canonical()) == s and '"whole":true' in s.canonical()
    base = s.kernel_spec()
    assert not base.whole and base == replace(s, whole=False) and "whole" not in base.canonical()
    assert base.kernel_spec() is base
    for bad in (dict(cluster=2), dict(path="sm90", tm=8, tn=8, tk=4, stages=4)):
        with pytest.raises(ValueError, match="whole-tile plans"):
            replace(s, **bad).check()


def test_whole_tile_plans_deal_tiles_whole():
    h = get_profile("h100")
    p = Problem(16, 6144, 4096, "float16", "uint4b8", 128)  # 96 tiles 64 wide, 16 K-tiles
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 4, 16, 8)
    stream, whole = plan(h, p, s), plan(h, p, replace(s, whole=True))
    assert (stream.grid, stream.iters) == (128, 12)  # tiles split over blocks
    assert (whole.grid, whole.iters) == (96, 16)  # one whole tile a block
    p = Problem(16, 57344, 8192, "float16", "uint4b8", 128)  # 896 tiles over 132 SMs: 7 a block
    pl = plan(h, p, replace(s, whole=True))
    assert (pl.grid, pl.iters) == (128, 7 * 32) and pl.iters % 32 == 0


def test_whole_tile_candidates_only_where_the_load_stays_close():
    h = get_profile("h100")
    for k, n, expect in ((4096, 6144, True), (4096, 4096, False), (14336, 4096, False)):
        p = Problem(16, n, k, "float16", "uint4b8", 128)
        cands = candidate_specs(h, p)
        whole = [c for c in cands if getattr(c, "whole", False)]
        assert bool(whole) == expect, (k, n, [c.name for c in whole])
        for c in whole:
            assert replace(c, whole=False) in cands  # beside its Stream-K plan
            assert plan(h, p, c).iters <= 1.5 * plan(h, p, replace(c, whole=False)).iters
    # the planner's own whole-tile decode plan (planner._whole_decode) is one of them
    p = Problem(16, 6144, 4096, "float16", "uint4b8", 128)
    mine = choose_fused_spec(h, p)
    assert mine.whole and mine in candidate_specs(h, p)


# ---- late publish (KernelSpec.late) ------------------------------------------------------------


def test_late_spec_identity_and_checks():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 16, 3, late=True)
    assert s.name == "jm_sm80_uint4b8_f16_g128_m1n16k16s3l"
    assert spec_from_canonical(s.canonical()) == s and '"late":true' in s.canonical()
    assert "late" not in replace(s, late=False).canonical()  # older specs keep their text
    assert s.kernel_spec() is s  # code, not a plan choice
    for bad in (dict(cluster=2), dict(tm=2), dict(whole=True), dict(path="sm90", tn=8, tk=4, stages=4)):
        with pytest.raises(ValueError, match="late publishing"):
            replace(s, **bad).check()


def _late_blocks_by_simulation(p, spec, grid, iters):
    """Blocks that share a split tile (not its finisher) and still have steps after it, found by
    walking each block's range tile by tile as the kernel does."""
    k_tiles = p.k // spec.tile_k
    total = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n) * k_tiles
    late = 0
    for b in range(grid):
        first, n_steps = b * iters, min((b + 1) * iters, total) - b * iters
        t = 0
        while t < n_steps:
            tile = (first + t) // k_tiles
            n_iter = min(k_tiles - (first + t - tile * k_tiles), n_steps - t)
            t += n_iter
            b_lo, b_hi = tile * k_tiles // iters, (tile * k_tiles + k_tiles - 1) // iters
            if b_hi > b_lo and b != b_lo and t < n_steps:
                late += 1
    return late


def test_late_publish_where_short_runs_go_on_past_a_split_tile(monkeypatch):
    from jitmarlin.kernels import planner

    monkeypatch.setattr(mma_plan, "WHOLE_DECODE", False)  # (8B qkv and gate_up take whole tiles)
    h = get_profile("h100")
    layers = {
        "8B qkv": (4096, 6144),
        "8B o": (4096, 4096),
        "8B gate_up": (4096, 28672),
        "8B down": (14336, 4096),
        "70B qkv": (8192, 10240),
        "70B o": (8192, 8192),
        "70B gate_up": (8192, 57344),
        "70B down": (28672, 8192),
    }
    late = set()
    for name, (k, n) in layers.items():
        for m, act in ((16, "float16"), (16, "bfloat16"), (9, "float16")):
            p = Problem(m, n, k, act, "uint4b8", 128)
            pl = plan(h, p)
            s = pl.spec
            if not isinstance(s, KernelSpec) or s.wgmma:
                continue
            stream = replace(s, late=False)
            n_late = _late_blocks_by_simulation(p, stream, pl.grid, pl.iters)
            assert planner.late_contributors(p, stream, pl.grid, pl.iters) == n_late
            assert s.late == (n_late > 0 and pl.iters <= planner.LATE_MAX_ITERS), (name, m, act)
            assert render_late(s) == s.late
            if s.late:
                late.add(name)
    # the short runs of the qkv layers; not 8B gate_up's 14 steps, not the plans cut at tile ends
    assert late == {"8B qkv", "70B qkv"}
    # measured on H100 only: other GPUs keep the fence at the tile switch
    for prof in ("a100", "rtx-pro-6000", "l4"):
        s = choose_fused_spec(get_profile(prof), Problem(16, 10240, 8192, "float16", "uint4b8", 128))
        assert not getattr(s, "late", False), prof


def render_late(spec):
    from jitmarlin.kernels.render import render

    return "red_publish_late(red, late)" in render(spec)


def test_k512_tiles_for_64_wide_whole_decode_plans(monkeypatch):
    """planner.WHOLE_DECODE_TK32: a whole decode plan of 64-wide tiles (Llama-3-8B qkv on H100)
    takes K-tiles of 512 in 6 stages where K is a multiple of 512; other plans keep theirs."""
    h = get_profile("h100")
    for m in (9, 12, 16):
        for act in ("float16", "bfloat16"):
            pl = plan(h, Problem(m, 6144, 4096, act, "uint4b8", 128))
            assert (pl.spec.tn, pl.spec.tk, pl.spec.stages, pl.spec.whole) == (4, 32, 6, True), pl.spec.name
            assert (pl.grid, pl.iters) == (96, 8)  # one 64 x 4096 tile a block
    # K a multiple of 256 but not of 512: K-tiles of 256
    odd = plan(h, Problem(16, 6144, 3840, "float16", "uint4b8", 128)).spec
    assert odd.whole and (odd.tn, odd.tk) == (4, 16)
    # wider whole tiles (8B gate_up) and Stream-K plans (8B o, 70B qkv) keep K-tiles of 256
    for n, k in ((28672, 4096), (4096, 4096), (10240, 8192)):
        assert plan(h, Problem(16, n, k, "float16", "uint4b8", 128)).spec.tk == 16
    monkeypatch.setattr(mma_plan, "WHOLE_DECODE_TK32", False)
    assert plan(h, Problem(16, 6144, 4096, "float16", "uint4b8", 128)).spec.tk == 16
    # the autotuner weighs K-tiles of 512 at decode on the sm80 path, not from two m16 row blocks on
    cands = [
        c
        for c in candidate_specs(h, Problem(16, 6144, 4096, "float16", "uint4b8", 128))
        if isinstance(c, KernelSpec) and c.path == "sm80"
    ]
    assert any(c.tk == 32 for c in cands) and all(c.tm == 1 for c in cands)
    assert not any(
        getattr(c, "tk", 0) == 32 for c in candidate_specs(h, Problem(33, 6144, 4096, "float16", "uint4b8", 128))
    )
    # the spec: sm80 path only (the register-staged sm70 / sm75 kernels keep tk <= 16)
    KernelSpec("sm80", "uint4b8", "float16", 8, 1, 4, 32, 5, whole=True).check()
    with pytest.raises(ValueError, match="tk must be"):
        KernelSpec("sm75", "uint4b8", "float16", 8, 1, 8, 32, 2).check()


def test_narrow_deep_tiles_where_a_tile_splits_over_eight_blocks(monkeypatch):
    """planner.NARROW_DEEP_DECODE: a Stream-K decode plan of 256-wide tiles that splits each tile over
    8 blocks or more (Llama-3-8B down, Qwen2.5-7B down on H100) takes 128 x 512 tiles in 3 stages,
    for the same steps a block and half the blocks a tile; plans of fewer sharers keep theirs."""
    h = get_profile("h100")
    for n, k in ((4096, 14336), (3584, 18944)):
        for m in (9, 16):
            for act in ("float16", "bfloat16"):
                pl = plan(h, Problem(m, n, k, act, "uint4b8", 128))
                assert (pl.spec.tn, pl.spec.tk, pl.spec.stages, pl.spec.whole) == (8, 32, 3, False), pl.spec.name
                monkeypatch.setattr(mma_plan, "NARROW_DEEP_DECODE", False)
                old = plan(h, Problem(m, n, k, act, "uint4b8", 128))
                monkeypatch.setattr(mma_plan, "NARROW_DEEP_DECODE", True)
                assert (old.spec.tn, old.spec.tk) == (16, 16)
                assert pl.iters == old.iters  # the same K-steps a block
                assert k // old.spec.tile_k >= 8 * old.iters > k // pl.spec.tile_k  # 8+ blocks a tile -> fewer
    # four to six blocks a tile (70B down, o, qkv; 13824 x 5120), K not a multiple of 512, M <= 8
    # (the gemv kernel) and other GPUs keep their plans
    for n, k in ((8192, 28672), (8192, 8192), (10240, 8192), (5120, 13824), (4096, 14080)):
        assert plan(h, Problem(16, n, k, "float16", "uint4b8", 128)).spec.tk == 16, (n, k)
    assert isinstance(plan(h, Problem(8, 4096, 14336, "float16", "uint4b8", 128)).spec, GemvSpec)
    a100 = get_profile("a100")
    assert plan(a100, Problem(16, 4096, 14336, "float16", "uint4b8", 128)).spec.tk == 16


def test_late_publish_is_a_candidate_beside_its_stream_k_plan(monkeypatch):
    from jitmarlin.kernels import planner

    h = get_profile("h100")
    p = Problem(16, 28672, 4096, "float16", "uint4b8", 128)  # 8B gate_up: the planner says no
    assert not choose_fused_spec(h, p).late
    cands = candidate_specs(h, p)
    late = [c for c in cands if getattr(c, "late", False)]
    assert late and all(replace(c, late=False) in cands for c in late)
    assert all(planner.late_contributors(p, c, *planner._geometry(h, p, c)) for c in late)
    monkeypatch.setattr(mma_plan, "LATE_PUBLISH", False)
    assert not choose_fused_spec(h, Problem(16, 10240, 8192, "float16", "uint4b8", 128)).late


def test_whole_tiles_at_decode_where_one_tile_a_block_stays_light(monkeypatch):
    from jitmarlin.kernels import planner

    h = get_profile("h100")
    for k, n, tn in (
        (4096, 28672, 16),  # 8B gate_up: 112 tiles of 256 columns, 16 steps (1.14x)
        (2048, 28672, 16),  # 8 steps
        (4096, 6144, 4),  # 8B qkv: 96 tiles of 64 columns (1.33x)
        (4096, 14336, 8),  # 112 tiles of 128 columns
        (8192, 28672, None),  # 32 steps: streaming outweighs the sums
        (4096, 32768, None),  # Stream-K already deals whole tiles
        (8192, 57344, None),  # 224 tiles: two a block
        (4096, 4096, None),  # 8B o: 64 tiles of 64 columns, 2x
        (14336, 4096, None),
    ):  # 8B down: deep tiles
        for m in (9, 16):
            p = Problem(m, n, k, "bfloat16", "uint4b8", 128)
            pl = plan(h, p)
            assert pl.spec.whole == (tn is not None), (k, n, m, pl.spec.name)
            if tn is None:
                continue
            with monkeypatch.context() as mp:
                mp.setattr(mma_plan, "WHOLE_DECODE", False)
                stream = plan(h, p)
            k_tiles = k // pl.spec.tile_k
            assert pl.spec.tn == tn and (pl.grid, pl.iters) == (n // pl.spec.tile_n, k_tiles)  # one tile a block
            assert k_tiles <= planner.WHOLE_DECODE_MAX_STEPS and stream.iters % k_tiles
            busiest = lambda q: q.iters * q.spec.tile_n * q.spec.tile_k  # weights, in elements
            assert busiest(pl) <= planner.WHOLE_DECODE_MAX_LOAD * busiest(stream)
    p = Problem(16, 28672, 4096, "float16", "uint4b8", 128)
    for prof in ("a100", "rtx-pro-6000"):  # measured on H100 only
        assert not getattr(choose_fused_spec(get_profile(prof), p), "whole", False), prof
    monkeypatch.setattr(mma_plan, "WHOLE_DECODE", False)
    assert not choose_fused_spec(h, p).whole


def test_whole_tile_plans_run_the_stream_k_kernel():
    from jitmarlin.kernels.render import render

    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 4, 16, 8)
    assert render(replace(s, whole=True)) == render(s)


def test_hybrid_plans_deal_every_k_step_once():
    """Hybrid plans (wgmma kernel, one block an SM, from HYBRID_MIN_M rows, more than one wave of
    tiles but not a whole number of waves, no whole-tile plan): block b takes `whole` tiles whole,
    then its share of the last wave's tiles' K-steps. Simulates the kernel's dealing
    (Plan.block_ranges, wgmma.cu.j2): every K-step once, whole runs cover whole tiles in step,
    the busiest block gets the even share, and the finisher the kernel derives for a striped tile
    (its first step's block) waits for the right number of contributors."""
    from jitmarlin.kernels import planner

    h = get_profile("h100")
    rng = np.random.default_rng(11)
    seen = 0
    for _ in range(600):
        p = Problem(
            int(rng.integers(65, 9000)),
            64 * int(rng.integers(1, 900)),
            64 * int(rng.integers(1, 200)),
            "float16",
            "uint4b8",
            -1,
        )
        pl = plan(h, p, choose_fused_spec(h, p))
        tiles = pl.m_chunks * pl.n_tiles
        if p.m < planner.HYBRID_MIN_M or pl.spec.occupancy > 1 or tiles <= h.sms or tiles % h.sms == 0:
            assert not pl.whole, (p, pl.grid, pl.iters, pl.whole)
        if not pl.whole:
            continue
        seen += 1
        assert planner.tiles_in_step(pl.whole, pl.n_tiles)
        assert pl.iters * h.sms < pl.k_tiles * tiles  # only the last wave is striped
        kt, sk0 = pl.k_tiles, pl.whole * pl.grid * pl.k_tiles
        if pl.grid < h.sms:  # a half-tile plan (test_half_tile_plans)
            assert 2 * pl.iters == kt and 2 * tiles == pl.grid * (2 * pl.whole + 1)
        else:
            assert pl.whole == tiles // h.sms
        owner = np.full(pl.total_iters, -1)
        for b in range(pl.grid):
            runs = pl.block_ranges(b)
            assert runs[0] == (b * pl.whole * kt, (b + 1) * pl.whole * kt)  # whole tiles first
            for s, e in runs:
                assert (owner[s:e] == -1).all()
                owner[s:e] = b
        assert (owner >= 0).all()
        busiest = max(sum(e - s for s, e in pl.block_ranges(b)) for b in range(pl.grid))
        stream = -(-pl.total_iters // h.sms)
        assert busiest == stream or (pl.grid < h.sms and busiest <= stream + planner.HALF_TILES_MAX_EXTRA)
        for tile in range(sk0 // kt, tiles):  # the striped tiles
            first, last = owner[tile * kt], owner[tile * kt + kt - 1]
            b_lo = (tile * kt - sk0) // pl.iters  # as the kernel
            b_hi = (tile * kt - sk0 + kt - 1) // pl.iters
            assert (b_lo, b_hi) == (first, last)
            assert set(owner[tile * kt : (tile + 1) * kt]) == set(range(b_lo, b_hi + 1))
    assert seen > 20
    # 70B qkv at 1024 rows: 320 tiles of 80 columns, 2 whole a block + 56 striped; Stream-K without
    p = Problem(1024, 10240, 8192, "float16", "uint4b8", 128)
    assert (plan(h, p).grid, plan(h, p).iters, plan(h, p).whole) == (132, 55, 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mma_plan, "HYBRID_PLANS", False)
        assert (plan(h, p).grid, plan(h, p).iters, plan(h, p).whole) == (132, 311, 0)
    # 8B gate_up at 512 rows: 448 tiles of 224 columns; 3 whole a block would not keep them in step
    assert plan(h, Problem(512, 28672, 4096, "float16", "uint4b8", 128)).whole == 0


def test_half_tile_plans():
    """Half-tile plans (planner._half_tiles): where a grid of G blocks, HALF_TILES_MIN_FILL x SMs
    <= G <= SMs, makes the tiles G x (whole + 1/2), block b takes `whole` tiles whole and then one
    half of a tile: blocks 2j and 2j + 1 take the first and second half of striped tile j, so
    both start it together and it has exactly one contributor. Simulated as the kernel deals
    (Plan.block_ranges); never more than HALF_TILES_MAX_EXTRA K-steps (or HALF_TILES_MAX_LOAD x)
    over the even Stream-K share; never where a whole-tile plan is at hand."""
    from jitmarlin.kernels import planner

    h = get_profile("h100")
    # the bench rows it takes on a 132-SM H100 (tools/PERF.md entry 73)
    for m, n, k, geom in [
        (1024, 6144, 4096, (128, 32, 1)),  # 8B qkv: 192 tiles = 128 x 1.5
        (256, 4096, 14336, (128, 112, 0)),  # 8B down: 64 tiles of 128 x 128
        (256, 8192, 28672, (128, 224, 0)),
    ]:  # 70B down: 64 tiles of 256 x 128
        pl = plan(h, Problem(m, n, k, "bfloat16", "uint4b8", 128))
        assert (pl.grid, pl.iters, pl.whole) == geom, (m, n, k, pl.grid, pl.iters, pl.whole)
    # 70B qkv at 1024 rows: 128 x 2.5 tiles would cost 9 K-steps over Stream-K's share: hybrid
    assert plan(h, Problem(1024, 10240, 8192, "float16", "uint4b8", 128)).grid == 132
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mma_plan, "HALF_TILES", False)
        assert plan(h, Problem(1024, 6144, 4096, "float16", "uint4b8", 128)).grid == 132
    rng = np.random.default_rng(36)
    seen = [0, 0]
    for _ in range(3000):
        p = Problem(
            int(rng.integers(65, 4096)),
            64 * int(rng.integers(1, 300)),
            128 * int(rng.integers(1, 100)),
            "float16",
            "uint4b8",
            -1,
        )
        spec = choose_fused_spec(h, p)
        if not spec.wgmma:
            continue
        pl = plan(h, p, spec)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(mma_plan, "HALF_TILES", False)
            plain = plan(h, p, replace(spec, cluster=1))
            if (plain.grid, plain.iters) == (pl.grid, pl.iters):
                continue  # (Stream-K's own plan, which may also halve every tile)
        tiles, kt = pl.m_chunks * pl.n_tiles, pl.k_tiles
        assert 2 * pl.iters == kt and 2 * tiles == pl.grid * (2 * pl.whole + 1)
        seen[pl.whole > 0] += 1
        assert planner.HALF_TILES_MIN_FILL * h.sms <= pl.grid <= h.sms and pl.spec.occupancy == 1
        stream = -(-pl.total_iters // h.sms)
        busiest = pl.whole * kt + kt // 2
        assert busiest - stream <= planner.HALF_TILES_MAX_EXTRA
        assert busiest <= planner.HALF_TILES_MAX_LOAD * stream
        assert pl.whole == 0 or (pl.spec.hybrid_loop and planner.tiles_in_step(pl.whole, pl.n_tiles))
        owner = np.full(pl.total_iters, -1)
        for b in range(pl.grid):
            runs = pl.block_ranges(b)
            assert sum(e - s for s, e in runs) == busiest
            for s, e in runs:
                assert (owner[s:e] == -1).all()
                owner[s:e] = b
        assert (owner >= 0).all()
        sk0 = pl.whole * pl.grid * kt
        for j, tile in enumerate(range(sk0 // kt, tiles)):
            halves = owner[tile * kt : (tile + 1) * kt]
            assert (halves[: kt // 2] == 2 * j).all() and (halves[kt // 2 :] == 2 * j + 1).all()
            b_lo = (tile * kt - sk0) // pl.iters  # as the kernel
            b_hi = (tile * kt - sk0 + kt - 1) // pl.iters
            assert (b_lo, b_hi) == (2 * j, 2 * j + 1)
    assert seen[0] > 5 and seen[1] > 5, seen


def test_tall_tiles_where_no_tile_is_chained():
    """Up to 256 rows, below the tall-tile bar, the planner takes 256 x 128 tiles where their plan
    is whole tiles a block or halves in clusters of two (planner._tall_unsplit), with at least
    TALL_UNSPLIT_MIN_STEPS K-steps a block; elsewhere 128 x 128 tiles as before."""
    from jitmarlin.kernels import planner

    h = get_profile("h100")
    for m, n, k, geom in [
        (256, 8192, 8192, ("m16n8k4s4c2", 128, 64)),  # 70B o: 64 tiles in halves
        (160, 8192, 6144, ("m16n8k4s4c2", 128, 48)),
        (256, 16384, 4096, ("m16n8k4s4", 128, 64)),  # 128 whole tiles
        (256, 6144, 4096, ("m8n12k4s6c2", 128, 32)),  # 8B qkv: 48 tiles, no halves (192 wide: test_wide3_tiles)
        (256, 8192, 4096, ("m8n8k4s6", 128, 64)),
    ]:  # 32 steps a half: too few
        pl = plan(h, Problem(m, n, k, "float16", "uint4b8", 128))
        assert (pl.spec.name.split("g128_")[1].rstrip("t"), pl.grid, pl.iters) == geom, (m, n, k)
        assert pl.spec.tail == (m % pl.spec.tile_m != 0)  # a short row block: its own x boxes
        if pl.spec.tm == 16:
            assert pl.iters >= planner.TALL_UNSPLIT_MIN_STEPS
            assert pl.spec.cluster == 2 or pl.iters % pl.k_tiles == 0
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(wgmma_plan, "TALL_UNSPLIT", False)
                assert plan(h, Problem(m, n, k, "float16", "uint4b8", 128)).spec.tm == 8
    # from 257 rows the bar alone decides (70B o at 512 rows: 256 x 128, 2 whole tiles a block)
    assert plan(h, Problem(512, 8192, 8192, "float16", "uint4b8", 128)).spec.tm == 16


def test_wide3_tiles_where_n_is_a_multiple_of_192():
    """From 129 to WIDE3_MAX_M rows, 4-bit integer codes in groups of 128: the planner takes 128 x
    192 wgmma tiles (three warpgroups, 384 threads) where N is a multiple of 192 and their plan has
    no chained tile (halves in clusters of two, or whole tiles a block) on >= 0.9 x SMs blocks
    (planner._wide3); elsewhere the tiles it took before."""
    h = get_profile("h100")
    for m, n, k, qt, g, act, geom in [
        (256, 6144, 4096, "uint4b8", 128, "float16", ("m8n12k4s6c2", 128, 32, 0)),  # 8B qkv: 64 tiles in halves
        (256, 6144, 4096, "uint4", 128, "bfloat16", ("m8n12k4s6c2", 128, 32, 0)),
        (200, 6144, 4096, "uint4b8", 128, "float16", ("m8n12k4s5c2t", 128, 32, 0)),  # a short row block: 5 stages
        (512, 6144, 4096, "uint4b8", 128, "float16", ("m8n12k4s6", 128, 64, 0)),  # 128 whole tiles
        (256, 6144, 8192, "uint4b8", 128, "float16", ("m8n12k4s6c2", 128, 64, 0)),
        (320, 6144, 4096, "uint4b8", 128, "float16", None),  # 96 tiles: Stream-K, not taken
        (1024, 6144, 4096, "uint4b8", 128, "float16", None),  # above WIDE3_MAX_M
        (128, 6144, 4096, "uint4b8", 128, "float16", None),  # one row block
        (256, 4608, 4096, "uint4b8", 128, "float16", None),  # 48 tiles: halves on 96 blocks
        (256, 4096, 4096, "uint4b8", 128, "float16", None),  # N not a multiple of 192
        (256, 6144, 4096, "uint4b8", 64, "float16", None),  # groups of 64 (spill in clusters)
        (256, 6144, 4096, "float8_e4m3fn", 128, "float16", None),
    ]:
        p = Problem(m, n, k, act, qt, g)
        pl = plan(h, p)
        s = pl.spec
        if geom is None:
            assert getattr(s, "tn", 0) != 12 and s.threads == 256, (m, n, k, qt, g, s.name)
            continue
        assert (s.name.split(f"_g{g}_")[1], pl.grid, pl.iters, pl.whole) == geom, (m, n, k)
        assert s.threads == 384 and s.warpgroups == 3 and s.tile_n == 192
        assert s.cluster == 2 or pl.iters % pl.k_tiles == 0
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(wgmma_plan, "WIDE3", False)
            assert getattr(plan(h, p).spec, "tn", 0) != 12
    # the tuner's candidates carry them where N is a multiple of 192, one block an SM
    cands = [
        c for c in candidate_specs(h, Problem(256, 6144, 4096, "float16", "uint4b8", 128)) if c.wgmma and c.tn == 12
    ]
    assert cands and all(c.threads == 384 and c.occupancy == 1 and c.tm <= 8 for c in cands)
    assert any(c.cluster == 2 for c in cands)
    assert not [
        c for c in candidate_specs(h, Problem(256, 4096, 4096, "float16", "uint4b8", 128)) if getattr(c, "tn", 0) == 12
    ]


def test_whole_tile_plans_keep_the_blocks_in_step():
    """Of the whole-tile counts a block within WHOLE_TILES_MAX_LOAD, the planner takes the fewest
    that keep the blocks on the same weight columns (planner.tiles_in_step): 70B gate_up at 4096
    rows, 7168 tiles of 448 columns, 56 a block on 128 blocks instead of 55 on 131."""
    from jitmarlin.kernels import planner

    h = get_profile("h100")
    pl = plan(h, Problem(4096, 57344, 8192, "float16", "uint4b8", 128))
    assert (pl.grid, pl.iters, pl.whole) == (128, 56 * 128, 0)
    assert planner.tiles_in_step(56, 448) and not planner.tiles_in_step(55, 448)
    assert planner.tiles_in_step(896, 448) and planner.tiles_in_step(7, 224)
    rng = np.random.default_rng(12)
    for _ in range(400):
        p = Problem(
            int(rng.integers(129, 9000)),
            64 * int(rng.integers(1, 900)),
            64 * int(rng.integers(1, 200)),
            "float16",
            "uint4b8",
            -1,
        )
        pl = plan(h, p, choose_fused_spec(h, p))
        if pl.whole or pl.iters % pl.k_tiles or pl.spec.occupancy > 1:
            continue
        per, fewest = pl.iters // pl.k_tiles, -(-pl.m_chunks * pl.n_tiles // h.sms)
        assert per == fewest or planner.tiles_in_step(per, pl.n_tiles)
        assert all(not planner.tiles_in_step(q, pl.n_tiles) for q in range(fewest, per))
        assert pl.iters <= planner.WHOLE_TILES_MAX_LOAD * -(-pl.total_iters // h.sms)


# ---- TMA weight boxes at decode (KernelSpec.bulk, planner.bulk_spec) ---------------------------


def test_bulk_spec_identity_and_checks():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 16, 3, bulk=True)
    assert s.name == "jm_sm80_uint4b8_f16_g128_m1n16k16s3b"
    assert spec_from_canonical(s.canonical()) == s and '"bulk":true' in s.canonical()
    assert "bulk" not in replace(s, bulk=False).canonical()  # older specs keep their text
    assert s.smem_bytes() == replace(s, bulk=False).smem_bytes() + 8 * s.stages + 128  # mbarriers, alignment
    for bad in (
        dict(cluster=2),
        dict(path="sm75", stages=2),
        dict(qtype="uint8b128"),
        dict(path="sm90", tn=8, tk=4, stages=4),
    ):
        with pytest.raises(ValueError, match="TMA weight boxes"):
            replace(s, **bad).check()
    replace(s, qtype="uint8b128", tn=8).check()  # 128 words a k16 row: one box


def test_xbox_spec_identity_and_checks():
    s = KernelSpec("sm80", "uint4b8", "bfloat16", 8, 1, 16, 16, 3, bulk=True, xbox=True)
    s.check()
    assert s.name == "jm_sm80_uint4b8_bf16_g128_m1n16k16s3bx"
    assert spec_from_canonical(s.canonical()) == s and '"xbox":true' in s.canonical()
    assert "xbox" not in replace(s, xbox=False).canonical()
    # stages on 1024-byte boundaries (x's swizzled boxes), mbarriers, 1024 bytes to align the base
    assert s.smem_bytes() == 3 * s.stage_bytes() + 8 * s.stages + 1024
    b8 = replace(s, qtype="uint8b128", tn=8)  # 8 KB of x, 32 KB of codes, 512 bytes of scales
    assert replace(b8, bulk=False, xbox=False).stage_bytes() == 41472 and b8.stage_bytes() == 41 * 1024
    for bad in (dict(bulk=False), dict(tm=2), dict(tk=2, tn=8), dict(tk=6)):
        with pytest.raises(ValueError, match="xbox"):
            replace(s, **bad).check()
    replace(s, tk=32, tn=8).check()


@pytest.mark.parametrize(
    "k,n,bulk",
    [
        (4096, 28672, True),
        (14336, 4096, True),
        (8192, 10240, True),
        (8192, 57344, True),
        (4096, 4096, False),
        (4096, 6144, False),
    ],
)
def test_bulk_weights_where_a_stage_holds_32_kb(k, n, bulk):
    """On H100 the decode plans whose stages hold >= 32 KB of weights take TMA boxes (256-wide tiles
    of K 256, 128 x 512); the 16 KB stages of 8B o (128 x 256) and 8B qkv (64 x 512) do not."""
    from jitmarlin.kernels.planner import BULK_MIN_STAGE_BYTES

    for act in ("float16", "bfloat16"):
        p = Problem(16, n, k, act, "uint4b8", 128)
        s = choose_fused_spec(PROFILES["h100"], p)
        assert s.bulk == bulk, s.name
        assert s.xbox == (bulk and act == "bfloat16"), s.name  # x's boxes in bf16 only (entry 93)
        assert (s.tile_k * s.tile_n // 2 >= BULK_MIN_STAGE_BYTES) == bulk
        assert plan(PROFILES["h100"], p).smem_bytes == s.smem_bytes()
        # other GPUs keep cp.async (not measured); so do the gemv (M <= 8) and wgmma (M >= 17) plans
        assert not getattr(choose_fused_spec(PROFILES["a100"], p), "bulk", False)
        for m in (1, 64):
            assert not getattr(choose_fused_spec(PROFILES["h100"], replace(p, m=m)), "bulk", False)


def test_bulk_is_a_candidate_on_sm90_only():
    p = Problem(16, 4096, 4096, "bfloat16", "uint4b8", 128)
    h = candidate_specs(PROFILES["h100"], p)
    bulk = [c for c in h if getattr(c, "bulk", False)]
    assert bulk and all(replace(c, bulk=False, xbox=False) in h for c in bulk)  # beside its cp.async twin
    xbox = [c for c in bulk if c.xbox]  # x's boxes: a candidate beside its weights-only twin in either dtype
    assert xbox and all(replace(c, xbox=False) in h for c in xbox)
    assert {c.tk for c in xbox} == {c.tk for c in bulk if c.tk % 4 == 0}
    f16 = candidate_specs(PROFILES["h100"], replace(p, act="float16"))
    assert any(getattr(c, "xbox", False) for c in f16)
    for other in ("a100", "rtx-pro-6000"):  # (sm_120 has TMA too, but boxes are measured on sm_90 only)
        assert not any(getattr(c, "bulk", False) for c in candidate_specs(PROFILES[other], p))
    with pytest.raises(UnsupportedError, match="needs sm_90"):
        plan(PROFILES["a100"], p, bulk[0])
