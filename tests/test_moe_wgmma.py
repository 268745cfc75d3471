"""The MoE wgmma kind (templates/moe_wgmma.cu.j2, kernels/moe/wgmma.py): plans (pure), NVRTC
compiles for sm_90a on the CPU (every quant type, both dtypes, every activation, resources, the
SASS), and on an sm_90 GPU the forced kind against the float64 per-expert reference.
`pytest -k wgmma tests/test_moe_wgmma.py` runs them alone."""

from __future__ import annotations

import numpy as np
import pytest
from test_moe_gpu import _graph_replay, _replay_routings, _routing, _weights  # the mma.sync GPU tests' helpers

from jitmarlin.errors import InputError
from jitmarlin.jit.cache import default_cache
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.moe import MoEProblem, MoEWgmmaSpec, plan_moe
from jitmarlin.kernels.moe import wgmma as moe_wgmma
from jitmarlin.kernels.moe.plan import stage_candidates
from jitmarlin.kernels.moe.tuned import _stage_spec
from jitmarlin.kernels.render import render
from jitmarlin.kernels.source import SOURCE
from jitmarlin.kernels.spec import spec_from_canonical
from jitmarlin.reference import ATOL_U_MOE, check_output, moe_reference
from jitmarlin.weights import halves
from jitmarlin.weights.qtypes import kernel_dims

QTYPES = [("uint4b8", 128), ("uint4", 64), ("uint8b128", -1), ("float8_e4m3fn", 128), ("nvfp4", 16), ("mxfp4", 32)]
# (experts, top-k, hidden, intermediate, quant type, group, activation) of tools/bench --moe's models
MODELS = {
    "mixtral-8x7b": (8, 2, 4096, 14336, "uint4b8", 128, "silu"),
    "qwen3-30b-a3b": (128, 8, 2048, 768, "uint4b8", 128, "silu"),
    "gpt-oss-20b": (32, 4, 2880, 2880, "mxfp4", 32, "swigluoai"),
}


def _problem(t, k, e, hidden, inter, act, qt, g, activation="silu"):
    n13, k13 = kernel_dims(2 * inter, hidden, g)
    n2, k2 = kernel_dims(hidden, inter, g)
    return MoEProblem(t, k, e, n13, k13, n2, k2, inter, hidden, act, qt, g, activation)


# ---- plans (pure) --------------------------------------------------------------------------------


