"""The MoE family's kernels on the CPU warp emulator: the alignment and combine kernels and both
grouped GEMMs, for every quant type and code path, against the float64 reference
(jitmarlin.reference.moe_reference), with poisoned outputs and routings that leave experts empty,
put every token on one expert, or send half the experts to another GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_moe_gpu import _direct_routing  # the GPU tests' T = 1 routings (expert_map, duplicates)

from jitmarlin import emu
from jitmarlin.errors import InputError
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.moe import MoEGemvSpec, MoEProblem, MoERouteSpec, MoESpec, plan_moe
from jitmarlin.kernels.moe.plan import max_blocks
from jitmarlin.kernels.render import render
from jitmarlin.kernels.spec import spec_from_canonical
from jitmarlin.ops.moe import moe_problem
from jitmarlin.reference import ATOL_U_MOE, check_output, moe_reference
from jitmarlin.weights import halves
from jitmarlin.weights.moe import quantize_moe

pytestmark = [pytest.mark.slow, pytest.mark.skipif(emu.compiler() is None, reason="no C++ compiler for the emulator")]


def _problem(w13, w2, t, k, act, activation="silu"):
    return moe_problem(w13, w2, act, t, k, activation)


def _weights(rng, e, hidden, inter, qtype, group, bias=False):
    w13 = quantize_moe(
        rng.standard_normal((e, 2 * inter, hidden)) * 0.1,
        qtype,
        group,
        gated=True,
        bias=rng.standard_normal((e, 2 * inter)) * 0.5 if bias else None,
    )
    w2 = quantize_moe(
        rng.standard_normal((e, hidden, inter)) * 0.1,
        qtype,
        group,
        bias=rng.standard_normal((e, hidden)) * 0.5 if bias else None,
    )
    return w13, w2


def _routing(rng, t, k, e):
    ids = np.stack([rng.choice(e, k, replace=False) for _ in range(t)]).astype(np.int32)
    return ids, (rng.random((t, k)) + 0.05).astype(np.float32)


def _run_and_check(
    rng,
    seed,
    profile,
    w13,
    w2,
    t,
    ids,
    tw,
    act,
    *,
    activation="silu",
    expert_map=None,
    on_input=False,
    what="",
    record=True,
    tm=None,
    direct=None,
    pdl=False,
):
    """tm: force the mma.sync kernels with tm m16 blocks a tile (the planner takes the GEMV kind
    for decode on sm_80+); direct: the GEMV kind without the alignment launch (T = 1); pdl: the
    GEMV kind built for programmatic dependent launch (the emulator checks each wait)."""
    k = ids.shape[1]
    plan = plan_moe(get_profile(profile), _problem(w13, w2, t, k, act, activation), tm=tm, direct=direct, pdl=pdl)
    x = rng.standard_normal((t, w13.in_features))
    out = emu.run_moe(
        plan, x, w13, w2, tw, ids, expert_map=expert_map, apply_router_weight_on_input=on_input, seed=seed
    )
    xr = halves.from_bits(halves.to_bits(x, act), act)
    ref = moe_reference(
        xr,
        w13,
        w2,
        tw,
        ids,
        activation=activation,
        expert_map=expert_map,
        apply_router_weight_on_input=on_input,
        act=act,
    )
    check_output(
        out,
        ref,
        act,
        what=what or f"moe {profile} {w13.qtype} {act}",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
        record=record,
    )
    return plan


CASES = [  # profile, qtype, group, act
    ("h100", "uint4b8", 128, "float16"),
    ("h100", "uint4b8", 64, "bfloat16"),
    ("h100", "uint4", 64, "float16"),
    ("h100", "uint4", -1, "bfloat16"),
    ("h100", "uint8b128", -1, "float16"),
    ("h100", "uint8b128", 32, "bfloat16"),
    ("h100", "float8_e4m3fn", 128, "float16"),
    ("h100", "float8_e4m3fn", -1, "bfloat16"),
    ("h100", "nvfp4", 16, "float16"),
    ("h100", "mxfp4", 32, "bfloat16"),
    ("rtx-pro-6000", "mxfp4", 32, "float16"),
    ("t4", "uint4b8", 128, "float16"),
    ("t4", "uint8b128", 32, "float16"),
    ("v100", "uint4", -1, "float16"),
    ("v100", "uint4b8", 64, "float16"),
]


@pytest.mark.parametrize("profile,qtype,group,act", CASES)
def test_moe_types_and_paths(rng, seed, profile, qtype, group, act):
    """Every quant type and code path; hidden 136 and I 72 leave both weights with padded
    columns and rows (N, K not multiples of the tiles). 14 pairs on 4 experts: the GEMV kind on
    sm_80+ (the planner's decode choice), the mma.sync kernels on sm_70 / sm_75."""
    e, t, k = 4, 7, 2
    w13, w2 = _weights(rng, e, 136, 72, qtype, group)
    ids, tw = _routing(rng, t, k, e)
    plan = _run_and_check(rng, seed, profile, w13, w2, t, ids, tw, act)
    assert isinstance(plan.up, MoEGemvSpec) == (get_profile(profile).path == "sm80")


MMA_CASES = [
    ("uint4b8", 128, "float16"),
    ("uint4", 64, "bfloat16"),
    ("float8_e4m3fn", -1, "bfloat16"),
    ("nvfp4", 16, "float16"),
    ("uint8b128", 32, "float16"),
]


@pytest.mark.parametrize("qtype,group,act", MMA_CASES)
def test_moe_mma_kernels_at_decode(rng, seed, qtype, group, act):
    """The sm80 mma.sync grouped kernels on the same decode shapes (forced: tm=1)."""
    e, t, k = 4, 7, 2
    w13, w2 = _weights(rng, e, 136, 72, qtype, group)
    ids, tw = _routing(rng, t, k, e)
    plan = _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, act, tm=1)
    assert isinstance(plan.up, MoESpec) and plan.block_m == 16


