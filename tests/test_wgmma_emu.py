"""The Hopper warpgroup kernels on the CPU warp emulator: the dense wgmma kernel
(templates/wgmma.cu.j2) and the MoE wgmma kind (templates/moe_wgmma.cu.j2), against the float64
reference with poisoned outputs. The emulator performs each wgmma when a wait_group retires its
group, reading its A registers and the shared-memory operand its descriptor names (128-byte
swizzle) then, with its sums NaN in between; TMA boxes land on their mbarriers and clusters are
consecutive blocks (templates/ptx/emu.cuh, templates/mma/sm90_emu.cuh): layouts, swizzles,
pipelines, tensor maps, Stream-K and cluster exchanges run as written for sm_90a. Shapes are
small and the profiles have few SMs so that every plan kind (Stream-K, whole tiles, halves in
clusters, short row blocks) appears at sizes the emulator runs in seconds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jitmarlin import emu
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.moe import MoEProblem, plan_moe
from jitmarlin.kernels.moe.wgmma import wgmma_stage_spec
from jitmarlin.kernels.planner import ALL_QTYPES, choose_fused_spec, group_blocks, plan
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import KernelSpec
from jitmarlin.reference import ATOL_U_MOE, check_output, linear_reference, moe_reference
from jitmarlin.weights import halves
from jitmarlin.weights.moe import quantize_moe
from jitmarlin.weights.quant import quantize

pytestmark = [pytest.mark.slow, pytest.mark.skipif(emu.compiler() is None, reason="no C++ compiler for the emulator")]

H100 = get_profile("h100")
GROUP_OF = {"nvfp4": 16, "mxfp4": 32, "float8_e4m3fn": -1, "uint4": 64, "uint8": -1}


def _check_dense(rng, seed, m, n, k, act, qt, group, spec_of, sms, record=True):
    """spec_of(profile, problem) -> the kernel (None: the planner's), planned on an H100 profile
    with `sms` SMs, run on the emulator and checked element by element; returns the plan."""
    w = rng.standard_normal((n, k)) * 0.05
    qw = quantize(w, qt, group, scale_dtype=act)
    p = Problem(m, qw.n, qw.k, act, qt, group)
    prof = replace(H100, sms=sms)
    spec = spec_of(prof, p)
    pl = plan(prof, p) if spec is None else plan(prof, p, spec)
    assert pl.spec.wgmma, pl.spec.name
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = emu.run_values(pl, x, qw, seed=int(rng.integers(1, 1 << 30)))
    ref = linear_reference(halves.round_to(x, act), qw)
    check_output(out, ref, act, what=f"M={m} N={n} K={k} {pl.spec.name}", seed=seed, spec=pl.spec, record=record)
    return pl


def _tile(*args, **kw):
    return lambda prof, p: KernelSpec("sm90", p.qtype, p.act, group_blocks(p), *args, **kw)


@pytest.mark.parametrize(
    "tm,tn,stages,occ,m,act,group",
    [
        (4, 8, 4, 1, 77, "float16", 128),
        (4, 16, 2, 1, 64, "bfloat16", -1),
        (8, 16, 6, 1, 100, "float16", -1),
        (16, 8, 4, 1, 77, "bfloat16", 128),
        (1, 16, 6, 1, 30, "float16", 64),
        (2, 8, 4, 2, 40, "bfloat16", 128),
        (4, 16, 4, 2, 64, "float16", 128),
    ],
)
def test_wgmma_tiles_on_emulator(tm, tn, stages, occ, m, act, group, seed, rng):
    """Tiles of 16 to 256 tokens by 128 or 256 features, 2 to 6 stages, one and two blocks an SM,
    grouped and per-channel scales (N = 320: a partial feature tile; K = 576: 9 K tiles over 4
    SMs, split tiles)."""
    _check_dense(rng, seed, m, 320, 576, act, "uint4b8", group, _tile(tm, tn, 4, stages, occupancy=occ), 4)


@pytest.mark.parametrize("qt", ALL_QTYPES)
def test_wgmma_every_type_on_emulator(qt, seed, rng):
    act = "bfloat16" if ALL_QTYPES.index(qt) % 2 else "float16"
    _check_dense(rng, seed, 100, 320, 576, act, qt, GROUP_OF.get(qt, 128), _tile(8, 8, 4, 4), 4)


@pytest.mark.parametrize(
    "m,n,args,kw,sms",
    [
        (200, 1024, (16, 8, 4, 4), dict(tail=True), 4),  # a short last row block: its own boxes
        (17, 1024, (2, 8, 4, 4), dict(occupancy=2, tail=True), 4),
        (200, 1024, (16, 8, 4, 4), dict(cluster=2, tail=True), 16),  # halves in clusters of two
        (300, 1024, (16, 8, 4, 4), dict(cluster=2), 32),
        (256, 1536, (8, 12, 4, 6), dict(threads=384), 4),  # 128 x 192: three warpgroups
        (200, 1536, (8, 12, 4, 5), dict(threads=384, cluster=2, tail=True), 32),
    ],
)
def test_wgmma_short_blocks_clusters_and_wide_tiles_on_emulator(m, n, args, kw, sms, seed, rng):
    _check_dense(rng, seed, m, n, 512, "float16", "uint4b8", 128, _tile(*args, **kw), sms)


@pytest.mark.parametrize("m,n,k,sms", [(64, 1024, 2048, 4), (300, 1024, 1024, 6), (256, 2048, 512, 16)])
def test_wgmma_planner_plans_on_emulator(m, n, k, sms, seed, rng):
    """The planner's own wgmma plan on a few-SM H100 profile: Stream-K over many K steps, a short
    row block, whole tiles a block."""
    _check_dense(rng, seed, m, n, k, "bfloat16", "uint4b8", 128, lambda prof, p: choose_fused_spec(prof, p), sms)


def test_wgmma_pdl_kernel_waits_before_x_on_emulator(seed, rng, monkeypatch):
    """Built for programmatic dependent launch, the wgmma kernel runs right on the emulator, which
    fails any thread that touches x, bias, the output or the workspace before griddepcontrol.wait;
    with the wait taken out that is caught."""
    pl = _check_dense(rng, seed, 77, 320, 576, "float16", "uint4b8", 128, _tile(8, 8, 4, 4, pdl=True), 4)
    assert pl.spec.pdl
    _planted(monkeypatch, "  grid_dep_wait();\n  grid_dep_launch();\n", "  grid_dep_launch();\n")
    with pytest.raises(emu.EmuError, match="before griddepcontrol.wait"):
        _check_dense(rng, seed, 77, 320, 576, "float16", "uint4b8", 128, _tile(8, 8, 4, 4, pdl=True), 4, record=False)


def _planted(monkeypatch, good, bad):
    """emu.render with `good` replaced by `bad` in the dense wgmma kernel's source (asserted present)."""
    real = emu.render

    def render(spec, target="cuda"):
        src = real(spec, target)
        if getattr(spec, "wgmma", False) and not hasattr(spec, "stage"):
            assert good in src
            src = src.replace(good, bad)
        return src

    monkeypatch.setattr(emu, "render", render)


@pytest.mark.parametrize(
    "good,bad",
    [
        # the overlapping kernel dequantises into the A set of a group still in flight
        ("wgmma_wait<1>();       // the group on `prev` is done: the set is free", "wgmma_wait<2>();"),
        # the epilogue reads the sums before the last group retires
        (
            "      wgmma_wait<0>();\n      JM_UNROLL\n      for (int s = 0; s < MW; ++s)",
            "      JM_UNROLL\n      for (int s = 0; s < MW; ++s)",
        ),
    ],
    ids=["a-set-reused-in-flight", "sums-read-in-flight"],
)
def test_emulator_catches_wgmma_hazards(good, bad, rng, monkeypatch):
    """The emulated wgmma reads its A registers and B stage when its group retires and leaves its
    sums NaN until then, so a kernel that reuses a fragment set or reads the sums too early fails
    (the latter also exits with its last group in flight, which the emulator refuses)."""
    _planted(monkeypatch, good, bad)
    with pytest.raises((AssertionError, emu.EmuError)):
        _check_dense(rng, None, 77, 320, 576, "float16", "uint4b8", 128, _tile(8, 8, 4, 4), 4, record=False)


# ---- the MoE wgmma kind ------------------------------------------------------------------------


def _moe_weights(rng, e, hidden, inter, qt, group):
    w13 = quantize_moe(
        rng.standard_normal((e, 2 * inter, hidden)) * 0.1,
        qt,
        group,
        gated=True,
        bias=rng.standard_normal((e, 2 * inter)) * 0.5,
    )
    w2 = quantize_moe(
        rng.standard_normal((e, hidden, inter)) * 0.1, qt, group, bias=rng.standard_normal((e, hidden)) * 0.5
    )
    return w13, w2


def _moe_routing(rng, t, k, e, routing):
    """uniform; skewed (half the tokens put one slot on expert 0); empty (half the experts get
    nothing)."""
    used = e // 2 if routing == "empty" else e
    ids = np.stack([rng.choice(used, k, replace=False) for _ in range(t)]).astype(np.int32)
    if routing == "skewed":
        for i in range(0, t, 2):
            if 0 not in ids[i]:
                ids[i, 0] = 0
    return ids, (rng.random((t, k)) + 0.05).astype(np.float32)


def _check_moe(
    rng, seed, t, k, e, qt, group, act, routing="uniform", *, hidden=256, inter=448, record=True, **overrides
):
    """The wgmma kind's plan on the emulator against the float64 per-expert reference; returns the
    plan. With no overrides the planner's plan as it is; layout overrides (sorted_h, sorted_x,
    tile_major) name the layouts in full, any not named off; tm= other row blocks (256 rows: by
    override only); splits= the down stage's K splits."""
    w13, w2 = _moe_weights(rng, e, hidden, inter, qt, group)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, inter, hidden, act, qt, group)
    splits = overrides.pop("splits", 1)
    tm = overrides.pop("tm", None)
    base = plan_moe(H100, p, wgmma=True)
    if tm is not None:
        base = plan_moe(
            H100,
            p,
            up=wgmma_stage_spec(H100, p.dense("up"), tm, "up", p.activation),
            down=wgmma_stage_spec(H100, p.dense("down"), tm, "down", ""),
        )
    up, down = base.up, base.down
    if overrides:
        lay = {f: overrides.pop(f, False) for f in ("sorted_h", "sorted_x", "tile_major")}
        assert not overrides, overrides
        up = replace(up, **lay)
        down = replace(down, sorted_h=lay["sorted_h"], tile_major=lay["tile_major"])  # (x: the up stage's only)
    pl = plan_moe(H100, p, up=up, down=down, splits=splits)
    assert pl.wgmma
    ids, tw = _moe_routing(rng, t, k, e, routing)
    x = rng.standard_normal((t, hidden))
    out = emu.run_moe(pl, x, w13, w2, tw, ids, seed=int(rng.integers(1, 1 << 30)))
    ref = moe_reference(halves.from_bits(halves.to_bits(x, act), act), w13, w2, tw, ids, act=act)
    what = f"{pl.up.name} / {pl.down.name} splits={splits} {routing}"
    check_output(out, ref, act, what=what, seed=seed, family="moe", atol_u=ATOL_U_MOE, record=record)
    return pl