@pytest.mark.parametrize("prof", ["h100", "h200"])
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_wgmma_plans_fit(prof, act):
    h = get_profile(prof)
    for e, k, hidden, inter, qt, g, activation in MODELS.values():
        for t in (1, 64, 256, 1024, 4096):
            p = _problem(t, k, e, hidden, inter, act, qt, g, activation)
            plan = plan_moe(h, p, wgmma=True)
            assert plan.wgmma and not plan.gemv and plan.splits == plan.up_splits == 1
            for spec in (plan.up, plan.down):
                spec.check()
                assert spec.path == "sm90" and spec.tile_m == plan.block_m
                assert spec.smem_bytes() <= h.smem_per_block and spec.smem_per_sm() <= h.smem_per_sm
            assert plan.route.block_m == 16 * moe_wgmma.wgmma_tm(p.pairs, p.experts)
            assert plan.max_blocks * plan.block_m >= p.pairs + min(p.experts, p.pairs) * (plan.block_m - 1)
            assert plan.grid_up == plan.max_blocks * -(-p.n13 // plan.up.tile_n)
            assert plan.grid_down == plan.max_blocks * -(-p.n2 // plan.down.tile_n)
            assert plan.up.activation == activation and plan.down.activation == ""


def test_wgmma_kind_from_16_rows_an_expert_on_sm90():
    """The planner's own rule (WGMMA_RULE, from the H100 timings): the wgmma kind from 16 rows an
    expert on sm_90, the mma.sync kind from 9 to 15, the GEMV kind up to 8; never off sm_90."""
    assert moe_wgmma.WGMMA_DEFAULT is None and moe_wgmma.WGMMA_RULE is True
    h, a = get_profile("h100"), get_profile("a100")
    for t, kind in ((1, "gemv"), (32, "gemv"), (60, "mma"), (64, "wgmma"), (4096, "wgmma")):
        plan = plan_moe(h, _problem(t, 2, 8, 4096, 14336, "float16", "uint4b8", 128))  # 2t/8 rows an expert
        assert ("wgmma" if plan.wgmma else "gemv" if plan.gemv else "mma") == kind, (t, plan)
        assert not plan_moe(a, _problem(t, 2, 8, 4096, 14336, "float16", "uint4b8", 128)).wgmma


def test_wgmma_rule_and_forcing(monkeypatch):
    h, a = get_profile("h100"), get_profile("a100")
    few, many = (_problem(t, 2, 8, 4096, 14336, "float16", "uint4b8", 128) for t in (48, 1024))
    monkeypatch.setattr(moe_wgmma, "WGMMA_RULE", True)
    assert plan_moe(h, many).wgmma and not plan_moe(h, few).wgmma  # 256 vs 12 rows an expert
    monkeypatch.setattr(moe_wgmma, "WGMMA_RULE", False)
    assert not plan_moe(h, many).wgmma
    monkeypatch.setattr(moe_wgmma, "WGMMA_RULE", True)
    assert not plan_moe(a, many).wgmma  # sm_90 only
    assert not plan_moe(h, many, wgmma=False).wgmma and not plan_moe(h, many, tm=2).wgmma
    monkeypatch.setattr(moe_wgmma, "WGMMA_DEFAULT", True)
    assert plan_moe(h, few).wgmma and not plan_moe(a, few).wgmma
    assert plan_moe(h, few, gemv=True).gemv and not plan_moe(h, few, gemv=False).wgmma
    monkeypatch.setattr(moe_wgmma, "WGMMA_DEFAULT", False)
    assert not plan_moe(h, many).wgmma and plan_moe(h, many, wgmma=True).wgmma


def test_wgmma_plan_refusals():
    h, a = get_profile("h100"), get_profile("a100")
    p = _problem(256, 2, 8, 4096, 14336, "float16", "uint4b8", 128)
    with pytest.raises(InputError, match="sm_90"):
        plan_moe(a, p, wgmma=True)
    w = plan_moe(h, p, wgmma=True)
    m = plan_moe(h, p, wgmma=False)
    with pytest.raises(InputError, match="both stages"):
        plan_moe(h, p, up=w.up, down=m.down)
    for kw in ({"tm": 2}, {"gemv": True}, {"gemv": False}):
        with pytest.raises(InputError, match="another kind"):
            plan_moe(h, p, wgmma=True, **kw)
    with pytest.raises(InputError, match="up_splits must be 1"):
        plan_moe(h, p, wgmma=True, up_splits=2)
    with pytest.raises(InputError, match="not a up kernel"):
        plan_moe(h, p, up=w.down, down=w.down)
    bf = _problem(256, 2, 8, 4096, 14336, "bfloat16", "uint4b8", 128)
    with pytest.raises(InputError, match="not a up kernel"):  # fp16 tiles for a bf16 problem
        plan_moe(h, bf, up=w.up, down=plan_moe(h, bf, wgmma=True).down)
    # the overrides (a tuned choice) make the same plan
    assert plan_moe(h, p, up=w.up, down=w.down) == w


def test_wgmma_down_splits_plans():
    """K splits of the down stage by override (a launch argument: the planner's kernels), 1..min(K
    steps of 64, 16); the planner keeps 1; the up stage never splits."""
    h = get_profile("h100")
    p = _problem(256, 2, 8, 4096, 14336, "float16", "uint4b8", 128)  # w2: K = 14336, 224 steps
    w = plan_moe(h, p, wgmma=True)
    assert w.splits == w.up_splits == 1
    for n in range(1, 17):
        for plan in (plan_moe(h, p, wgmma=True, splits=n), plan_moe(h, p, up=w.up, down=w.down, splits=n)):
            assert plan.wgmma and plan.splits == n and plan.up_splits == 1
            assert (plan.up, plan.down, plan.max_blocks) == (w.up, w.down, w.max_blocks)
            assert plan.grid_down == n * w.grid_down and plan.grid_up == w.grid_up
    for bad in (0, -1, 17, 2.0, True, "2"):
        with pytest.raises(InputError, match="splits must be 1..16 in a wgmma plan"):
            plan_moe(h, p, wgmma=True, splits=bad)
    for kw in ({"up_splits": 2}, {"up_splits": 2, "splits": 2}):
        with pytest.raises(InputError, match="up_splits must be 1 in a wgmma plan"):
            plan_moe(h, p, up=w.up, down=w.down, **kw)
    small = _problem(256, 2, 8, 256, 192, "bfloat16", "float8_e4m3fn", 64)  # w2: K = 192, 3 steps
    assert plan_moe(h, small, wgmma=True, splits=3).splits == 3
    with pytest.raises(InputError, match=r"splits must be 1..3 .* 3 K steps"):
        plan_moe(h, small, wgmma=True, splits=4)


def test_wgmma_spec_identity_and_checks():
    s = MoEWgmmaSpec("sm90", "uint4b8", "float16", 8, 4, 8, 4, "up", "silu", 2)
    assert s.name == "jm_moe_wgmma_up_silu_sm90_uint4b8_f16_g128_m4n8s4o2"
    assert spec_from_canonical(s.canonical()) == s and _stage_spec(s.canonical()) == s
    assert SOURCE.target_arch(s, "sm_90") == "sm_90a" and s.kernel_spec() is s
    assert s.tile_m == 64 and s.tile_n == 128 and s.tile_k == 64 and s.threads == 256
    bad = [
        dict(path="sm80"),
        dict(tm=1),
        dict(tm=32),
        dict(tm=16),  # 128 sums a thread at 128 registers (two blocks an SM)
        dict(tn=4),
        dict(stages=9),
        dict(occupancy=3),
        dict(qtype="float8_e4m3fn", tn=16),  # 512 words a k16 row: not one TMA box
        dict(tm=8, tn=16, occupancy=2),  # 128 sums a thread at 128 registers
        dict(stage="down"),
        dict(activation="relu"),
        dict(qtype="uint4", group_blocks=-1),
    ]
    from dataclasses import replace

    for kw in bad:
        with pytest.raises(ValueError):
            replace(s, **kw).check()
    big = replace(s, tm=16, occupancy=1)  # 256-row blocks, one block an SM (by override)
    big.check()
    assert big.tile_m == 256 and big.name.endswith("_m16n8s4")
    # the emulator's build: the same kernel over its instruction layer (tests/test_wgmma_emu.py)
    emu_src = render(s, "emu")
    assert "wgmma_m64k16<false>" in emu_src and "jm_emu_moe" in emu_src and "wgmma.mma_async.sync" not in emu_src


def test_wgmma_sweep_candidates():
    h = get_profile("h100")
    p = _problem(1024, 2, 8, 4096, 14336, "float16", "float8_e4m3fn", 128)
    plan = plan_moe(h, p, wgmma=True)
    for stage in ("up", "down"):
        cands = stage_candidates(h, p, plan, stage)
        assert (plan.up if stage == "up" else plan.down) in cands
        assert all(c.tm == plan.up.tm and c.tn == 8 and c.stage == stage for c in cands)  # 8-bit: tn 8
        for c in cands:
            plan_moe(h, p, up=c if stage == "up" else plan.up, down=c if stage == "down" else plan.down)


# ---- NVRTC for sm_90a (CPU) ----------------------------------------------------------------------


def _compiled(spec):
    art, _, _ = default_cache().get(spec, "sm_90")
    assert art.arch == "sm_90a"
    r = art.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, (spec.name, r)
    assert r["registers"] <= (128 if spec.occupancy == 2 else 255), (spec.name, r)
    assert spec.smem_bytes() + r["static_shared_bytes"] <= get_profile("h100").smem_per_block
    assert not [line for line in art.log.splitlines() if "serialized" in line], spec.name
    ptx = art.ptx
    dt = "bf16" if spec.act == "bfloat16" else "f16"
    assert f"wgmma.mma_async.sync.aligned.m64n{spec.tile_m}k16.f32.{dt}.{dt}" in ptx
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx
    # weights by TMA; A rows gathered per thread (then fenced for the async proxy) unless they
    # come as boxes of a sorted copy (sorted_x up, sorted_h down stages)
    assert "cp.async.bulk.tensor.2d" in ptx and "stmatrix.sync.aligned.m8n8.x4.trans" in ptx
    assert ("cp.async.cg.shared.global" in ptx) == ("fence.proxy.async" in ptx) == (not spec.tma_x), spec.name
    return art


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", QTYPES)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("t", [64, 128, 4096])
def test_wgmma_every_type_compiles_for_sm90a(qt, group, act, t):
    """The planner's w13 (SwiGLU) and w2 tiles for Mixtral-shaped layers at 32-, 64- and 128-row
    blocks, every quant type and dtype: sm_90a, no spills, within the registers of their occupancy."""
    h = get_profile("h100")
    plan = plan_moe(h, _problem(t, 2, 8, 1024, 512, act, qt, group), wgmma=True)
    assert plan.up.tm == {64: 2, 128: 4, 4096: 8}[t]  # 16, 32 and 1024 rows an expert
    for spec in (plan.up, plan.down):
        _compiled(spec)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["gelu", "swigluoai"])
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_wgmma_activations_compile(activation, act):
    h = get_profile("h100")
    for t in (64, 4096):
        plan = plan_moe(h, _problem(t, 4, 8, 2880, 2880, act, "mxfp4", 32, activation), wgmma=True)
        assert plan.up.activation == activation
        _compiled(plan.up)


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("float8_e4m3fn", 128), ("nvfp4", 16), ("uint4", 64)])
def test_wgmma_sweep_candidates_compile(qt, group):
    """Every tile the sweep and tuner may time (two slabs, two blocks an SM, 3..8 stages) at 64- and
    128-row blocks compiles without spills."""
    h = get_profile("h100")
    for t, stage in ((512, "up"), (4096, "down")):
        p = _problem(t, 2, 16, 1024, 512, "bfloat16", qt, group, "swigluoai")
        plan = plan_moe(h, p, wgmma=True)
        for spec in stage_candidates(h, p, plan, stage)[:: 2 if qt != "uint4b8" else 1]:
            _compiled(spec)


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("float8_e4m3fn", 128), ("uint8b128", -1), ("uint4", 64)])
def test_wgmma_down_splits_compile(qt, group):
    """The K-split code (split from blockIdx, the split's first K step, fp32 partial sums to Cp)
    is in down sources only, which compile for sm_90a without spills within their occupancy's
    registers at every row block; up sources have none of it."""
    h = get_profile("h100")
    for t in (64, 128, 4096):
        p = _problem(t, 2, 8, 1024, 512, "bfloat16", qt, group)
        plan = plan_moe(h, p, wgmma=True, splits=3)
        up, down = render(plan.up, "cuda"), render(plan.down, "cuda")
        for marker in ("per_split", "kt_lo", "Cp + ((size_t)split * num_pairs + p) * n_out"):
            assert marker in down and marker not in up, marker
        art = _compiled(plan.down)
        assert "st.global.f32" in art.ptx  # the partial sums (the rounded path stores 16-byte chunks)


