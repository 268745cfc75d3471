"""The decode kernel without cross-block partial sums (templates/gemv.cu.j2, a GemvSpec): planning,
compilation on the CPU for every sm_80+ arch, and correctness on a GPU for every quant type."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gpu_cases import check_forced, check_linear

from jitmarlin import InputError, UnsupportedError
from jitmarlin.jit.profiles import PROFILES, get_profile
from jitmarlin.kernels.planner import (
    ALL_QTYPES,
    GEMV_PLAN_MAX_M,
    _gemv_shape,
    candidate_specs,
    gemv_specs,
    group_blocks,
    hybrid_unroll,
    plan,
)
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.render import render
from jitmarlin.kernels.spec import GemvSpec, spec_from_canonical

GROUP_OF = {"nvfp4": 16, "mxfp4": 32, "float8_e4m3fn": -1, "uint4": 64, "uint8": -1}
H100 = get_profile("h100")
LIGHT = ("uint4b8", "mxfp4")  # 4-bit, no zero points, at most two scale rows a batch of four


def _problem(m=1, n=6144, k=4096, qt="uint4b8", act="float16", group=128):
    return Problem(m, n, k, act, qt, group)


def _spec(qt="uint4b8", act="float16", cb=1, cl=1, group=None, m=1, occupancy=1, spread=False, warps=None, pair=False):
    g = GROUP_OF.get(qt, 128) if group is None else group
    p = _problem(m, qt=qt, act=act, group=g)
    w, unroll, max_m = _gemv_shape(p)
    if spread == 2:
        unroll = hybrid_unroll(p, unroll)
    w = warps or w // occupancy  # two resident blocks an SM: 8 warps each
    return GemvSpec(
        "sm80", qt, act, group_blocks(p), w, w // cb, unroll, 2 if pair else cl, max_m, occupancy, spread, pair=pair
    )


# ---- planning (pure) ---------------------------------------------------------------------------


def test_decode_plans_gemv_where_its_blocks_fill_the_gpu():
    # 8B qkv: 96 column blocks, one a block (73% of 132 SMs); 8B o and 8B down: 64, two blocks a
    # column block (97%): up to 4 rows a pair meeting in the workspace, from 5 a cluster; 8B
    # gate_up: 448, four a block (85%)
    cases = {(6144, 4096): (1, 1), (4096, 4096): (1, 2), (4096, 14336): (1, 2), (28672, 4096): (4, 1)}
    for (n, k), (cb, cl) in cases.items():
        for m in (1, 4, 5, GEMV_PLAN_MAX_M):
            pl = plan(H100, _problem(m, n, k))
            assert isinstance(pl.spec, GemvSpec), (n, k, m)
            assert (pl.spec.col_blocks, pl.spec.cluster, pl.spec.pair) == (cb, cl, cl == 2 and m <= 4)
            assert pl.grid == -(-(n // 64) // cb) * cl <= H100.sms
    # 70B qkv: 160 column blocks leave a one-wave plan of 16-warp blocks at most 61% of the SMs.
    # Where that kernel puts the group scale on the sums (groups of 128, zero points or not), it
    # is taken: 80 blocks of two column blocks. Otherwise (short groups) a hybrid plan (block b
    # owns column block b, the 28 past the grid shared by 4-5 blocks each), ahead of 8-warp
    # blocks two an SM and the round-robin spread plans
    for qt in ("uint4b8", "uint4"):
        pl = plan(H100, _problem(1, 10240, 8192, qt=qt))
        assert pl.spec.scale_sums and (pl.spec.warps, pl.spec.col_blocks, pl.spec.spread, pl.grid) == (16, 2, False, 80)
    for qt, g in (("uint4", 32), ("uint4b8", 32)):
        pl = plan(H100, _problem(1, 10240, 8192, qt=qt, group=g))
        assert (pl.spec.warps, pl.spec.occupancy, pl.spec.cluster, pl.spec.spread, pl.grid) == (16, 1, 1, 2, 132)
        assert not pl.spec.scale_sums
    assert {(c.spread, c.occupancy) for c in gemv_specs(H100, _problem(1, 10240, 8192))} >= {(2, 1), (1, 1), (0, 2)}
    # hybrid plans need some column blocks past the grid, each shared by at most 8 blocks, and one
    # token block; every quant type
    assert not any(c.spread == 2 for c in gemv_specs(H100, _problem(1, 140 * 64, 8192)))
    assert any(c.spread == 2 for c in gemv_specs(H100, _problem(1, 10240, 8192, qt="uint8b128")))
    assert not any(c.spread == 2 for c in gemv_specs(H100, _problem(12, 10240, 8192)))
    # 70B gate_up: 896 column blocks, eight a block (112 blocks, 85% of the SMs), not spread over
    # the 132 SMs (6 or 7 a block): the spread partition's bare read is 5% slower (entry 61)
    for m in (1, 8):
        pl = plan(H100, _problem(m, 57344, 8192))
        assert (pl.spec.col_blocks, pl.spec.kwarps, pl.spec.spread, pl.spec.cluster, pl.grid) == (8, 2, False, 1, 112)
    # more column blocks than eight a block can cover in one wave: spread, no clusters
    pl = plan(H100, _problem(1, 140 * 8 * 64, 8192))
    assert pl.spec.spread and pl.spec.cluster == 1 and pl.grid == 132
    # 32 column blocks on 132 SMs (spread too: a quarter of the SMs): Stream-K kernel
    assert not isinstance(plan(H100, _problem(1, 2048, 4096)).spec, GemvSpec)
    # spread only for 4-bit codes without zero points (the others spill under NVRTC for sm_120)
    assert not any(c.spread for c in gemv_specs(H100, _problem(1, 57344, 8192, qt="uint8b128")))
    # up to 8 rows one token block; 9..16 rows (two token blocks) only through the autotuner
    assert plan(H100, _problem(8)).spec.max_m == 8
    assert not isinstance(plan(H100, _problem(GEMV_PLAN_MAX_M + 1)).spec, GemvSpec)
    assert {s.max_m for s in gemv_specs(H100, _problem(9))} == {16}


def test_gemv_only_on_the_sm80_path_and_clusters_only_on_sm90():
    p = _problem()
    for name, prof in PROFILES.items():
        specs = gemv_specs(prof, p)
        if prof.path != "sm80":
            assert specs == [], name
            continue
        for s in specs:
            assert plan(prof, p, s).grid <= prof.sms * s.occupancy
            assert s.cluster == 1 or prof.cc >= (9, 0)  # clusters, and pairs (128-bit atomics)
            assert s.smem_bytes() <= prof.smem_per_block


def test_pair_plans_on_sm90_and_as_candidates_on_sm120():
    """The planner takes pair plans (two blocks a column block meeting in the workspace through
    128-bit atomics) where a cluster plan of the same blocks would do on sm_90; on sm_120 it
    offers them to the autotuner only, before sm_90 not at all (and refuses a forced one)."""
    from dataclasses import replace

    p = _problem(1, 4096, 4096)
    h100 = gemv_specs(H100, p)
    assert h100[0].pair and h100[0].cluster == 2
    assert any(s.cluster == 2 and not s.pair for s in h100)  # the cluster plan stays a candidate
    eight = gemv_specs(H100, _problem(8, 4096, 4096))  # 8 rows: the cluster plan first
    assert eight[0].cluster == 2 and not eight[0].pair and any(s.pair for s in eight)
    for name, prof in PROFILES.items():
        if prof.path != "sm80" or prof.cc == (9, 0):
            continue
        big = replace(prof, sms=max(prof.sms, 128))  # room for 64 column blocks x 2
        assert not getattr(plan(big, p).spec, "pair", False), name
        pairs = [s for s in candidate_specs(big, p) if getattr(s, "pair", False)]
        assert bool(pairs) == (prof.cc >= (9, 0)), name
        if prof.cc < (9, 0):
            with pytest.raises(UnsupportedError, match="128-bit atomic"):
                plan(big, p, _spec(pair=True))
    # a pair plan needs two blocks a column block in one wave; no cluster hardware
    assert not any(s.pair for s in gemv_specs(H100, _problem(1, 300 * 64, 4096)))  # 4 a block: 150 blocks
    # (and no pair plan of eight column blocks a block: the workspace's slots hold four)
    assert not any(s.pair and s.col_blocks > 4 for s in gemv_specs(H100, _problem(1, 128 * 64, 4096)))
    assert any(s.pair for s in gemv_specs(replace(H100, clusters=()), p))


def test_pair_spec_checks_and_names():
    s = _spec(pair=True)
    assert s.name.endswith("c2x") and s.cluster == 2 and spec_from_canonical(s.canonical()) == s
    assert '"pair"' not in _spec(cl=2).canonical()  # unset flags stay out of cache keys
    assert s.smem_bytes() < _spec(cl=2).smem_bytes()  # no receive area for the other block
    assert s.tagged_words(128) == 64 * 8 * 16 * 2 and _spec(cl=2).tagged_words(128) == 0
    from dataclasses import replace

    for bad in (dict(cluster=1), dict(spread=True, kwarps=16)):
        with pytest.raises(ValueError, match="pair"):
            replace(s, **bad).check()


def test_gemv_candidates_for_the_autotuner():
    c = candidate_specs(H100, _problem(4))
    assert any(isinstance(s, GemvSpec) for s in c)
    assert any(isinstance(s, GemvSpec) for s in candidate_specs(H100, _problem(16)))
    assert not any(isinstance(s, GemvSpec) for s in candidate_specs(H100, _problem(17)))


def test_batch_of_four_k16_rows_where_it_compiles_without_spills():
    """Four k16 rows a batch for 4-bit codes, zero-point types included from groups of 64 (their
    one scale and offset row a batch); two for 8-bit codes, zero points with groups of 32 (two
    rows of each) and every zero-point or nvfp4 hybrid plan; halved again for two token blocks."""
    cases = {
        ("uint4b8", 128): 4,
        ("uint4b8", 32): 4,
        ("mxfp4", 32): 4,
        ("nvfp4", 16): 4,
        ("uint4", 128): 4,
        ("uint4", 64): 4,
        ("uint4", -1): 4,
        ("uint4", 32): 2,
        ("uint8b128", 128): 2,
        ("uint8", 128): 2,
        ("float8_e4m3fn", -1): 2,
    }
    for (qt, g), u in cases.items():
        p = _problem(1, qt=qt, group=g)
        assert _gemv_shape(p)[1] == u, (qt, g)
        assert _gemv_shape(_problem(9, qt=qt, group=g))[1] == u // 2, (qt, g)
        heavy = qt == "nvfp4" or qt in ("uint4", "uint8")
        assert hybrid_unroll(p, u) == (u // 2 if heavy and u > 2 else u), (qt, g)


def test_forced_gemv_checks_rows_and_path():
    s = _spec()
    with pytest.raises(InputError, match="at most 8 rows"):
        plan(H100, _problem(9), s)
    with pytest.raises(InputError, match="at most 16 rows"):
        plan(H100, _problem(17), _spec(m=16))
    with pytest.raises(UnsupportedError, match="sm80 path"):
        plan(get_profile("t4"), _problem(1), s)


def test_forced_spread_needs_a_warp_a_column_block():
    """A spread plan's runs may cross one column block boundary, no more: at most one column
    block a warp of a cluster (here 10 column blocks on 2 blocks of 4 warps)."""
    from dataclasses import replace

    spec = _spec(spread=True, warps=4)
    with pytest.raises(UnsupportedError, match="one 64-column block a warp"):
        plan(replace(H100, sms=2), _problem(1, 640, 1024), spec)
    assert plan(replace(H100, sms=3), _problem(1, 640, 1024), spec).grid == 3


def test_forced_hybrid_checks_its_layout():
    spec = _spec(spread=2)
    assert spec.name.endswith("u4h") and spec_from_canonical(spec.canonical(), "GemvSpec") == spec
    for n, k, why in (
        (8192, 8192, "between 132 and 264"),
        (140 * 64, 8192, "more than 8 blocks"),
        (10240, 256, "less than two batches"),
    ):
        with pytest.raises(UnsupportedError, match=why):
            plan(H100, _problem(1, n, k), spec)
    with pytest.raises(ValueError, match="hybrid"):
        _spec(spread=2, cl=2).check()
    with pytest.raises(ValueError, match="spread must be"):
        _spec(spread=3).check()


def test_gemv_spec_round_trips_and_checks():
    s = _spec(cl=2)
    assert spec_from_canonical(s.canonical()) == s
    assert s.name == "jm_gemv_sm80_uint4b8_f16_g128_m8w16k16u4c2"
    sp = _spec(spread=True)
    assert spec_from_canonical(sp.canonical()) == sp and sp.name.endswith("u4s") and sp != _spec()
    with pytest.raises(ValueError, match="kwarps must equal warps"):
        GemvSpec("sm80", "uint4b8", "float16", 8, 16, 4, 4, spread=True).check()
    bad = [
        dict(warps=12),
        dict(kwarps=3),
        dict(unroll=3),
        dict(cluster=4),
        dict(path="sm75"),
        dict(max_m=4),
        dict(occupancy=2),
    ]
    for kw in bad:
        with pytest.raises(ValueError):
            GemvSpec(
                **{
                    **dict(path="sm80", qtype="uint4b8", act="float16", group_blocks=8, warps=16, kwarps=16, unroll=4),
                    **kw,
                }
            ).check()


# ---- the CPU emulator (the kernel as written, the instruction layer on the host) ----------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "qt, group", [(qt, None) for qt in ALL_QTYPES] + [("uint4", 128), ("uint4", -1), ("uint8", 128)]
)
def test_every_type_on_emulator(qt, group, seed, rng):
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    g = GROUP_OF.get(qt, 128) if group is None else group
    k_in = {-1: 200, 16: 208, 32: 224, 64: 192}.get(g, 256)
    w = rng.standard_normal((328, k_in)) * 0.05  # 6 column blocks, the last one short
    prof = replace(H100, sms=8)
    for act, cb, cl, m, occ in (
        ("float16", 1, 2, 1, 1),
        ("bfloat16", 4, 1, 8, 1),
        ("float16", 2, 2, 16, 1),
        ("bfloat16", 1, 1, 3, 2),
        ("float16", 8, 1, 5, 1),
    ):
        qw = quantize(w, qt, g, scale_dtype=act)
        spec = _spec(qt, act, cb, cl, group=g, m=m, occupancy=occ)
        x = rng.standard_normal((m, k_in)).astype(np.float32)
        b = rng.standard_normal(328).astype(np.float32)
        pl = plan(prof, Problem(m, qw.n, qw.k, act, qt, g), spec)
        out = emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))
        ref = linear_reference(halves.round_to(x, act), qw, halves.round_to(b, act))
        check_output(out, ref, act, what=f"M={m}", seed=seed, spec=spec)


@pytest.mark.slow
@pytest.mark.parametrize("qt", ["nvfp4", "mxfp4"])
def test_fp4_large_scales_on_emulator(qt, seed, rng):
    """e2m1 weights whose group scales reach the top of fp16 (6 s up to 65472: the scale rows
    can take only 2^2 of the decode's 2^14, weights.kernel_form, and the global scale the rest),
    batches of four k16 rows (nvfp4: four scale rows a batch), every code; a whole plan and a
    hybrid one."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import from_codes

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    g = GROUP_OF[qt]
    n, k = 256, 512
    codes = rng.integers(0, 16, (n, k))
    top = 10912.0 if qt == "nvfp4" else 8192.0
    scales = rng.choice([top, -top, top / 3, 1.0, 2.0**-10], (k // g, n))
    qw = from_codes(qt, codes, scales, g, scale_dtype="float16")
    prof = replace(H100, sms=3)  # 4 column blocks on 3 SMs: a hybrid plan fits
    for m, sp in ((1, False), (8, False), (3, 2)):
        spec = _spec(qt, "float16", 1, 1, group=g, m=m, spread=sp, warps=4)
        assert spec.unroll == (2 if sp == 2 and qt == "nvfp4" else 4)
        x = (rng.standard_normal((m, k)) * 1e-3).astype(np.float32)
        pl = plan(prof, Problem(m, qw.n, qw.k, "float16", qt, g), spec)
        out = emu.run_values(pl, x, qw, seed=int(rng.integers(1, 1 << 30)))
        ref = linear_reference(halves.round_to(x, "float16"), qw)
        check_output(out, ref, "float16", what=f"M={m} {spec.name}", seed=seed, spec=spec)


@pytest.mark.slow
@pytest.mark.parametrize("cl", [1, 2])
def test_spread_runs_cross_column_blocks_on_emulator(cl, seed, rng):
    """Spread plans: 7 column blocks (the last one short) over 2 clusters, 4 and 3, so that the
    warps' runs (4 warps a block) cross from one column block into the next in one cluster and
    line up in the other; K not a multiple of a run; rows in one and in both token blocks."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    prof = replace(H100, sms=2 * cl, clusters=((2, 2),))
    w = rng.standard_normal((424, 320)) * 0.05
    for act, m in (("float16", 1), ("bfloat16", 5), ("float16", 13)):
        qw = quantize(w, "uint4b8", 64, scale_dtype=act)
        spec = _spec("uint4b8", act, 1, cl, group=64, m=m, spread=True, warps=4)
        pl = plan(prof, Problem(m, qw.n, qw.k, act, "uint4b8", 64), spec)
        assert pl.grid == 2 * cl
        x = rng.standard_normal((m, 320)).astype(np.float32)
        b = rng.standard_normal(424).astype(np.float32)
        out = emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))
        ref = linear_reference(halves.round_to(x, act), qw, halves.round_to(b, act))
        check_output(out, ref, act, what=f"M={m}", seed=seed, spec=spec)


@pytest.mark.slow
def test_hybrid_plans_on_emulator(seed, rng):
    """Hybrid plans: G blocks own a column block each, the rest shared by 1-7 blocks (the last
    column block short, K short of its padding, rows in and past the first token pair); the
    workspace's tagged slots must be empty after each launch (emu.run checks)."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    # (SMs, out_features, in_features, warps): 7 column blocks on 4 (3 shared by 1-2 blocks), 9 on
    # 5, 5 on 3 with 8 warps, 8 on 7 (one shared by all 7)
    for sms, n_out, k_in, warps in ((4, 440, 512, 4), (5, 560, 960, 4), (3, 296, 1024, 8), (7, 472, 512, 4)):
        prof = replace(H100, sms=sms)
        w = rng.standard_normal((n_out, k_in)) * 0.05
        for act, m in (("float16", 1), ("bfloat16", 5), ("float16", 8)):
            qw = quantize(w, "uint4b8", 64, scale_dtype=act)
            spec = _spec("uint4b8", act, group=64, m=m, spread=2, warps=warps)
            pl = plan(prof, Problem(m, qw.n, qw.k, act, "uint4b8", 64), spec)
            assert pl.grid == sms
            x = rng.standard_normal((m, k_in)).astype(np.float32)
            b = rng.standard_normal(n_out).astype(np.float32)
            out = emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))
            ref = linear_reference(halves.round_to(x, act), qw, halves.round_to(b, act))
            check_output(out, ref, act, what=f"{sms} SMs, N={qw.n}, M={m}", seed=seed, spec=spec)
    # zero points and a scale row a k16 row (batches of two k16 rows): 7 column blocks on 4
    prof = replace(H100, sms=4)
    for qt, g in (("uint4", 64), ("nvfp4", 16)):
        w = rng.standard_normal((440, 512)) * 0.05
        for act, m in (("float16", 3), ("bfloat16", 8)):
            qw = quantize(w, qt, g, scale_dtype=act)
            spec = _spec(qt, act, group=g, m=m, spread=2, warps=4)
            pl = plan(prof, Problem(m, qw.n, qw.k, act, qt, g), spec)
            x = rng.standard_normal((m, 512)).astype(np.float32)
            out = emu.run_values(pl, x, qw, seed=int(rng.integers(1, 1 << 30)))
            ref = linear_reference(halves.round_to(x, act), qw)
            check_output(out, ref, act, what=f"M={m}", seed=seed, spec=spec)


@pytest.mark.slow
def test_pair_plans_on_emulator(seed, rng):
    """Pair plans: two plain blocks a column block that swap their sums through the workspace,
    whichever arrives second finishing each value (the emulator's schedules give either block that
    role, value by value); a short last column block, K short of its padding, rows in one and in
    both token blocks, 1, 2 and 4 column blocks a block, zero points; the tagged slots must be
    empty after each launch (emu.run checks)."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    prof = replace(H100, sms=12)
    for qt, g, act, cb, m in (
        ("uint4b8", 128, "float16", 1, 1),
        ("uint4b8", 64, "bfloat16", 2, 5),
        ("uint4b8", 128, "float16", 1, 16),
        ("uint4", 64, "float16", 4, 8),
        ("mxfp4", 32, "bfloat16", 1, 3),
    ):
        k_in = {128: 512, 64: 448, 32: 480}[g]  # both blocks have rows; 448, 480: K short of its padding
        w = rng.standard_normal((328, k_in)) * 0.05  # 6 column blocks, the last one short
        w[[0, 68, 132]] = 0.0  # sums of exactly 0 at the head of a piece
        qw = quantize(w, qt, g, scale_dtype=act)
        spec = _spec(qt, act, cb, group=g, m=m, warps=4, pair=True)
        pl = plan(prof, Problem(m, qw.n, qw.k, act, qt, g), spec)
        assert pl.grid == -(-6 // cb) * 2
        x = rng.standard_normal((m, k_in)).astype(np.float32)
        b = rng.standard_normal(328).astype(np.float32)
        ref = linear_reference(halves.round_to(x, act), qw, halves.round_to(b, act))
        for sched in rng.integers(1, 1 << 30, 3):  # three schedules of the emulator
            out = emu.run_values(pl, x, qw, bias=b, seed=int(sched))
            check_output(out, ref, act, what=f"M={m} schedule {sched}", seed=seed, spec=spec)


def _caught(pl, x, qw, sched, ref) -> bool:
    """Whether a planted bug shows on emulator schedule `sched`: the run stops with an EmuError, or its
    fp16 output fails the element-wise checker (nothing recorded: the margins are correct kernels').
    Any other error (a plant that found nothing to replace) raises."""
    from jitmarlin import emu
    from jitmarlin.reference import fails_check

    try:
        out = emu.run_values(pl, x, qw, seed=sched)
    except emu.EmuError:
        return True
    return fails_check(out, ref, "float16")


PAIR_SLIPS = {
    # the second block stores its own sums without the first's
    "add": (
        "f32_of(~(u32)lo) + sum.x, f32_of((u32)(lo >> 32)) + sum.y,\n                                      "
        "f32_of((u32)hi) + sum.z, f32_of((u32)(hi >> 32)) + sum.w",
        "sum.x, sum.y, sum.z, sum.w",
    ),
    # the slot keeps the second block's piece: the next launch would take it for a first block's
    "clear": ("    st_relaxed_gpu_u64(slot, 0ull);\n    st_relaxed_gpu_u64(slot + 1, 0ull);\n", ""),
    # only block 1 of a pair finishes: where block 0 comes second nobody stores (the output keeps
    # its poison) and its piece stays
    "rank": ("    if ((u32)lo == 0u) return;", "    if ((u32)lo == 0u || !(blockIdx.x & 1)) return;"),
    # the first value stored as it is: a zero sum reads as an empty slot
    "encode": ("(u32)~f32_bits(sum.x)", "f32_bits(sum.x)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("which", sorted(PAIR_SLIPS))
def test_emulator_catches_a_pair_protocol_slip(which, rng, plant):
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import linear_reference
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    plant(*PAIR_SLIPS[which])
    spec = _spec("uint4b8", "float16", group=64, warps=4, pair=True)
    w = rng.standard_normal((200, 512)) * 0.05  # 16 k16 rows a block
    w[[0, 4, 64]] = 0.0  # sums of exactly 0 at the head of a piece
    qw = quantize(w, "uint4b8", 64)
    pl = plan(replace(H100, sms=8), Problem(1, qw.n, qw.k, "float16", "uint4b8", 64), spec)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    ref = linear_reference(x.astype(np.float16).astype(np.float64), qw)
    caught = sum(_caught(pl, x, qw, sched, ref) for sched in range(1, 6))
    assert caught == 5


@pytest.mark.parametrize("kind", ["whole", "spread", "hybrid", "two_groups_a_batch"])
def test_group_scales_on_the_sums_with_runs_off_the_groups(kind, seed, rng):
    """Symmetric group scales are applied to a group's sums at its end: runs of 3 batches of 4 k16
    rows start and end inside groups of 8 rows (whole column blocks: K = 768, 4 K-warps), spread
    runs cross column blocks inside a group; hybrid plans keep the scale on the weights; batches of
    8 rows hold two groups of 64."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    n_out, k_in, sms = {
        "whole": (200, 768, 4),
        "spread": (424, 640, 2),
        "hybrid": (440, 1152, 4),
        "two_groups_a_batch": (200, 1024, 4),
    }[kind]
    group = 64 if kind == "two_groups_a_batch" else 128
    prof = replace(H100, sms=sms)
    w = rng.standard_normal((n_out, k_in)) * 0.05
    for act, m in (("float16", 1), ("bfloat16", 5), ("float16", 8)):
        qw = quantize(w, "uint4b8", group, scale_dtype=act)
        spec = _spec("uint4b8", act, group=group, m=m, warps=4, spread={"spread": True, "hybrid": 2}.get(kind, False))
        if kind == "two_groups_a_batch":
            spec = replace(spec, unroll=8)
        assert spec.group_blocks * spec.unroll == 32
        pl = plan(prof, Problem(m, qw.n, qw.k, act, "uint4b8", group), spec)
        x = rng.standard_normal((m, k_in)).astype(np.float32)
        out = emu.run_values(pl, x, qw, seed=int(rng.integers(1, 1 << 30)))
        ref = linear_reference(halves.round_to(x, act), qw)
        check_output(out, ref, act, what=f"M={m}", seed=seed, spec=spec)


HYBRID_SLIPS = {
    "wait": (
        "        while (!(hv[sb] >> 32)) {\n          spin_pause();\n          hv[sb] = ld_relaxed_gpu_u64(src);\n"
        "        }\n",
        "",
    ),
    "clear": ("        st_relaxed_gpu_u64(src, 0ull);\n", ""),
    "count": ("    if (n_in != parts) return;", "    if (n_in != 1) return;"),
}


@pytest.mark.slow
@pytest.mark.parametrize("which", sorted(HYBRID_SLIPS))
def test_emulator_catches_a_hybrid_protocol_slip(which, rng, monkeypatch):
    """Without the wait for a slot's tag, a finisher adds a slot before its block stored it on
    some schedule (a wrong sum, or a tag left behind); without clearing the slots, the next launch
    would take stale sums for fresh ones (emu.run finds the tags left); with the first warp done
    with the share adding the block's sums instead of the last, the others' are missing."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import linear_reference
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    real = emu.render
    cut, keep = HYBRID_SLIPS[which]

    def render_without(spec, target="cuda"):
        src = real(spec, target)
        assert src.count(cut) == 1
        return src.replace(cut, keep)

    monkeypatch.setattr(emu, "render", render_without)
    spec = _spec("uint4b8", "float16", group=64, spread=2, warps=4)
    qw = quantize(rng.standard_normal((440, 512)) * 0.05, "uint4b8", 64)
    pl = plan(replace(H100, sms=4), Problem(1, qw.n, qw.k, "float16", "uint4b8", 64), spec)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    ref = linear_reference(x.astype(np.float16).astype(np.float64), qw)
    caught = sum(_caught(pl, x, qw, sched, ref) for sched in range(1, 21))
    assert caught > 0


FIRST_BARRIER = "    if constexpr (CL > 1) {\n      cluster_arrive();\n      cluster_wait();\n    } else {\n      bar_sync();\n    }\n"
LAST_BARRIER = "    if constexpr (CL > 1) {                        // no block leaves while another reads its slabs\n      cluster_arrive();\n      cluster_wait();\n    }\n"
RANK0_BARRIER = "    cluster_arrive();\n    cluster_wait();\n    if (rank != 0) return;"


@pytest.mark.slow
@pytest.mark.parametrize("which", ["rank0", "spread_first", "spread_last"])
def test_emulator_catches_a_missing_cluster_barrier(which, rng, monkeypatch):
    """The emulator's barrier.cluster counts phases. Whole column blocks in clusters of 2: with the
    barrier before rank 0's final sum planted away, rank 0 adds the other block's sums before they
    arrive (or after that block exited) on some schedule. Spread, clusters of 2, 3 column blocks
    (runs cross between the blocks): without the barrier after the slabs, a piece adds a slab
    before it is written; without the last one, a block reads the slabs of one that has exited."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import linear_reference
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    real = emu.render
    cut, keep = {
        "rank0": (RANK0_BARRIER, "    if (rank != 0) return;"),
        "spread_first": (FIRST_BARRIER, ""),
        "spread_last": (LAST_BARRIER, ""),
    }[which]

    def render_without_barrier(spec, target="cuda"):
        src = real(spec, target)
        assert src.count(cut) == 1
        return src.replace(cut, keep)

    monkeypatch.setattr(emu, "render", render_without_barrier)
    spread = which != "rank0"
    n = 192 if spread else 64
    spec = _spec("uint4b8", "float16", 1, 2, warps=4 if spread else None, spread=spread)
    qw = quantize(rng.standard_normal((n, 256)) * 0.05, "uint4b8", 128)
    pl = plan(replace(H100, sms=2, clusters=((2, 1),)), Problem(1, n, 256, "float16", "uint4b8", 128), spec)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    ref = linear_reference(x.astype(np.float16).astype(np.float64), qw)
    caught = sum(_caught(pl, x, qw, sched, ref) for sched in range(1, 41 if spread else 9))
    assert caught > 0


def test_gemv_source_has_no_shared_memory_pipeline():
    src = render(_spec(cl=2))
    assert "cp_async" not in src.split("namespace jm")[-1]
    assert "ld_stream_v4(" in src and "__cluster_dims__" in src
    pair = render(_spec(pair=True))  # two blocks, launched without a cluster
    assert "#define JM_CLUSTER 1\n" in pair and "constexpr bool PAIR = true;" in pair


# ---- compilation (NVRTC, no GPU) ---------------------------------------------------------------


def _compile(spec, arch):
    from jitmarlin.jit.cache import default_cache

    art, _, _ = default_cache().get(spec, arch)
    return art


@pytest.mark.slow
@pytest.mark.parametrize(
    "qt, group", [(qt, None) for qt in ALL_QTYPES] + [("uint4", 128), ("uint4", -1), ("uint4", 32), ("uint8", 128)]
)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_every_type_compiles_without_spills(qt, group, act):
    for cb, cl, arch, m, occ, sp in (
        (1, 2, "sm_90", 1, 1, 0),
        (4, 1, "sm_90", 16, 1, 0),
        (1, 1, "sm_80", 8, 1, 0),
        (2, 1, "sm_120", 1, 1, 0),
        (1, 2, "sm_90", 16, 1, 0),
        (2, 1, "sm_120", 9, 1, 0),
        (1, 1, "sm_90", 1, 2, 0),
        (1, 1, "sm_86", 16, 2, 0),
        (1, 2, "sm_90", 8, 1, 1),
        (1, 1, "sm_120", 1, 1, 1),
        (1, 2, "sm_90", 16, 1, 1),
        (1, 1, "sm_90", 8, 1, 2),
        (1, 1, "sm_120", 1, 1, 2),
        (1, 1, "sm_80", 1, 1, 2),
        (1, 2, "sm_90", 1, 1, 3),
        (4, 2, "sm_90", 16, 1, 3),
        (2, 2, "sm_120", 8, 1, 3),
    ):
        if sp == 1 and qt not in LIGHT:
            continue  # spread plans: light types only (see planner)
        pair = sp == 3  # sp 3: a pair plan (two blocks a column block, no cluster)
        spec = _spec(qt, act, cb, cl, group=group, m=m, occupancy=occ, spread=(False, True, 2, False)[sp], pair=pair)
        art = _compile(spec, arch)
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{'bf16' if act == 'bfloat16' else 'f16'}" in art.ptx
        assert "ld.global.nc.L1::no_allocate.v4" in art.ptx
        # no pipeline, no counters in global memory (hybrid: one in shared memory)
        atoms = sorted({ln.split()[0] for ln in art.ptx.splitlines() if "atom" in ln})
        assert "cp.async" not in art.ptx and atoms == {
            2: ["atom.shared.cta.add.u32"],
            3: ["atom.relaxed.gpu.global.exch.b128"],
        }.get(sp, [])
        assert (
            (".shared::cluster" in art.ptx) == (cl > 1 and not pair)  # DSMEM: stores to rank 0, or spread reads
            and ("ld.shared::cluster" in art.ptx) == (cl > 1 and sp == 1)
        )
        assert ("barrier.cluster" in art.ptx) == (cl > 1 and not pair)
        # hybrid and pair: tagged 64-bit slots in the workspace, no device-scope fence
        assert ("st.global.relaxed.gpu.b64" in art.ptx) == (sp in (2, 3))
        assert not any(f in art.ptx for f in ("membar.gl", "fence.sc.gpu", "fence.acq_rel.gpu"))
        r = art.resources
        assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (spec.name, arch, r)


@pytest.mark.slow
def test_pdl_builds_wait_between_the_first_weights_and_x():
    """Built for programmatic dependent launch (spec.pdl), the sm_90 kernel requests the first
    batch's weights, then waits (griddepcontrol.wait), then loads x; built without, or for sm_80,
    it has no griddepcontrol at all."""
    from dataclasses import replace

    spec = _spec(cb=1)
    pdl = replace(spec, pdl=True)
    ptx = _compile(pdl, "sm_90").ptx.splitlines()
    first = lambda what: next(i for i, ln in enumerate(ptx) if what in ln)  # noqa: E731
    assert first("ld.global.nc.L1::no_allocate.v4") < first("griddepcontrol.wait") < first("ld.global.nc.u32")
    assert first("griddepcontrol.launch_dependents") > first("griddepcontrol.wait")
    assert sum("griddepcontrol.wait" in ln for ln in ptx) == 1
    assert "griddepcontrol" not in _compile(spec, "sm_90").ptx
    assert "griddepcontrol" not in _compile(pdl, "sm_80").ptx


@pytest.mark.slow
@pytest.mark.parametrize("m", [1, 16])
def test_pdl_kernels_on_emulator_wait_before_x(m, seed, rng, plant):
    """Built for PDL, the gemv (M = 1) and Stream-K (M = 16) kernels run right on the emulator,
    which fails any thread that touches x, bias, the output or the workspace before its
    griddepcontrol.wait; a wait moved after the first x loads (gemv) or left out (Stream-K) is
    caught."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.kernels.planner import choose_fused_spec
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    prof = replace(H100, sms=4)
    w = rng.standard_normal((328, 512)) * 0.05
    qw = quantize(w, "uint4b8", 128, scale_dtype="float16")
    p = Problem(m, qw.n, qw.k, "float16", "uint4b8", 128)
    spec = replace(_spec(m=m) if m == 1 else choose_fused_spec(prof, p), pdl=True)
    assert isinstance(spec, GemvSpec) == (m == 1)
    pl = plan(prof, p, spec)
    x = rng.standard_normal((m, 512)).astype(np.float32)
    b = rng.standard_normal(328).astype(np.float32)
    ref = linear_reference(halves.round_to(x, "float16"), qw, halves.round_to(b, "float16"))
    check_output(
        emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30))),
        ref,
        "float16",
        what=f"M={m}",
        seed=seed,
        spec=spec,
    )
    if m == 1:
        x_first = "  if (n_batches > 0) {\n    load_x(0, kb++);\n    cross();\n  }\n"
        plant(
            "  grid_dep_wait();\n  grid_dep_launch();\n" + x_first,
            "  grid_dep_launch();\n" + x_first + "  grid_dep_wait();\n",
        )
    else:
        plant("  grid_dep_wait();\n", "")
    with pytest.raises(emu.EmuError, match="before griddepcontrol.wait"):
        emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))


@pytest.mark.slow
def test_pdl_spread_and_hybrid_plans_on_emulator(seed, rng):
    """The PDL builds of spread and hybrid plans (their first loads split around the wait, the
    run then crossing column blocks) give the right sums, with the emulator's wait check on."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.reference import check_output, linear_reference
    from jitmarlin.weights import halves
    from jitmarlin.weights.quant import quantize

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    for sms, n_out, k_in, spread in ((2, 424, 320, True), (4, 440, 512, 2), (5, 560, 960, 2)):
        prof = replace(H100, sms=sms)
        w = rng.standard_normal((n_out, k_in)) * 0.05
        for act, m in (("float16", 1), ("bfloat16", 5)):
            qw = quantize(w, "uint4b8", 64, scale_dtype=act)
            spec = replace(_spec("uint4b8", act, group=64, m=m, spread=spread, warps=4), pdl=True)
            pl = plan(prof, Problem(m, qw.n, qw.k, act, "uint4b8", 64), spec)
            x = rng.standard_normal((m, k_in)).astype(np.float32)
            out = emu.run_values(pl, x, qw, seed=int(rng.integers(1, 1 << 30)))
            check_output(
                out, linear_reference(halves.round_to(x, act), qw), act, what=f"{sms} SMs, M={m}", seed=seed, spec=spec
            )


# ---- GPU ---------------------------------------------------------------------------------------


def _gpu_sm80_native():
    if os.environ.get("JITMARLIN_EMULATE"):
        return False, False
    try:
        import cupy

        cc = int(cupy.cuda.Device(0).compute_capability)
    except Exception:
        return False, False
    return cc >= 80, cc >= 90


def _run(qw, m, act, spec, rng, bias=True, lda=None, seed=None):
    """tests/gpu_cases.py's check_forced with NaN past K in x's rows (the kernel must not read it):
    the output checked element by element against the float64 reference."""
    return check_forced(qw, m, act, spec, rng, bias=bias, lda=lda, pad=float("nan"), seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("qt", ALL_QTYPES)
def test_every_type_matches_reference(qt, seed, rng):
    sm80, sm90 = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import jitmarlin

    g = GROUP_OF.get(qt, 128)
    # out 328 (N padded to 384: six column blocks, the last one short); in_features short of the
    # padded K where the group allows; x rows strided past K, with poison there
    k_in = {-1: 1000, 16: 1008, 32: 992, 64: 960}.get(g, 1024)
    w = rng.standard_normal((328, k_in)) * 0.05
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
        for cb, cl, occ in ((1, 1, 1), (4, 1, 1), (8, 1, 1), (2, 2, 1), (1, 2, 1), (1, 1, 2)):
            if cl > 1 and not sm90:
                continue  # (clusters: sm_90+)
            for m in (1, 3, 8, 9, 16):
                spec = _spec(qt, act, cb, cl, group=g, m=m, occupancy=occ)
                _run(qw, m, act, spec, rng, bias=(m != 3), lda=qw.in_features + 24, seed=seed)


@pytest.mark.gpu
def test_long_k_ranges_and_planner_choice(seed, rng):
    sm80, _ = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import torch

    import jitmarlin
    from jitmarlin.reference import linear_reference

    # K = 14336 (8B down) at N = 1024: many batches a warp; the planner's own choice through linear()
    w = rng.standard_normal((1024, 14336)) * 0.02
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype=act)
        for m in (1, 8, 16):
            x = torch.randn(m, 14336, device="cuda", generator=gen).to(getattr(torch, act))
            y = jitmarlin.linear(x, qw)
            check_linear(y, linear_reference(x, qw, None, act), act, qw, m, seed=seed)
        spec = _spec("uint4b8", act, 2, 1)
        _run(qw, 2, act, spec, rng, seed=seed)


@pytest.mark.gpu
def test_act_order_through_linear(seed, rng):
    sm80, _ = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import cupy

    import jitmarlin
    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.reference import linear_reference
    from jitmarlin.weights.quant import from_codes

    # 96 column blocks: the gemv kernel on an H100 (checked below), x gathered into the weight's
    # column order before the launch
    g_idx = rng.permutation(np.repeat(np.arange(8), 128))
    qw = from_codes(
        "uint4b8", rng.integers(0, 16, (6144, 1024)), rng.random((8, 6144)) * 0.01 + 0.001, 128, g_idx=g_idx
    )
    prof = live_profile(0)
    for m in (1, 8):
        if prof.sms <= 132:
            assert isinstance(plan(prof, Problem(m, qw.n, qw.k, "float16", "uint4b8", 128)).spec, GemvSpec)
        x = cupy.asarray(rng.standard_normal((m, 1024)), dtype=cupy.float16)
        ref = linear_reference(x, qw, None, "float16")
        for i in range(2):  # the gather buffer is reused
            out = cupy.full((m, qw.out_features), cupy.nan, dtype=cupy.float16)  # poisoned
            y = jitmarlin.linear(x, qw, out=out)
            check_linear(y, ref, "float16", qw, m, what=f"M={m} call {i + 1}", seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("qt", LIGHT)
def test_spread_plans_match_reference(qt, seed, rng):
    """Spread plans on a layer with 6-7 column blocks a cluster (N = 25544: 400 column blocks, the
    last one short), so that warps' runs cross column blocks; K short of its padding."""
    sm80, sm90 = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import jitmarlin

    g = GROUP_OF.get(qt, 128)
    k_in = {16: 1008, 64: 960}.get(g, 1000 if g < 0 else 1024)
    w = rng.standard_normal((25544, k_in)) * 0.05
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
        for cl in (1, 2) if sm90 else (1,):
            for m in (1, 5, 8, 16):
                spec = _spec(qt, act, 1, cl, group=g, m=m, spread=True)
                _run(qw, m, act, spec, rng, bias=(m != 5), lda=qw.in_features + 8, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("qt", ALL_QTYPES)
def test_hybrid_plans_match_reference(qt, seed, rng):
    """Hybrid plans on this GPU: 1.25 x SMs column blocks + 1 (the last one short), so that G / R
    blocks share each column block past the grid; every quant type, K short of its padding where
    the group allows; every call twice (the
    second finds the workspace's slots cleared by the first); then the workspace holds no tag."""
    sm80, _ = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import cupy

    import jitmarlin
    from jitmarlin.kernels import launch  # the Stream-K / gemv workspaces (kernels/launch.py)

    sms = cupy.cuda.Device(0).attributes["MultiProcessorCount"]
    g = GROUP_OF.get(qt, 128)
    k_in = {16: 2032, 64: 1984}.get(g, 2000 if g < 0 else 4096)  # >= 2 batches a warp of its own column block
    w = rng.standard_normal(((sms + sms // 4 + 1) * 64 - 8, k_in)) * 0.05
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
        for m in (1, 5, 8):
            spec = _spec(qt, act, group=g, m=m, spread=2)
            for _ in range(2):
                _run(qw, m, act, spec, rng, bias=(m != 5), lda=qw.in_features + 8, seed=seed)
    for ws in launch._workspaces.values():
        assert not bool(((ws.tagged >> 32) != 0).any()), "tagged workspace slots left after the launches"


@pytest.mark.gpu
@pytest.mark.parametrize("qt", ALL_QTYPES)
def test_pair_plans_match_reference(qt, seed, rng):
    """Pair plans (two plain blocks a column block meeting in the workspace) on any sm_80+ GPU:
    6 column blocks (the last one short), 1, 2 and 4 a block, K short of its padding where the
    group allows, one and two token blocks; each call twice (the second finds the slots emptied by
    the first; run_forced checks that no tag is left)."""
    sm80, _ = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import jitmarlin

    g = GROUP_OF.get(qt, 128)
    k_in = {-1: 2000, 16: 2032, 32: 2016, 64: 1984}.get(g, 2048)
    w = rng.standard_normal((328, k_in)) * 0.05
    for act in ("float16", "bfloat16"):
        qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
        for cb in (1, 2, 4):
            for m in (1, 3, 8, 9, 16):
                spec = _spec(qt, act, cb, group=g, m=m, pair=True)
                for _ in range(2):
                    _run(qw, m, act, spec, rng, bias=(m != 3), lda=qw.in_features + 8, seed=seed)


@pytest.mark.gpu
def test_pair_plan_through_linear_and_a_cuda_graph(seed, rng):
    """linear() on Llama-3-8B's o projection (64 column blocks: a pair plan on H100), then the
    same captured in a CUDA graph and replayed with new x: every replay finds the slots emptied."""
    sm80, sm90 = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import torch

    import jitmarlin
    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.ops.linear import plan_for
    from jitmarlin.reference import linear_reference

    prof = live_profile(0)
    qw = jitmarlin.quantize(rng.standard_normal((4096, 4096)) * 0.02, "uint4b8", 128)
    if prof.cc == (9, 0) and prof.sms >= 128:
        assert plan_for(prof, 3, qw.n, qw.k).spec.pair
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for m in (1, 8):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.float16, generator=gen)
        y = jitmarlin.linear(x, qw)
        check_linear(y, linear_reference(x, qw, None, "float16"), "float16", qw, m, seed=seed)
    x = torch.randn(3, 4096, device="cuda", dtype=torch.float16, generator=gen)
    jitmarlin.linear(x, qw)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = jitmarlin.linear(x, qw)
    for i in range(3):
        x.copy_(torch.randn(x.shape, device="cuda", dtype=x.dtype, generator=gen))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check_linear(
            y, linear_reference(x, qw, None, "float16"), "float16", qw, 3, what=f"M=3 replay {i + 1}", seed=seed
        )


@pytest.mark.gpu
def test_hybrid_plan_replays_in_a_cuda_graph(seed, rng):
    """linear() on a layer the planner gives a hybrid plan, captured in a CUDA graph and replayed
    with new x each time: every replay finds the workspace's slots cleared by the one before."""
    sm80, _ = _gpu_sm80_native()
    if not sm80:
        pytest.skip("needs an sm_80+ GPU without JITMARLIN_EMULATE")
    import torch

    import jitmarlin
    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.ops.linear import plan_for
    from jitmarlin.reference import linear_reference

    prof = live_profile(0)
    n = (prof.sms + prof.sms // 4 + 1) * 64 - 8
    # zero points: the whole-column plan of two column blocks a block, which takes the hybrid's
    # place for symmetric codes (scaled sums), is not an option
    qw = jitmarlin.quantize(rng.standard_normal((n, 2048)) * 0.05, "uint4", 128)
    assert plan_for(prof, 5, qw.n, qw.k, qtype="uint4").spec.spread == 2
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(5, 2048, device="cuda", dtype=torch.float16, generator=gen)
    jitmarlin.linear(x, qw)  # warm-up: compile, upload, workspace
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = jitmarlin.linear(x, qw)
    for i in range(3):
        x.copy_(torch.randn(x.shape, device="cuda", dtype=x.dtype, generator=gen))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check_linear(
            y, linear_reference(x, qw, None, "float16"), "float16", qw, 5, what=f"M=5 replay {i + 1}", seed=seed
        )