# (T, k, E): 16 rows an expert (32-row blocks, two-slab w13 tiles), 50 (64-row blocks), 80
# (128-row blocks)
ROWS32, ROWS64, ROWS128, ROWS256 = (64, 2, 8), (100, 2, 4), (160, 2, 4), (300, 2, 4)


@pytest.mark.parametrize(
    "shape,tm,qt,group,act",
    [
        (ROWS32, 2, "uint4b8", 128, "float16"),
        (ROWS64, 4, "uint4", 64, "bfloat16"),
        (ROWS128, 8, "mxfp4", 32, "bfloat16"),
        (ROWS64, 4, "float8_e4m3fn", 128, "float16"),
        (ROWS32, 2, "nvfp4", 16, "float16"),
        (ROWS64, 4, "uint8b128", -1, "bfloat16"),
    ],
)
def test_moe_wgmma_on_emulator(shape, tm, qt, group, act, seed, rng):
    pl = _check_moe(rng, seed, *shape, qt, group, act)
    assert pl.up.tm == pl.down.tm == tm


@pytest.mark.parametrize(
    "shape,overrides,routing,act",
    [
        (ROWS32, dict(sorted_h=True), "uniform", "float16"),
        (ROWS64, dict(sorted_h=True), "skewed", "bfloat16"),
        (ROWS128, dict(sorted_h=True, splits=3), "empty", "float16"),
        (ROWS128, dict(tile_major=True), "skewed", "bfloat16"),
        (ROWS128, dict(tile_major=True, splits=3), "empty", "float16"),
        (ROWS128, dict(sorted_h=True, tile_major=True), "skewed", "bfloat16"),
        (ROWS32, dict(sorted_x=True), "uniform", "float16"),
        (ROWS64, dict(sorted_x=True, sorted_h=True), "skewed", "bfloat16"),
        (ROWS128, dict(sorted_x=True, tile_major=True, splits=2), "empty", "float16"),
        (ROWS256, dict(tm=16), "uniform", "float16"),
        (ROWS256, dict(tm=16, sorted_x=True, sorted_h=True, tile_major=True), "skewed", "bfloat16"),
    ],
)
def test_moe_wgmma_sorted_h_and_tile_major_on_emulator(shape, overrides, routing, act, seed, rng):
    """H in the aligned list's row order with the w2 stage's H by TMA boxes (sorted_h), x copied
    into that order first and read by the up stage the same way (sorted_x), and the
    column-tile-major block order (tile_major), alone and together, with w2 K splits, under a
    skewed routing and one where half the experts get nothing (w2 K = 448: its last box reads
    columns past k_in as zeros)."""
    t, k, _ = shape
    pl = _check_moe(rng, seed, *shape, "uint4b8", 128, act, routing, **dict(overrides))
    assert pl.h_rows == (pl.sorted_rows if overrides.get("sorted_h") else t * k)
    assert pl.block_m == 16 * overrides.get("tm", pl.up.tm)


def test_emulator_catches_a_misplaced_h_row(rng, monkeypatch):
    """A planted slip in the up stage's sorted_h epilogue (row r of a block written at row r ^ 1)
    leaves rows of H unwritten or swapped: the emulated down stage reads them and the check fails."""
    real = emu.render
    good = "const size_t orow = (size_t)mb * TILE_M + r;"

    def planted(spec, target="cuda"):
        src = real(spec, target)
        if getattr(spec, "sorted_h", False) and getattr(spec, "gated", False):
            assert good in src
            src = src.replace(good, "const size_t orow = (size_t)mb * TILE_M + (r ^ 1);")
        return src

    monkeypatch.setattr(emu, "render", planted)
    with pytest.raises(AssertionError):
        _check_moe(rng, None, *ROWS32, "uint4b8", 128, "float16", sorted_h=True, record=False)