def test_wgmma_tile_major_identity_and_source():
    """tile_major (the column-tile-major block order): its own name (`t`) and canonical form (the
    default order's are unchanged), parses back, is refused unless a bool; its sources compute
    the row block from blockIdx modulo the row blocks, the default's from the column tiles."""
    from dataclasses import replace

    s = MoEWgmmaSpec("sm90", "uint4b8", "float16", 8, 4, 8, 4, "up", "silu", 2)
    t = replace(s, tile_major=True)
    assert t.name == s.name + "t" and '"tile_major"' not in s.canonical() and '"tile_major":true' in t.canonical()
    assert spec_from_canonical(t.canonical()) == t and _stage_spec(t.canonical()) == t
    with pytest.raises(ValueError, match="tile_major"):
        replace(s, tile_major=1).check()
    for stage, activation in (("up", "silu"), ("down", "")):
        d = replace(s, stage=stage, activation=activation)
        src_d, src_t = render(d, "cuda"), render(replace(d, tile_major=True), "cuda")
        assert "m_blocks" not in src_d
        assert ("mb = blockIdx.x / n_tiles" if stage == "up" else "mb = rest / n_tiles") in src_d
        assert ("mb = blockIdx.x % m_blocks" if stage == "up" else "mb = rest % m_blocks") in src_t
    h = get_profile("h100")
    p = _problem(1024, 2, 8, 4096, 14336, "float16", "uint4b8", 128)
    base = plan_moe(h, p)
    plan = plan_moe(h, p, up=replace(base.up, tile_major=True), down=replace(base.down, tile_major=True))
    assert plan.up.tile_major and plan.down.tile_major and plan.grid_up == base.grid_up and not base.up.tile_major