GEMV_TILES = [  # up (warps, kwarps, unroll), down (...), qtype, group: column tails, K splits of 1..16 warps
    ((16, 4, 4), (16, 16, 2), "uint4b8", 128),
    ((8, 1, 2), (4, 2, 1), "uint4", -1),
    ((8, 8, 4), (16, 2, 2), "float8_e4m3fn", -1),  # (16 warps: 8-bit batches of 2)
    ((4, 1, 1), (8, 4, 2), "mxfp4", 32),
    ((16, 8, 2), (8, 2, 4), "uint8b128", 64),
    ((8, 2, 4), (16, 4, 1), "nvfp4", 16),
]


@pytest.mark.parametrize(
    "qtype,group,act,routing",
    [
        ("uint4b8", 128, "float16", "uniform"),
        ("mxfp4", 32, "bfloat16", "skewed"),
        ("uint4", 64, "float16", "empty"),
        ("uint8b128", -1, "bfloat16", "uniform"),
        ("float8_e4m3fn", 128, "float16", "skewed"),
        ("nvfp4", 16, "bfloat16", "uniform"),
    ],
)
def test_moe_gemv_sixteen_rows(rng, seed, qtype, group, act, routing):
    """The GEMV kind in blocks of 16 routed rows (plan.gemv_rows16: two token blocks a block, each
    dequantised weight used twice), both stages, against the reference: 16 rows an expert on
    average, one expert with more than 16 (several row blocks), or half the experts empty."""
    from jitmarlin.kernels.moe.plan import gemv_rows16

    e, t, k = 8, 64, 2
    w13, w2 = _weights(rng, e, 256, 448, qtype, group, bias=True)
    ids, tw = _routing(rng, t, k, e if routing != "empty" else e // 2)
    if routing == "skewed":
        ids[::2, 0] = np.where(ids[::2, 1] == 0, ids[::2, 0], 0)
    prof = get_profile("h100")
    problem = _problem(w13, w2, t, k, act)
    g = plan_moe(prof, problem, gemv=True)
    plan = plan_moe(prof, problem, up=gemv_rows16(g.up), down=gemv_rows16(g.down))
    assert plan.block_m == 16 and plan.up.rows == plan.down.rows == 16
    x = rng.standard_normal((t, 256))
    out = emu.run_moe(plan, x, w13, w2, tw, ids, seed=seed)
    xr = halves.from_bits(halves.to_bits(x, act), act)
    check_output(
        out,
        moe_reference(xr, w13, w2, tw, ids, act=act),
        act,
        what=f"{plan.up.name} / {plan.down.name} {routing}",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
    )


@pytest.mark.parametrize("up_t,down_t,qtype,group", GEMV_TILES)
def test_moe_gemv_tiles(rng, seed, up_t, down_t, qtype, group):
    """MoEGemvSpec tiles other than the planner's: several column blocks a block with a partial
    last group (N = 320 and 192: 5 and 3 column blocks), K runs of 1..16 warps, batches of 1, 2,
    4 k16 rows, scale on the sums and on the weights; skewed routing (expert 1 gets > 8 rows:
    several row blocks)."""
    e, t, k = 4, 9, 2
    w13, w2 = _weights(rng, e, 192, 160, qtype, group, bias=True)
    ids, tw = _routing(rng, t, k, e)
    ids[:6, 0] = 1
    ids[:6, 1] = np.where(ids[:6, 1] == 1, 2, ids[:6, 1])
    prof = get_profile("h100")
    problem = _problem(w13, w2, t, k, "bfloat16")
    up = MoEGemvSpec("sm80", qtype, "bfloat16", plan_moe(prof, problem).up.group_blocks, *up_t, "up", "silu")
    down = MoEGemvSpec("sm80", qtype, "bfloat16", up.group_blocks, *down_t, "down", "")
    plan = plan_moe(prof, problem, up=up, down=down)
    assert (plan.up, plan.down, plan.block_m) == (up, down, 8)
    x = rng.standard_normal((t, 192))
    out = emu.run_moe(plan, x, w13, w2, tw, ids, seed=seed)
    xr = halves.from_bits(halves.to_bits(x, "bfloat16"), "bfloat16")
    check_output(
        out,
        moe_reference(xr, w13, w2, tw, ids, act="bfloat16"),
        "bfloat16",
        what=f"{up.name} + {down.name}",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
    )


@pytest.mark.parametrize("activation", ["silu", "gelu", "swigluoai"])
def test_moe_activations_with_bias(rng, seed, activation):
    """The fused gated activations, with w13 and w2 biases (gpt-oss's swigluoai carries both)."""
    e, t, k = 3, 5, 2
    w13, w2 = _weights(rng, e, 128, 64, "mxfp4", 32, bias=True)
    ids, tw = _routing(rng, t, k, e)
    _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, "bfloat16", activation=activation)