def _unsorted(h, p):
    """The planner's wgmma plan of `p` with its tiles in the default layouts (x and H gathered by
    pair id: no sorted_h, no sorted_x)."""
    from dataclasses import replace

    plan = plan_moe(h, p, wgmma=True)
    up, down = replace(plan.up, sorted_h=False, sorted_x=False), replace(plan.down, sorted_h=False)
    return plan_moe(h, p, up=up, down=down)


def test_planner_sorted_layouts(monkeypatch):
    """The planner's wgmma tiles with SORTED_LAYOUTS (e132): sorted_h on both stages in every plan,
    sorted_x on the up stage from SORTED_X_MIN_ROWS rows an expert (even routing); tiles a caller
    gives keep theirs, and the sweep's and tuner's candidates come in the plan's layouts. Without
    it (until their GPU tests have run) the planner's tiles gather x and H by pair id."""
    from jitmarlin.kernels.moe.plan import stage_candidates
    from jitmarlin.kernels.moe.wgmma import SORTED_X_MIN_ROWS, rows_per_expert

    h = get_profile("h100")
    monkeypatch.setattr(moe_wgmma, "SORTED_LAYOUTS", False)
    off = plan_moe(h, _problem(1024, 2, 8, 4096, 14336, "bfloat16", "uint4b8", 128))
    assert off.wgmma and not (off.up.sorted_h or off.up.sorted_x or off.down.sorted_h)
    monkeypatch.setattr(moe_wgmma, "SORTED_LAYOUTS", True)
    seen = set()
    for t in (16, 64, 100, 256, 1024, 4096):
        for e, k, hidden, inter in ((8, 2, 4096, 14336), (128, 8, 2048, 768), (32, 4, 2880, 2880)):
            p = _problem(t, k, e, hidden, inter, "bfloat16", "uint4b8", 128)
            plan = plan_moe(h, p, wgmma=True)
            sx = rows_per_expert(p.pairs, p.experts) >= SORTED_X_MIN_ROWS
            assert plan.up.sorted_h and plan.down.sorted_h and plan.up.sorted_x == sx and not plan.down.sorted_x
            assert plan.h_rows == plan.sorted_rows and plan.up.name.endswith("hx" if sx else "h")
            seen.add(sx)
            off = _unsorted(h, p)
            assert not (off.up.sorted_h or off.up.sorted_x or off.down.sorted_h)  # given tiles as given
            for stage in ("up", "down"):
                cands = stage_candidates(h, p, plan, stage)
                assert (plan.up if stage == "up" else plan.down) in cands
                assert all(c.sorted_h and c.sorted_x == (sx and stage == "up") for c in cands)
    assert seen == {True, False}


def test_wgmma_sorted_h_identity_plans_and_source():
    """sorted_h (H in the aligned list's row order, the down stage's H by TMA): its own name (`h`)
    and canonical form, a plan takes it on both stages or neither, H then holds the list's padded
    rows; the up source writes rows mb TILE_M + r, the down source loads a box of amap and gathers
    nothing per thread (no cp.async, no proxy fence), the default sources as before."""
    from dataclasses import replace

    s = MoEWgmmaSpec("sm90", "uint4b8", "float16", 8, 4, 8, 4, "down", "", 2)
    hs = replace(s, sorted_h=True)
    assert hs.name == s.name + "h" and '"sorted_h":true' in hs.canonical() and '"sorted_h"' not in s.canonical()
    assert spec_from_canonical(hs.canonical()) == hs and replace(hs, tile_major=True).name == s.name + "th"
    with pytest.raises(ValueError, match="sorted_h"):
        replace(s, sorted_h=None).check()
    h = get_profile("h100")
    p = _problem(1024, 2, 8, 4096, 14336, "float16", "uint4b8", 128)
    base = _unsorted(h, p)
    up, down = replace(base.up, sorted_h=True), replace(base.down, sorted_h=True)
    plan = plan_moe(h, p, up=up, down=down)
    assert plan.h_rows == plan.sorted_rows > p.pairs == base.h_rows
    for kw in (dict(up=up, down=base.down), dict(up=base.up, down=down)):
        with pytest.raises(InputError, match="sorted_h"):
            plan_moe(h, p, **kw)
    src_up, src_down = render(up, "cuda"), render(down, "cuda")
    assert "orow = (size_t)mb * TILE_M + r" in src_up and "pipe.fetch16" in src_up
    assert "TmaMap amap" in src_down and "tma_load_2d(sA, &amap" in src_down
    assert "pipe.fetch16" not in src_down and "fence_proxy_async();" not in src_down
    for d in (base.up, base.down):
        src = render(d, "cuda")
        assert "amap" not in src and "orow = p;" in src and "pipe.fetch16" in src


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("uint4", 64), ("float8_e4m3fn", 128), ("mxfp4", 32)])
def test_wgmma_sorted_h_compiles(qt, group):
    """sorted_h tiles at 32-, 64- and 128-row blocks (the down stage with K splits too): sm_90a, no
    spills, within their occupancy's registers; the down stage without per-thread copies."""
    from dataclasses import replace

    h = get_profile("h100")
    for t in (64, 128, 4096):
        plan = plan_moe(h, _problem(t, 2, 8, 1024, 512, "bfloat16", qt, group), wgmma=True, splits=2)
        for spec in (plan.up, plan.down):
            s = replace(spec, sorted_h=True, sorted_x=False)  # (the planner's up tile has x from 64 rows)
            art, _, _ = default_cache().get(s, "sm_90")
            r = art.resources
            assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (s.name, r)
            assert r["registers"] <= (128 if s.occupancy == 2 else 255), (s.name, r)
            assert ("cp.async.cg.shared.global" in art.ptx) == (s.stage == "up"), s.name


def test_wgmma_sorted_x_identity_and_source():
    """sorted_x (x copied into the aligned list's row order, the up stage's rows by TMA): its own
    name (`x`) and canonical form, the up stage only; the up source loads a box of amap, gathers
    nothing per thread and carries the `_permute` kernel; the default up source has neither."""
    from dataclasses import replace

    h = get_profile("h100")
    p = _problem(1024, 2, 8, 4096, 14336, "float16", "uint4b8", 128)
    base = _unsorted(h, p)
    up = replace(base.up, sorted_x=True)
    assert up.name == base.up.name + "x" and '"sorted_x":true' in up.canonical()
    assert '"sorted_x"' not in base.up.canonical() and spec_from_canonical(up.canonical()) == up
    assert replace(up, sorted_h=True, tile_major=True).name == base.up.name + "thx"
    with pytest.raises(ValueError, match="sorted_x"):
        replace(base.down, sorted_x=True).check()
    plan = plan_moe(h, p, up=up, down=base.down)
    assert plan.up.sorted_x and plan.h_rows == p.pairs and 1 <= plan.permute_grid <= 1024
    src = render(up, "cuda")
    assert "tma_load_2d(sA, &amap" in src and "pipe.fetch16" not in src and "fence_proxy_async();" not in src
    assert f"{up.name}_permute(" in src and "orow = p;" in src
    assert "_permute(" not in render(base.up, "cuda")


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("uint4", 64), ("float8_e4m3fn", 128), ("mxfp4", 32)])
def test_wgmma_sorted_x_compiles(qt, group):
    """sorted_x up tiles at 32-, 64- and 128-row blocks, alone and with sorted_h: sm_90a, no
    spills, within their occupancy's registers, no per-thread copies."""
    from dataclasses import replace

    h = get_profile("h100")
    for t in (64, 128, 4096):
        plan = plan_moe(h, _problem(t, 2, 8, 1024, 512, "bfloat16", qt, group), wgmma=True)
        for sh in (False, True):
            s = replace(plan.up, sorted_x=True, sorted_h=sh)
            art, _, _ = default_cache().get(s, "sm_90")
            r = art.resources
            assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (s.name, r)
            assert r["registers"] <= (128 if s.occupancy == 2 else 255), (s.name, r)
            assert "cp.async.cg.shared.global" not in art.ptx, s.name


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("uint4", 64), ("float8_e4m3fn", 128), ("mxfp4", 32)])
def test_wgmma_256_row_blocks_compile(qt, group):
    """256-row blocks (tm 16, one block an SM; the sweep's "tm" trial from 65 rows an expert):
    both stages, with sorted_h and sorted_x, sm_90a without spills."""
    from dataclasses import replace

    h = get_profile("h100")
    for act in ("float16", "bfloat16"):
        p = _problem(4096, 2, 8, 1024, 512, act, qt, group)
        for stage in ("up", "down"):
            s = moe_wgmma.wgmma_stage_spec(h, p.dense(stage), 16, stage, "silu" if stage == "up" else "")
            assert s.tile_m == 256 and s.occupancy == 1
            _compiled(s)
            v = replace(s, sorted_h=True, sorted_x=stage == "up")  # rows by TMA: no per-thread copies
            art, _, _ = default_cache().get(v, "sm_90")
            r = art.resources
            assert r["spill_stores"] == 0 and r["stack_bytes"] == 0 and r["registers"] <= 255, (v.name, r)
            assert "m64n256k16" in art.ptx and "cp.async.cg.shared.global" not in art.ptx, v.name


@pytest.mark.slow
@pytest.mark.parametrize("qt,group", [("uint4b8", 128), ("mxfp4", 32)])
def test_wgmma_tile_major_compiles(qt, group):
    """The column-tile-major order at 64- and 128-row blocks, both stages (the down with K splits
    too): sm_90a, no spills, within their occupancy's registers."""
    from dataclasses import replace

    h = get_profile("h100")
    for t in (128, 4096):
        plan = plan_moe(h, _problem(t, 2, 8, 1024, 512, "bfloat16", qt, group), wgmma=True, splits=2)
        for spec in (plan.up, plan.down):
            _compiled(replace(spec, tile_major=True))


@pytest.mark.slow
def test_wgmma_no_register_of_an_inflight_wgmma_is_overwritten():
    """Where a warpgroup dequantises step t while its wgmmas of step t - 1 run (one slab, >= 4
    stages), the SASS never writes an A register of an HGMMA in flight (test_wgmma's check); the
    sorted_h down stage (H by TMA) too."""
    from test_wgmma import _inflight_overwrites

    from jitmarlin.jit import nvrtc

    if nvrtc.find_disassembler() is None:
        pytest.skip("no SASS disassembler (the test extra installs nvdisasm)")
    for tm, stages, occ in ((2, 4, 2), (4, 4, 2), (4, 6, 1), (8, 4, 1), (8, 5, 1)):
        for stage, activation, sorted_h in (("up", "silu", False), ("down", "", False), ("down", "", True)):
            spec = MoEWgmmaSpec(
                "sm90", "uint4b8", "bfloat16", 8, tm, 8, stages, stage, activation, occ, False, sorted_h
            )
            art = _compiled(spec) if not sorted_h else default_cache().get(spec, "sm_90")[0]
            assert "wgmma.wait_group.sync.aligned 1;" in art.ptx  # the overlap is on
            sass = nvrtc.disassemble(art.cubin)
            assert "HGMMA" in sass
            assert not _inflight_overwrites(sass), spec.name


# ---- GPU (sm_90): the forced kind against the float64 reference ------------------------------------


@pytest.fixture
def wgmma_kind(monkeypatch):
    """The wgmma kind forced for the whole process (as tools/bench --moe-kind wgmma does), on an
    sm_90 GPU only; runners made before (of another kind) are dropped, before and after."""
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.ops import moe as moe_ops

    prof = planning_profile(0)
    if prof.cc != (9, 0):
        pytest.skip(f"the MoE wgmma kind needs an sm_90 GPU (H100, H200), not {prof.name}")
    monkeypatch.setattr(moe_wgmma, "WGMMA_DEFAULT", True)
    moe_ops._runners.clear()
    yield prof
    moe_ops._runners.clear()