def test_moe_skewed_and_empty_experts(rng, seed):
    """All tokens on expert 2 (and slot 1 on expert 5): 6 of 8 experts get nothing; enough rows on
    one expert for the planner's larger row tiles."""
    e, t, k = 8, 40, 2
    w13, w2 = _weights(rng, e, 128, 64, "uint4b8", 128)
    ids = np.tile(np.array([[2, 5]], dtype=np.int32), (t, 1))
    tw = (rng.random((t, k)) + 0.05).astype(np.float32)
    plan = _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, "float16")
    sorted_ids, blk, rows = emu.run_moe_align(plan, ids, seed=seed)
    assert rows == 2 * -(-t // plan.block_m) * plan.block_m
    assert set(blk[: rows // plan.block_m].tolist()) == {2, 5}


def test_moe_many_tokens_larger_tiles(rng, seed):
    """T = 70, k = 4 on 8 experts: 35 rows an expert on average, row tiles of 64."""
    e, t, k = 8, 70, 4
    w13, w2 = _weights(rng, e, 128, 64, "uint4", 64)
    ids, tw = _routing(rng, t, k, e)
    plan = _run_and_check(rng, seed, "a100", w13, w2, t, ids, tw, "float16")  # h100 takes the wgmma kind here
    assert plan.up.tm == 4 and plan.block_m == 64


def test_moe_expert_map_half_absent(rng, seed):
    """Expert parallelism: 8 global experts, the odd ones on this GPU (local 0..3); pairs routed to
    the others add nothing, and ids outside the map are dropped."""
    e_global, t, k = 8, 9, 3
    w13, w2 = _weights(rng, 4, 128, 64, "uint4b8", 64)
    ids, tw = _routing(rng, t, k, e_global)
    ids[0, 0] = 11  # outside the map
    emap = np.full(e_global, -1, dtype=np.int32)
    emap[1::2] = np.arange(4, dtype=np.int32)
    _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, "float16", expert_map=emap)


def test_moe_router_weight_on_input(rng, seed):
    e, t, k = 4, 6, 1
    w13, w2 = _weights(rng, e, 128, 64, "uint4b8", 128, bias=True)
    ids, tw = _routing(rng, t, k, e)
    _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, "float16", on_input=True)


def test_moe_align_lists_every_pair_once(rng, seed):
    """The aligned list holds every local pair exactly once, grouped by expert in whole blocks,
    padding (= the pair count) elsewhere; the block experts follow; nothing else is written."""
    e, t, k = 6, 33, 3
    w13, w2 = _weights(rng, e, 64, 64, "uint4b8", 64)
    ids, _ = _routing(rng, t, k, e)
    ids[ids == 4] = 3  # expert 4 gets no pairs
    plan = plan_moe(get_profile("h100"), _problem(w13, w2, t, k, "float16"))
    sorted_ids, blk, rows = emu.run_moe_align(plan, ids, seed=seed)
    pairs = t * k
    bm = plan.block_m
    assert rows % bm == 0 and rows <= plan.sorted_rows
    real = sorted_ids[sorted_ids < pairs]
    assert sorted(real.tolist()) == list(range(pairs))
    assert np.all(sorted_ids[:rows][sorted_ids[:rows] >= pairs] == pairs)
    assert np.all(sorted_ids[rows:] == pairs)
    flat = ids.reshape(-1)
    for b in range(rows // bm):
        members = sorted_ids[b * bm : (b + 1) * bm]
        members = members[members < pairs]
        assert members.size and np.all(flat[members] == blk[b])
    assert np.all(blk[rows // bm :] == -1)
    assert 4 not in blk.tolist()


def test_moe_combine_sums_in_slot_order(rng, seed):
    """The combine kernel: each token's k rows summed in fp32 and rounded once; pairs whose expert
    is absent contribute nothing (their rows are poison, so reading one would show)."""
    e, t, k = 4, 5, 3
    w13, w2 = _weights(rng, e, 64, 64, "uint4b8", 64)
    plan = plan_moe(get_profile("h100"), _problem(w13, w2, t, k, "bfloat16"))
    ids, _ = _routing(rng, t, k, e)
    emap = np.array([0, -1, 2, 3], dtype=np.int32)  # expert 1 on another GPU
    y = rng.standard_normal((t * k, 64))
    yb = halves.to_bits(y, "bfloat16")
    yb[(ids.reshape(-1) == 1)] = 0xFFFF
    out = halves.from_bits(emu.run_moe_combine(plan, yb, ids, emap, seed=seed), "bfloat16")
    yv = halves.from_bits(yb, "bfloat16").astype(np.float64).reshape(t, k, 64)
    keep = (ids != 1)[:, :, None]
    want = halves.from_bits(halves.to_bits(np.where(keep, yv, 0).sum(1).astype(np.float32), "bfloat16"), "bfloat16")
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(
    "kind,old,new",
    [
        ("mma", "const int4* Be = B + (size_t)e *", "const int4* Be = B + (size_t)0 *"),
        ("gemv", "const int4* bp = B + ((size_t)e * rows", "const int4* bp = B + ((size_t)0 * rows"),
        (
            "gemv",
            "*reinterpret_cast<uint2*>(C + (((size_t)p * n_out + col) >> 1)) =",  # one row of 8 unwritten
            "if (row != 0) *reinterpret_cast<uint2*>(C + (((size_t)p * n_out + col) >> 1)) =",
        ),
    ],
)
def test_checker_catches_wrong_moe_expert(rng, seed, monkeypatch, kind, old, new):
    """Planted bugs fail the check: every block reads expert 0's weights (both kinds); the GEMV
    down stage leaves one routed row of each block unwritten (poisoned)."""
    real = emu.render
    cls = MoESpec if kind == "mma" else MoEGemvSpec

    def planted(spec, target="cuda"):
        src = real(spec, target)
        if isinstance(spec, cls) and (spec.stage == "down" or "(size_t)e" in old):
            assert old in src
            src = src.replace(old, new)
        return src

    monkeypatch.setattr(emu, "render", planted)
    e, t, k = 4, 6, 2
    w13, w2 = _weights(rng, e, 128, 64, "uint4b8", 64)
    ids, tw = _routing(rng, t, k, e)
    with pytest.raises(AssertionError):
        _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, "float16", record=False, tm=1 if kind == "mma" else None)


DIRECT_CASES = [  # E local, k, qtype, group, act, expert_map (global 2E, odd ids here), duplicated expert
    (8, 1, "uint4b8", 128, "float16", False, False),
    (8, 1, "uint4b8", 64, "bfloat16", True, False),
    (8, 2, "uint4b8", 128, "bfloat16", False, True),
    (8, 2, "mxfp4", 32, "float16", True, False),
    (64, 8, "uint4b8", 128, "float16", True, True),
    (64, 8, "uint4b8", 64, "bfloat16", False, False),
    (64, 8, "mxfp4", 32, "bfloat16", True, True),
    (64, 2, "uint8b128", -1, "float16", False, True),
    (8, 8, "float8_e4m3fn", 128, "bfloat16", True, True),
]


@pytest.mark.parametrize("e,k,qtype,group,act,emap,dup", DIRECT_CASES)
def test_moe_gemv_direct_at_one_token(rng, seed, monkeypatch, e, k, qtype, group, act, emap, dup):
    """plan_moe(direct=True) at T = 1: no alignment kernel (run_moe_align must not be called); the
    GEMV kernels read each row block's pair (= the block) and expert from topk_ids through
    expert_map. With half the experts on another GPU (and, at k >= 2, one id outside the map) and
    a duplicated expert in the top-k (two blocks streaming the same expert); E = 8 with padded
    columns and rows (hidden 136, I 72)."""
    hidden, inter = (136, 72) if e == 8 else (128, 64)
    w13, w2 = _weights(rng, e, hidden, inter, qtype, group, bias=qtype == "mxfp4")
    ids, tw, expert_map = _direct_routing(rng, k, e, emap, dup)
    if emap and k >= 4:
        ids[0, 2] = 2 * (ids[0, 2] // 2)  # an even id: on another GPU
    monkeypatch.setattr(emu, "run_moe_align", lambda *a, **kw: pytest.fail("a direct plan ran the alignment"))
    plan = _run_and_check(
        rng, seed, "h100", w13, w2, 1, ids, tw, act, expert_map=expert_map, direct=True, what=f"direct {ids.tolist()}"
    )
    assert plan.direct and plan.up.direct and plan.down.direct and plan.max_blocks == k
    assert plan.grid_up == k * -(-w13.n // plan.up.tile_n)


def test_moe_gemv_direct_router_weight_on_input(rng, seed):
    e, k = 8, 1
    w13, w2 = _weights(rng, e, 128, 64, "uint4b8", 128, bias=True)
    ids, tw = _routing(rng, 1, k, e)
    _run_and_check(rng, seed, "h100", w13, w2, 1, ids, tw, "float16", on_input=True, direct=True)


def test_moe_gemv_direct_planted_bug_caught(rng, seed, monkeypatch):
    """The direct check sees a wrong row: every block taking pair 0's expert fails."""
    real = emu.render

    def planted(spec, target="cuda"):
        src = real(spec, target)
        if isinstance(spec, MoEGemvSpec) and spec.direct and spec.stage == "down":
            old = "local_expert(ids, expert_map, mb, n_global, n_local)"
            assert old in src
            src = src.replace(old, "local_expert(ids, expert_map, 0, n_global, n_local)")
        return src

    monkeypatch.setattr(emu, "render", planted)
    w13, w2 = _weights(rng, 8, 128, 64, "uint4b8", 128)
    ids, tw = _routing(rng, 1, 2, 8)
    with pytest.raises(AssertionError):
        _run_and_check(rng, seed, "h100", w13, w2, 1, ids, tw, "float16", direct=True, record=False)


@pytest.mark.parametrize(
    "t,k,e,qtype,group,act",
    [(1, 8, 64, "uint4b8", 128, "bfloat16"), (1, 2, 8, "mxfp4", 32, "float16"), (5, 4, 16, "uint4", 64, "float16")],
)
def test_moe_gemv_pdl(rng, seed, t, k, e, qtype, group, act):
    """plan_moe(pdl=True): the GEMV kind with the w2 GEMV and the combine built for programmatic
    dependent launch, direct at T = 1 and sorted at T = 5, against the reference; the emulator
    fails any read of H, Y or the output (and any write of Y or the output) before the kernel's
    griddepcontrol.wait."""
    w13, w2 = _weights(rng, e, 128, 64, qtype, group, bias=qtype == "mxfp4")
    ids, tw = _routing(rng, t, k, e)
    plan = _run_and_check(rng, seed, "h100", w13, w2, t, ids, tw, act, pdl=True, what=f"pdl T={t} {qtype}")
    assert plan.pdl and plan.up.pdl and plan.route.pdl and plan.direct == (t == 1)


def test_moe_gemv_pdl_early_read_caught(rng, seed, monkeypatch):
    """The emulator's wait check sees a w2 GEMV that reads H before griddepcontrol.wait (the wait
    moved after the K loop)."""
    real = emu.render

    def planted(spec, target="cuda"):
        src = real(spec, target)
        if isinstance(spec, MoEGemvSpec) and spec.pdl and spec.stage == "down":
            assert src.count("grid_dep_wait();") == 1
            src = src.replace("  grid_dep_wait();\n", "", 1).replace(
                "  grid_dep_launch();", "  grid_dep_wait();\n  grid_dep_launch();", 1
            )
        return src

    monkeypatch.setattr(emu, "render", planted)
    w13, w2 = _weights(rng, 8, 128, 64, "uint4b8", 128)
    ids, tw = _routing(rng, 1, 2, 8)
    with pytest.raises(Exception, match="before griddepcontrol.wait"):
        _run_and_check(rng, seed, "h100", w13, w2, 1, ids, tw, "float16", pdl=True, record=False)


# ---- plans, specs, sources (no emulator runs) ---------------------------------------------------


def test_moe_specs_round_trip_and_render():
    w13, w2 = _weights(np.random.default_rng(0), 2, 64, 64, "uint4b8", 64)
    for profile in ("v100", "t4", "a100", "h100", "rtx-pro-6000"):
        act = "float16"
        plan = plan_moe(get_profile(profile), _problem(w13, w2, 3, 2, act))
        for spec in (plan.route, plan.up, plan.down):
            assert spec_from_canonical(spec.canonical()) == spec
            src = render(spec)
            assert spec.name in src
            if not isinstance(spec, MoERouteSpec):
                assert spec.smem_bytes() <= get_profile(profile).smem_per_block


def test_moe_plan_grid_covers_worst_routing():
    """max_blocks bounds the aligned rows of any routing (checked by brute force on small cases)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        e, pairs, bm = int(rng.integers(1, 9)), int(rng.integers(1, 80)), int(rng.choice([8, 16, 32, 64]))
        counts = np.bincount(rng.integers(0, e, pairs), minlength=e)
        need = int(sum(-(-c // bm) for c in counts))
        assert need <= max_blocks(pairs, e, bm)


def test_moe_plan_refusals():
    w13, w2 = _weights(np.random.default_rng(0), 2, 64, 64, "uint4b8", 64)
    with pytest.raises(InputError, match="activation"):
        plan_moe(get_profile("h100"), _problem(w13, w2, 3, 2, "float16", "relu"))
    with pytest.raises(Exception, match="bfloat16"):
        plan_moe(get_profile("t4"), _problem(w13, w2, 3, 2, "bfloat16"))


@pytest.mark.parametrize("splits,qtype,group", [(2, "uint4b8", 64), (3, "uint4", 64), (4, "float8_e4m3fn", -1)])
def test_moe_down_k_splits(rng, seed, splits, qtype, group):
    """The down GEMM split over K (fp32 partial sums, bias once, added by the combine kernel in a
    fixed order), with w2 biases and a split count that does not divide the K tiles."""
    from dataclasses import replace

    e, t, k = 4, 5, 2
    w13, w2 = _weights(rng, e, 128, 320, qtype, group, bias=True)
    ids, tw = _routing(rng, t, k, e)
    plan = replace(plan_moe(get_profile("h100"), _problem(w13, w2, t, k, "float16"), tm=1), splits=splits)
    assert (w2.k // plan.down.tile_k) % splits or splits == 2
    x = rng.standard_normal((t, 128))
    out = emu.run_moe(plan, x, w13, w2, tw, ids, seed=seed)
    xr = halves.from_bits(halves.to_bits(x, "float16"), "float16")
    check_output(
        out,
        moe_reference(xr, w13, w2, tw, ids, act="float16"),
        "float16",
        what=f"moe splits={splits}",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
    )


def test_moe_decode_plans_split_down():
    """Mixtral decode on an H100: 2 experts x 32 column tiles would leave most SMs idle. The
    mma.sync plan splits K; the GEMV plan (the planner's) splits each column block's K over 16
    warps of one block, one block a column block (128 blocks)."""
    prof = get_profile("h100")
    p = MoEProblem(1, 2, 8, 28672, 4096, 4096, 14336, 14336, 4096, "float16", "uint4b8", 128)
    plan = plan_moe(prof, p, tm=1)
    assert plan.splits > 1 and plan.grid_down >= prof.sms
    gemv = plan_moe(prof, p)
    assert isinstance(gemv.down, MoEGemvSpec) and gemv.down.kwarps == 16 and gemv.splits == 1
    assert 2 * 4096 // gemv.down.tile_n >= 0.9 * prof.sms
    big = plan_moe(prof, MoEProblem(4096, 2, 8, 28672, 4096, 4096, 14336, 14336, 4096, "float16", "uint4b8", 128))
    assert big.splits == 1


def test_moe_candidates_run_correctly(rng, seed):
    """A spread of the sweep's candidates (wide and narrow tiles, deep pipelines) through the
    emulator: every candidate the planner may pick computes the same block."""
    from jitmarlin.kernels.moe.plan import moe_candidates

    e, t, k = 4, 6, 2
    w13, w2 = _weights(rng, e, 256, 256, "uint4b8", 64)
    prof = get_profile("h100")
    problem = _problem(w13, w2, t, k, "float16")
    ups, downs = moe_candidates(prof, problem, "up", 1), moe_candidates(prof, problem, "down", 1)
    assert {s.tn for s in ups} == {4, 8, 16} and max(s.stages for s in downs) >= 6
    picks = [(u, d) for u, d in zip(ups[:: max(1, len(ups) // 4)], downs[1 :: max(1, len(downs) // 4)])]
    x = rng.standard_normal((t, 256))
    ids, tw = _routing(rng, t, k, e)
    xr = halves.from_bits(halves.to_bits(x, "float16"), "float16")
    ref = moe_reference(xr, w13, w2, tw, ids, act="float16")
    for up, down in picks:
        plan = plan_moe(prof, problem, up=up, down=down, splits=min(2, problem.k2 // down.tile_k))
        out = emu.run_moe(plan, x, w13, w2, tw, ids, seed=seed)
        check_output(out, ref, "float16", what=f"{up.name} + {down.name}", seed=seed, family="moe", atol_u=ATOL_U_MOE)


def test_moe_plan_overrides_refused():
    w13, w2 = _weights(np.random.default_rng(1), 2, 128, 64, "uint4b8", 64)
    prof = get_profile("h100")
    problem = _problem(w13, w2, 3, 2, "float16")
    base = plan_moe(prof, problem, tm=1)
    with pytest.raises(InputError, match="not a down kernel"):
        plan_moe(prof, problem, down=base.up)
    with pytest.raises(InputError, match="splits"):
        plan_moe(prof, problem, splits=99, tm=1)
    gemv = plan_moe(prof, problem)
    with pytest.raises(InputError, match="not a down kernel"):
        plan_moe(prof, problem, up=gemv.up, down=gemv.up)
    with pytest.raises(InputError, match="both stages"):
        plan_moe(prof, problem, up=gemv.up, down=base.down)
    with pytest.raises(InputError, match="GEMV plan"):
        plan_moe(prof, problem, splits=2)
    t4 = plan_moe(get_profile("t4"), problem)
    with pytest.raises(InputError, match="splits"):
        plan_moe(get_profile("t4"), problem, down=t4.down, splits=2)


@pytest.mark.parametrize(
    "profile,q13,g13,q2,g2", [("h100", "uint4", 32, "uint8b128", 16), ("t4", "uint4b8", 128, "float8_e4m3fn", -1)]
)
def test_moe_w2_of_another_quant_type(rng, seed, profile, q13, g13, q2, g2):
    """GGUF K-quant mixes store w2 in another type (Q6_K down under Q4_K gate/up): each grouped GEMM
    takes its own weight's type."""
    e, t, k = 4, 6, 2
    w13 = quantize_moe(rng.standard_normal((e, 128, 128)) * 0.1, q13, g13, gated=True)
    w2 = quantize_moe(rng.standard_normal((e, 128, 64)) * 0.1, q2, g2)
    ids, tw = _routing(rng, t, k, e)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 64, 128, "float16", q13, g13, "silu", q2, g2)
    plan = plan_moe(get_profile(profile), p)
    assert (plan.up.qtype, plan.down.qtype) == (q13, q2)
    x = rng.standard_normal((t, 128))
    out = emu.run_moe(plan, x, w13, w2, tw, ids, seed=seed)
    xr = halves.from_bits(halves.to_bits(x, "float16"), "float16")
    check_output(
        out,
        moe_reference(xr, w13, w2, tw, ids, act="float16"),
        "float16",
        what=f"{q13} + {q2}",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
    )
    with pytest.raises(InputError, match="go together"):
        plan_moe(get_profile(profile), dataclasses.replace(p, group2=0))


@pytest.mark.parametrize(
    "up_splits,activation,qtype,group", [(2, "silu", "uint4b8", 64), (3, "swigluoai", "mxfp4", 32)]
)
def test_moe_up_k_splits(rng, seed, up_splits, activation, qtype, group):
    """The w13 GEMM split over K: scaled fp32 partial sums of every interleaved column (bias once),
    summed and activated by its own kernel; with the w2 split too."""
    from dataclasses import replace

    e, t, k = 4, 5, 2
    w13, w2 = _weights(rng, e, 384, 128, qtype, group, bias=True)
    ids, tw = _routing(rng, t, k, e)
    base = plan_moe(get_profile("h100"), _problem(w13, w2, t, k, "float16", activation), tm=1)
    plan = replace(base, up_splits=up_splits, splits=2)
    assert plan.grid_up == up_splits * base.grid_up
    x = rng.standard_normal((t, 384))
    out = emu.run_moe(plan, x, w13, w2, tw, ids, seed=seed)
    xr = halves.from_bits(halves.to_bits(x, "float16"), "float16")
    ref = moe_reference(xr, w13, w2, tw, ids, activation=activation, act="float16")
    check_output(out, ref, "float16", what=f"moe up_splits={up_splits}", seed=seed, family="moe", atol_u=ATOL_U_MOE)
    with pytest.raises(InputError, match="up_splits"):
        plan_moe(get_profile("h100"), _problem(w13, w2, t, k, "float16", activation), up_splits=99, tm=1)