def _run(
    rng,
    seed,
    w13,
    w2,
    ids,
    tw,
    act,
    *,
    plan=None,
    activation="silu",
    expert_map=None,
    on_input=False,
    what="",
    outs=None,
):
    """The op's runner (the given plan, else the forced kind's) on CuPy buffers of `act`'s bit
    patterns; the output and the intermediate workspaces poisoned (NaN) before the call; checked
    against the float64 per-expert reference. The output is appended to `outs` if given."""
    cp = pytest.importorskip("cupy")
    from jitmarlin.ops import moe as moe_ops

    t, k = ids.shape
    xb = halves.to_bits(rng.standard_normal((t, w13.in_features)), act)
    s = cp.cuda.get_current_stream()
    r = moe_ops._Runner(w13, w2, 0, act, t, k, s.ptr, activation, on_input, plan=plan)
    assert r.plan.wgmma, r.plan
    x, ids_d, tw_d = cp.asarray(xb), cp.asarray(ids), cp.asarray(tw)
    em = None if expert_map is None else cp.asarray(expert_map)
    out = cp.full((t, w2.out_features), 0xFFFF, dtype=cp.uint16)
    r.h.fill(0xFFFF)
    r.y.fill(0xFFFF)
    if r.yp is not None:  # K splits: every partial sum the combine reads is written
        r.yp.fill(cp.nan)
    r(
        x.data.ptr,
        ids_d.data.ptr,
        tw_d.data.ptr,
        0 if em is None else em.data.ptr,
        w13.num_experts if em is None else len(expert_map),
        out.data.ptr,
    )
    s.synchronize()
    got = halves.from_bits(cp.asnumpy(out), act)
    if outs is not None:
        outs.append(got)
    ref = moe_reference(
        halves.from_bits(xb, act),
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
        got,
        ref,
        act,
        what=f"{what} [{r.plan.up.name} / {r.plan.down.name}]",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
    )
    return r.plan


# E, k, T: rows an expert 16 (32-row blocks), 1 (most experts empty), 63 (64-row blocks), 29,
# 128 and 512 (128-row blocks)
SHAPES = [(8, 2, 64), (32, 4, 7), (128, 8, 1000), (64, 6, 300), (16, 4, 512), (8, 1, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("qtype,group", QTYPES)
@pytest.mark.parametrize("e,k,t", SHAPES)
def test_moe_wgmma_gpu(wgmma_kind, rng, seed, qtype, group, act, e, k, t):
    w13, w2 = _weights(qtype, group, e)
    ids, tw = _routing(rng, t, k, e)
    plan = _run(rng, seed, w13, w2, ids, tw, act, what=f"moe wgmma {qtype} {act} E={e} k={k} T={t}")
    assert plan.block_m == 16 * moe_wgmma.wgmma_tm(t * k, e)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", "gelu", "swigluoai"])
@pytest.mark.parametrize("t", [64, 1000])
def test_moe_wgmma_gpu_activations_bias(wgmma_kind, rng, seed, activation, t):
    w13, w2 = _weights("mxfp4", 32, 8, bias=True)
    ids, tw = _routing(rng, t, 4, 8)
    for act in ("float16", "bfloat16"):
        _run(rng, seed, w13, w2, ids, tw, act, activation=activation, what=f"moe wgmma {activation} bias T={t}")


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1000, 4096])
def test_moe_wgmma_gpu_all_tokens_one_expert(wgmma_kind, rng, seed, t):
    w13, w2 = _weights("uint4b8", 128, 64)
    ids = np.tile(np.array([[5, 9]], dtype=np.int32), (t, 1))
    tw = (rng.random((t, 2)) + 0.05).astype(np.float32)
    _run(rng, seed, w13, w2, ids, tw, "bfloat16", what=f"moe wgmma skewed T={t}")


@pytest.mark.gpu
def test_moe_wgmma_gpu_expert_map_half_absent(wgmma_kind, rng, seed):
    w13, w2 = _weights("uint4b8", 128, 32)
    emap = np.full(64, -1, dtype=np.int32)
    emap[::2] = np.arange(32, dtype=np.int32)
    ids, tw = _routing(rng, 1000, 6, 64)
    _run(rng, seed, w13, w2, ids, tw, "float16", expert_map=emap, what="moe wgmma expert_map")


@pytest.mark.gpu
def test_moe_wgmma_gpu_router_weight_on_input(wgmma_kind, rng, seed):
    w13, w2 = _weights("float8_e4m3fn", 128, 8, bias=True)
    ids, tw = _routing(rng, 512, 1, 8)
    _run(rng, seed, w13, w2, ids, tw, "bfloat16", on_input=True, what="moe wgmma weight on input")


# forced tiles: (tm, tn, stages, occupancy) over every loop shape (one or two slabs, the overlap on
# and off, rounds of the stages and the remainder, odd K-step counts) and partial column tiles
TILES = [
    (2, 8, 4, 2),
    (2, 16, 3, 1),
    (4, 8, 4, 2),
    (4, 8, 6, 1),
    (4, 16, 4, 1),
    (8, 8, 4, 1),
    (8, 8, 5, 1),
    (8, 8, 2, 1),
    (8, 16, 8, 1),
    (8, 8, 3, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("qtype,group", [("uint4b8", 64), ("float8_e4m3fn", 64), ("uint4", 64)])
@pytest.mark.parametrize("tm,tn,stages,occ", TILES)
def test_moe_wgmma_gpu_tiles(wgmma_kind, rng, seed, qtype, group, tm, tn, stages, occ):
    """K = 448 and 320 (7 and 5 steps), N = 640 and 448 (partial 128- and 256-column tiles)."""
    bits = 8 if qtype == "float8_e4m3fn" else 4
    if 16 * tn * bits // 4 > 256:
        pytest.skip("8-bit codes take one-slab tiles")
    e, k, t = 16, 4, 300
    w13, w2 = _weights(qtype, group, e, hidden=448, inter=320, bias=True)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 320, 448, "float16", qtype, group)
    gb = group // 16

    def spec(stage):
        return MoEWgmmaSpec("sm90", qtype, "float16", gb, tm, tn, stages, stage, "silu" if stage == "up" else "", occ)

    plan = plan_moe(wgmma_kind, p, up=spec("up"), down=spec("down"))
    ids, tw = _routing(rng, t, k, e)
    _run(rng, seed, w13, w2, ids, tw, "float16", plan=plan, what=f"moe wgmma tile {tm}x{tn} s{stages} o{occ} {qtype}")


def _skewed(rng, t, k, e, hot=3):
    """_routing with expert `hot` among the first half of the tokens' experts (k distinct a token)."""
    ids, tw = _routing(rng, t, k, e)
    for row in ids[: t // 2]:
        j = np.flatnonzero(row == hot)
        if len(j):
            row[[0, j[0]]] = row[[j[0], 0]]
        else:
            row[0] = hot
    return ids, tw


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [2, 3])
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("qtype,group", [("uint4b8", 128), ("float8_e4m3fn", 128), ("uint8b128", -1)])
@pytest.mark.parametrize("routing", ["skewed", "empty"])
def test_moe_wgmma_gpu_down_splits(wgmma_kind, rng, seed, qtype, group, act, splits, routing):
    """K splits of the down stage (w2 K = 448 padded to whole groups: 7 or 8 steps of 64, so a
    split may start inside a scale group), with biases (split 0 only) and the router weights, under
    a skewed routing (half the tokens on one expert) and one where 12 of 16 experts get nothing;
    the partial-sum workspace poisoned before the call."""
    e, k, t = 16, 4, 300
    w13, w2 = _weights(qtype, group, e, hidden=256, inter=448, bias=True)
    ids, tw = _skewed(rng, t, k, e) if routing == "skewed" else _routing(rng, t, k, 4)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 448, 256, act, w13.qtype, w13.group_size)
    plan = plan_moe(wgmma_kind, p, wgmma=True, splits=splits)
    assert plan.splits == splits and plan.grid_down == splits * plan.max_blocks * -(-w2.n // plan.down.tile_n)
    _run(rng, seed, w13, w2, ids, tw, act, plan=plan, what=f"moe wgmma down splits={splits} {qtype} {act} {routing}")


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("t,qtype,group", [(1200, "uint4b8", 128), (300, "float8_e4m3fn", 128), (80, "mxfp4", 32)])
@pytest.mark.parametrize("splits,tile_major", [(1, False), (3, False), (1, True)])
@pytest.mark.parametrize("routing", ["skewed", "empty"])
def test_moe_wgmma_gpu_sorted_h(wgmma_kind, rng, seed, act, t, qtype, group, splits, tile_major, routing):
    """H in the aligned list's row order, the down stage reading it as TMA boxes (w2 K = 448: its
    last box reads columns past k_in as zeros), at 128-, 64- and 32-row blocks, with K splits and
    the column-tile-major order, biases, under a skewed routing and one where 12 of 16 experts get
    nothing; H and the outputs poisoned before the call (padding rows of H are never written)."""
    from dataclasses import replace

    e, k = 16, 4
    w13, w2 = _weights(qtype, group, e, hidden=256, inter=448, bias=True)
    ids, tw = _skewed(rng, t, k, e) if routing == "skewed" else _routing(rng, t, k, 4)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 448, 256, act, w13.qtype, w13.group_size)
    base = plan_moe(wgmma_kind, p, wgmma=True)
    # sorted_h alone (the planner's up tile has sorted_x from 64 rows an expert)
    up, down = (replace(s, sorted_h=True, sorted_x=False, tile_major=tile_major) for s in (base.up, base.down))
    plan = plan_moe(wgmma_kind, p, up=up, down=down, splits=splits)
    assert plan.h_rows == plan.sorted_rows and not plan.up.sorted_x
    what = f"moe wgmma sorted_h tm{plan.up.tm} splits={splits} order={tile_major} {qtype} {act} {routing}"
    _run(rng, seed, w13, w2, ids, tw, act, plan=plan, what=what)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("t,qtype,group", [(1200, "uint4b8", 128), (300, "float8_e4m3fn", 128), (80, "mxfp4", 32)])
@pytest.mark.parametrize("sorted_h,tile_major", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("routing", ["skewed", "empty"])
def test_moe_wgmma_gpu_sorted_x(wgmma_kind, rng, seed, act, t, qtype, group, sorted_h, tile_major, routing):
    """x copied into the aligned list's row order and the up stage reading it as TMA boxes (x's
    hidden 256: one box row of 64 four times), alone, with sorted_h and with the column-tile-major
    order, at 128-, 64- and 32-row blocks, under a skewed and a mostly-empty routing; the copy's
    padding rows are zeros, the outputs poisoned before the call."""
    from dataclasses import replace

    e, k = 16, 4
    w13, w2 = _weights(qtype, group, e, hidden=256, inter=448, bias=True)
    ids, tw = _skewed(rng, t, k, e) if routing == "skewed" else _routing(rng, t, k, 4)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 448, 256, act, w13.qtype, w13.group_size)
    base = plan_moe(wgmma_kind, p, wgmma=True)
    up = replace(base.up, sorted_x=True, sorted_h=sorted_h, tile_major=tile_major)
    down = replace(base.down, sorted_h=sorted_h, tile_major=tile_major)
    plan = plan_moe(wgmma_kind, p, up=up, down=down)
    what = f"moe wgmma sorted_x tm{plan.up.tm} h={sorted_h} order={tile_major} {qtype} {act} {routing}"
    _run(rng, seed, w13, w2, ids, tw, act, plan=plan, what=what)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("routing", ["skewed", "empty"])
def test_moe_wgmma_gpu_tile_major(wgmma_kind, rng, seed, act, splits, routing):
    """The column-tile-major block order (both stages; the down with and without K splits) against
    the reference at 128-row blocks with several row blocks an expert, under a skewed routing and
    one where 12 of 16 experts get nothing (row blocks past the list return in any order)."""
    from dataclasses import replace

    e, k, t = 16, 4, 1200
    w13, w2 = _weights("uint4b8", 128, e, hidden=256, inter=448, bias=True)
    ids, tw = _skewed(rng, t, k, e) if routing == "skewed" else _routing(rng, t, k, 4)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 448, 256, act, w13.qtype, w13.group_size)
    base = plan_moe(wgmma_kind, p, wgmma=True)
    up, down = replace(base.up, tile_major=True), replace(base.down, tile_major=True)
    plan = plan_moe(wgmma_kind, p, up=up, down=down, splits=splits)
    assert plan.up.tm == 8 and plan.grid_up == base.grid_up
    _run(rng, seed, w13, w2, ids, tw, act, plan=plan, what=f"moe wgmma tile-major splits={splits} {act} {routing}")


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_moe_wgmma_gpu_down_splits_agree(wgmma_kind, rng, seed, act):
    """splits = 1 and splits = 3 of the same plan agree (both also against the reference), at
    128-row blocks and Mixtral-like w2 depth (K = 1792: 28 steps)."""
    e, k, t = 8, 2, 2048
    w13, w2 = _weights("uint4b8", 128, e, hidden=512, inter=1792)
    ids, tw = _skewed(rng, t, k, e)
    p = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, 1792, 512, act, "uint4b8", 128)
    outs = []
    for n in (1, 3):
        plan = plan_moe(wgmma_kind, p, wgmma=True, splits=n)
        x_rng = np.random.default_rng(seed)  # the same x for both
        _run(x_rng, seed, w13, w2, ids, tw, act, plan=plan, what=f"moe wgmma splits={n} {act}", outs=outs)
    check_output(
        outs[1], outs[0], act, what=f"moe wgmma splits 3 vs 1 {act}", seed=seed, atol_u=ATOL_U_MOE, record=False
    )


@pytest.mark.gpu
def test_moe_wgmma_gpu_graph_replay_new_routing(wgmma_kind, rng, seed):
    """jitmarlin.moe captured once (T = 256), replayed with fresh routing copied into the captured
    buffers, the output poisoned before each replay; the last routing puts every pair on one expert."""
    cp = pytest.importorskip("cupy")
    from jitmarlin.ops import moe as moe_ops

    w13, w2 = _weights("uint4b8", 128, 32)
    _graph_replay(cp, rng, seed, w13, w2, "float16", _replay_routings(rng, 256, 4, 32, 4), "moe wgmma graph")
    assert all(r.plan.wgmma for per in moe_ops._runners.values() for r in per.values())


@pytest.mark.gpu
def test_moe_wgmma_gpu_torch_bf16(wgmma_kind, rng, seed):
    """The public op on torch bf16 tensors (the forced kind through jitmarlin.moe)."""
    torch = pytest.importorskip("torch")
    import jitmarlin

    w13, w2 = _weights("nvfp4", 16, 16)
    ids, tw = _routing(rng, 700, 4, 16)
    xb = halves.to_bits(rng.standard_normal((700, w13.in_features)), "bfloat16")
    x = torch.from_numpy(xb.view(np.int16)).cuda().view(torch.bfloat16)
    out = jitmarlin.moe(x, w13, w2, torch.from_numpy(tw).cuda(), torch.from_numpy(ids).cuda())
    got = halves.from_bits(out.view(torch.int16).cpu().numpy().view(np.uint16), "bfloat16")
    ref = moe_reference(halves.from_bits(xb, "bfloat16"), w13, w2, tw, ids, act="bfloat16")
    check_output(got, ref, "bfloat16", what="moe wgmma torch", seed=seed, family="moe", atol_u=ATOL_U_MOE)


def test_wgmma_bench_moe_kind_flag():
    """tools/bench --moe --moe-kind: the kinds parse, and each forces its plans while in the block,
    restoring the planner's defaults after."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import benchmoe

    from jitmarlin.kernels.moe import plan as moe_plan

    assert benchmoe.moe_kinds("wgmma,mma,wgmma") == ["wgmma", "mma"] and benchmoe.moe_kinds(None) == ["auto"]
    with pytest.raises(SystemExit, match="unknown kind"):
        benchmoe.moe_kinds("auto,cutlass")
    h = get_profile("h100")
    dec = _problem(1, 2, 8, 4096, 14336, "float16", "uint4b8", 128)
    big = _problem(1024, 2, 8, 4096, 14336, "float16", "uint4b8", 128)
    with benchmoe.moe_kind("wgmma"):
        assert plan_moe(h, dec).wgmma and plan_moe(h, big).wgmma
    with benchmoe.moe_kind("mma"):
        assert not plan_moe(h, dec).gemv and not plan_moe(h, dec).wgmma and not plan_moe(h, big).wgmma
    with benchmoe.moe_kind("auto"):
        assert plan_moe(h, dec).gemv and plan_moe(h, big).wgmma
    assert moe_wgmma.WGMMA_DEFAULT is None and moe_plan.GEMV_MAX_ROWS == 8
