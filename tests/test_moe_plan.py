"""MoE plans for the six models' expert shapes on every profile: shared memory within the GPU's
limit, grids sized for the worst routing, and (slow) every planned kernel compiled by NVRTC for
the profile's arch without spills."""

from __future__ import annotations

import pytest

from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import default_cache
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.moe import MoEProblem, MoERouteSpec, plan_moe
from jitmarlin.service.fleet import load_manifest
from jitmarlin.weights.qtypes import kernel_dims

MOE_MODELS = ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v2-lite", "gpt-oss-20b", "gpt-oss-120b")


def _model(name):
    """(experts, top-k, hidden, intermediate, quant type, group, activation) from the shipped
    manifest; gpt-oss ships MXFP4 (its swigluoai models), the others as GPTQ-style int4."""
    m = load_manifest(name)
    q = ("mxfp4", 32) if m.moe.activation == "swigluoai" else ("uint4b8", 128)
    return (m.moe.experts, m.moe.topk, m.hidden_size, m.moe.intermediate, *q, m.moe.activation)


MODELS = {name: _model(name) for name in MOE_MODELS}
PROFILES = [
    ("v100", "float16"),
    ("t4", "float16"),
    ("a100", "bfloat16"),
    ("h100", "float16"),
    ("h100", "bfloat16"),
    ("rtx-pro-6000", "bfloat16"),
    ("b200", "float16"),
]
TOKENS = (1, 16, 256, 4096)


def _problem(model: str, tokens: int, act: str) -> MoEProblem:
    e, k, hidden, inter, qtype, group, activation = MODELS[model]
    n13, k13 = kernel_dims(2 * inter, hidden, group)
    n2, k2 = kernel_dims(hidden, inter, group)
    return MoEProblem(tokens, k, e, n13, k13, n2, k2, inter, hidden, act, qtype, group, activation)


def _plans(profile: str, act: str, direct: bool = False):
    """The planner's plans of the six models; direct: also the direct GEMV plans at T = 1."""
    prof = get_profile(profile)
    for model in MODELS:
        for t in TOKENS:
            plan = plan_moe(prof, _problem(model, t, act))
            yield model, t, plan
            if direct and t == 1 and plan.gemv:
                yield model, t, plan_moe(prof, _problem(model, t, act), direct=True)


@pytest.mark.parametrize("profile,act", PROFILES)
def test_moe_plans_fit(profile, act):
    prof = get_profile(profile)
    for model, t, plan in _plans(profile, act):
        p = plan.problem
        for spec in (plan.up, plan.down):
            spec.check()
            assert spec.smem_bytes() <= prof.smem_per_block, (model, t, spec.name)
            assert spec.path == ("sm90" if plan.wgmma else prof.path), (model, t, spec.name)
        assert plan.route.threads * 2 * 4 <= prof.smem_per_block
        assert p.experts <= plan.route.threads
        # worst routing: every expert gets pairs, each a partly filled block
        assert plan.max_blocks * plan.block_m >= p.pairs + min(p.experts, p.pairs) * (plan.block_m - 1)
        assert plan.grid_up == plan.max_blocks * -(-p.n13 // plan.up.tile_n)
        assert p.k13 % plan.up.tile_k == 0 and p.k2 % plan.down.tile_k == 0


@pytest.mark.slow
@pytest.mark.parametrize("profile,act", PROFILES)
def test_moe_kernels_compile_without_spills(profile, act):
    prof = get_profile(profile)
    if prof.arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {prof.arch}")
    specs = {}
    for _, _, plan in _plans(profile, act, direct=True):
        for spec in (plan.route, plan.up, plan.down):
            specs[spec.canonical()] = spec
    for spec in specs.values():
        art, _, _ = default_cache().get(spec, prof.arch)
        assert art.cubin[:4] == b"\x7fELF"
        r = art.resources
        assert r["registers"] is not None and r["registers"] <= 255, (spec.name, r)
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (spec.name, r)
        if not isinstance(spec, MoERouteSpec):
            assert spec.smem_bytes() + r["static_shared_bytes"] <= prof.smem_per_block
            mma = (
                "wgmma.mma_async"
                if spec.path == "sm90"
                else "mma.sync.aligned.m8n8k4"
                if prof.path == "sm70"
                else "mma.sync.aligned.m16n8"
            )
            assert mma in art.ptx


def test_measured_row_block_and_gemv_rules():
    """The planner rules tools/PERF.md e115 rests on, on the six models: a wgmma row block of 32
    rows up to 16 an expert, 64 up to 64, 128 beyond; a GEMV warp that splits K keeps at least three
    batches of k16 rows (Qwen3-30B-A3B's w13 at T = 1: 8 of 16 warps split its 128 rows)."""
    from jitmarlin.kernels.moe.spec import MoEGemvSpec
    from jitmarlin.kernels.moe.wgmma import rows_per_expert

    h = get_profile("h100")
    seen = set()
    for model in MODELS:
        for t in (1, 4, 64, 128, 256, 1024):
            p = _problem(model, t, "float16")
            plan = plan_moe(h, p)
            if plan.wgmma:
                rows = rows_per_expert(p.pairs, p.experts)
                assert plan.up.tm == plan.down.tm == (2 if rows <= 16 else 4 if rows <= 64 else 8), (model, t)
                assert plan.down.tn == 8 and plan.up.tn == (16 if plan.up.tm <= 4 and plan.up.bits == 4 else 8)
                seen.add(plan.up.tm)
            for spec, k in ((plan.up, p.k13), (plan.down, p.k2)):
                if isinstance(spec, MoEGemvSpec) and spec.kwarps > 1:
                    assert (k // 16) // spec.kwarps >= 3 * spec.unroll, (model, t, spec.name)
    assert seen == {2, 4, 8}
    qwen = plan_moe(h, _problem("qwen3-30b-a3b", 1, "float16")).up
    assert (qwen.warps, qwen.kwarps, qwen.unroll) == (8, 8, 4)


def test_direct_gemv_plans():
    """plan_moe(direct=True): the GEMV kind at T = 1 without the alignment launch (k row blocks,
    one pair each; the planner's tiles, direct). Refused at T > 1, for the other kinds and off the
    sm80 path. The planner takes it wherever its own T = 1 plan is the GEMV kind (e118), and not
    where a caller's override or direct=False asks for the sorted plan. Direct specs differ in
    name and canonical form, parse back, and only their sources read topk_ids (the sorted kernels' sources hold no direct code)."""
    from dataclasses import replace

    from jitmarlin.errors import InputError
    from jitmarlin.kernels.moe import MoEGemvSpec
    from jitmarlin.kernels.render import render
    from jitmarlin.kernels.spec import spec_from_canonical

    h = get_profile("h100")
    for model in MODELS:
        p = _problem(model, 1, "bfloat16")
        base = plan_moe(h, p, direct=False)
        if not base.gemv:
            assert not plan_moe(h, p).direct
            continue
        plan = plan_moe(h, p, direct=True, pdl=False)  # (the default adds pdl on sm_90: test_auto_pdl)
        assert plan_moe(h, p, pdl=False) == plan and plan_moe(h, p, gemv=True, pdl=False) == plan
        for kw in (dict(up=base.up, down=base.down), dict(splits=1, direct=False)):
            assert not plan_moe(h, p, **kw).direct
        assert not base.direct and plan.direct and plan.max_blocks == p.topk
        assert plan.up == replace(base.up, direct=True) and plan.down == replace(base.down, direct=True)
        assert plan.route == base.route  # (its combine kernel still runs)
        assert plan.grid_up == p.topk * -(-p.n13 // plan.up.tile_n)
        assert plan_moe(h, p, up=plan.up, down=plan.down).direct  # direct tiles: a direct plan
        for d, s in ((plan.up, base.up), (plan.down, base.down)):
            assert d.name == s.name + "d" and d.canonical() != s.canonical()
            assert '"direct"' not in s.canonical() and '"direct":true' in d.canonical()
            assert spec_from_canonical(d.canonical()) == d and spec_from_canonical(s.canonical()) == s
            for target in ("cuda", "emu"):
                assert "local_expert" in render(d, target) and "local_expert" not in render(s, target)
                assert "ld_i32(sorted + mb * BM" in render(s, target)
                assert "ld_i32(sorted" not in render(d, target) and "n_rows)" not in render(d, target)
        with pytest.raises(InputError, match="tokens == 1"):
            plan_moe(h, _problem(model, 2, "bfloat16"), direct=True)
        for kw in (dict(tm=1), dict(gemv=False), dict(wgmma=True), dict(up=base.up, down=base.down)):
            with pytest.raises(InputError, match="direct"):
                plan_moe(h, p, direct=True, **kw)
        with pytest.raises(InputError, match="all direct"):
            plan_moe(h, p, up=plan.up, down=base.down)
    with pytest.raises(InputError, match="sm80 path"):
        plan_moe(get_profile("t4"), _problem("mixtral-8x7b", 1, "float16"), direct=True)
    with pytest.raises(ValueError, match="direct"):
        MoEGemvSpec("sm80", "uint4b8", "float16", 8, 8, 2, 2, "up", "silu", 1).check()


def test_sixteen_row_gemv_plans():
    """gemv_rows16: the GEMV kind in blocks of 16 routed rows (two token blocks), by override: at most
    8 warps, names end in r16 and canonical forms carry it (the 8-row defaults' do not), the route
    pads each expert to 16 rows; refused with 16 warps, in a direct block, or on one stage only."""
    from dataclasses import replace

    from jitmarlin.errors import InputError
    from jitmarlin.kernels.moe.plan import gemv_rows16
    from jitmarlin.kernels.spec import spec_from_canonical

    h = get_profile("h100")
    p = _problem("mixtral-8x7b", 64, "float16")  # 16 rows an expert
    g = plan_moe(h, p, gemv=True)
    up, down = gemv_rows16(g.up), gemv_rows16(g.down)
    for b, s in ((g.up, up), (g.down, down)):
        assert s.rows == 16 and s.warps <= 8 and s.warps // s.kwarps == min(b.warps // b.kwarps, s.warps)
        assert s.name.endswith("r16") and '"rows":16' in s.canonical() and '"rows"' not in b.canonical()
        assert spec_from_canonical(s.canonical()) == s
        assert s.smem_bytes() == 4 * s.warps * (16 * 64 + 4)  # each warp's sums of 16 rows
    plan = plan_moe(h, p, up=up, down=down)
    assert plan.block_m == plan.route.block_m == 16 and plan.max_blocks * 16 >= p.pairs + p.experts * 15
    assert g.up.warps == 16 or g.down.warps == 16  # (so the 8-warp rule below is exercised)
    for bad, msg in (
        (replace(g.up if g.up.warps == 16 else g.down, rows=16), "at most 8 warps"),
        (replace(up, direct=True), "direct"),
        (replace(up, rows=12), "rows must be 8 or 16"),
    ):
        with pytest.raises(ValueError, match=msg):
            bad.check()
    with pytest.raises(InputError, match="rows"):
        plan_moe(h, p, up=up, down=g.down)


def test_pdl_gemv_plans():
    """plan_moe(pdl=True): the GEMV kind's three kernels built for programmatic dependent launch
    (names end in p, canonical forms carry it, the defaults' do not); refused off sm_90+, for
    another kind, and for GEMV tiles that disagree."""
    from dataclasses import replace

    from jitmarlin.errors import InputError
    from jitmarlin.kernels.moe.spec import MoERouteSpec
    from jitmarlin.kernels.spec import spec_from_canonical

    h = get_profile("h100")
    for t in (1, 4):
        p = _problem("qwen3-30b-a3b", t, "bfloat16")
        base, plan = plan_moe(h, p, pdl=False), plan_moe(h, p, pdl=True)
        assert base.gemv and not base.pdl and plan.pdl and plan.direct == base.direct == (t == 1)
        for b, s in ((base.up, plan.up), (base.down, plan.down)):
            assert s == replace(b, pdl=True) and s.name == b.name + "p"
            assert '"pdl":true' in s.canonical() and '"pdl"' not in b.canonical()
            assert spec_from_canonical(s.canonical()) == s
        assert plan.route == replace(base.route, pdl=True) and plan.route.combine_name == base.route.combine_name + "p"
        assert MoERouteSpec.from_canonical(plan.route.canonical()) == plan.route
        assert '"pdl"' not in base.route.canonical()
        assert plan_moe(h, p, up=plan.up, down=plan.down).pdl  # pdl tiles: a pdl plan
        with pytest.raises(InputError, match="all pdl"):
            plan_moe(h, p, up=plan.up, down=base.down)
        for kw in (dict(gemv=False), dict(wgmma=True)):
            with pytest.raises(InputError, match="pdl"):
                plan_moe(h, p, pdl=True, **kw)
    with pytest.raises(InputError, match="sm_90"):
        plan_moe(get_profile("a100"), _problem("qwen3-30b-a3b", 1, "float16"), pdl=True)
    with pytest.raises(InputError, match="GEMV kind"):
        plan_moe(h, _problem("mixtral-8x7b", 1024, "float16"), pdl=True)


def test_auto_pdl(monkeypatch):
    """pdl=None (the default) with AUTO_PDL: the planner's direct GEMV plans on sm_90+ are its pdl
    plans (e125); sorted GEMV plans, other kinds, tiles given by the caller, pdl=False and GPUs
    before sm_90 keep plain launches. Without AUTO_PDL (until its GPU test has run) no default
    plan has PDL."""
    from jitmarlin.kernels.moe import plan as moe_plan

    h, a = get_profile("h100"), get_profile("a100")
    monkeypatch.setattr(moe_plan, "AUTO_PDL", False)
    assert not any(plan_moe(h, _problem(m, 1, "float16")).pdl for m in MODELS)
    monkeypatch.setattr(moe_plan, "AUTO_PDL", True)
    seen = 0
    for model in MODELS:
        for act in ("float16", "bfloat16"):
            for t in (1, 4, 256):
                p = _problem(model, t, act)
                plan, off = plan_moe(h, p), plan_moe(h, p, pdl=False)
                assert plan.pdl == (off.gemv and off.direct), (model, t)
                if plan.pdl:
                    seen += 1
                    assert plan == plan_moe(h, p, pdl=True) == plan_moe(h, p, direct=True)
                    assert not plan_moe(h, p, up=off.up, down=off.down).pdl  # the caller's tiles, as given
                    assert not plan_moe(h, p, direct=False).pdl
                assert not plan_moe(a, p).pdl
    assert seen >= len(MODELS)  # every model's T = 1 plan is direct on the H100
    with pytest.raises(Exception, match="True, False or None"):
        plan_moe(h, _problem("mixtral-8x7b", 1, "float16"), pdl=1)


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["uint4b8", "float8_e4m3fn", "mxfp4"])
def test_sixteen_row_gemv_kernels_compile_without_spills(qtype):
    """gemv_rows16's tiles of the Mixtral T = 64 and Qwen3-30B T = 256 plans (16 rows an expert)
    for sm_90 and sm_120, both dtypes: no spills (16 warps a block spilled: hence at most 8)."""
    from jitmarlin.jit.cache import default_cache
    from jitmarlin.kernels.moe.plan import gemv_rows16

    for prof_name, arch in (("h100", "sm_90"), ("rtx-pro-6000", "sm_120")):
        prof = get_profile(prof_name)
        for act in ("float16", "bfloat16"):
            for model, t in (("mixtral-8x7b", 64), ("qwen3-30b-a3b", 256)):
                e, k, hidden, inter, _, _, activation = MODELS[model]
                group = {"uint4b8": 128, "float8_e4m3fn": -1, "mxfp4": 32}[qtype]
                n13, k13 = kernel_dims(2 * inter, hidden, group)
                n2, k2 = kernel_dims(hidden, inter, group)
                p = MoEProblem(t, k, e, n13, k13, n2, k2, inter, hidden, act, qtype, group, activation)
                g = plan_moe(prof, p, gemv=True)
                for spec in (gemv_rows16(g.up), gemv_rows16(g.down)):
                    art, _, _ = default_cache().get(spec, arch)
                    r = art.resources
                    assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (spec.name, arch, r)


# ---- the GEMV kind's launch bounds --------------------------------------------------------------

GEMV_GROUP_BLOCKS = {"uint4b8": 8, "uint4": 8, "uint8b128": 8, "float8_e4m3fn": -1, "nvfp4": 1, "mxfp4": 2}


def test_gemv_tiles_are_built_for_sixteen_warps_an_sm():
    """8-row blocks with batches of up to four 16-byte loads a lane: launch bounds for 16 warps an
    SM (128 registers a thread); 16-row blocks and 8-bit batches of 4: one block. 16-warp blocks
    refuse 8-bit batches of 4 (they spilled at 128 registers), and the planner's batches are 4 k16
    rows for 4-bit types, 2 for 8-bit ones."""
    from jitmarlin.kernels.moe.spec import MoEGemvSpec

    for qt, gb in GEMV_GROUP_BLOCKS.items():
        bits = MoEGemvSpec("sm80", qt, "float16", gb, 8, 1, 1).bits
        for warps in (4, 8, 16):
            for unroll in (1, 2, 4):
                s = MoEGemvSpec("sm80", qt, "float16", gb, warps, 1, unroll)
                if warps == 16 and unroll * bits // 4 > 4:
                    with pytest.raises(ValueError, match="16 warps"):
                        s.check()
                    continue
                s.check()
                want = 16 // warps if unroll * bits // 4 <= 4 else 1
                assert s.occupancy == want, (s.name, s.occupancy)
                assert s.smem_per_sm() == want * (s.smem_bytes() + 1024)
        r16 = MoEGemvSpec("sm80", qt, "float16", gb, 8, 1, 2, rows=16)
        assert r16.occupancy == 1
    h = get_profile("h100")
    for qt in ("uint8b128", "float8_e4m3fn"):
        group = 128 if qt == "uint8b128" else -1
        n13, k13 = kernel_dims(2 * 768, 2048, group)
        n2, k2 = kernel_dims(2048, 768, group)
        plan = plan_moe(h, MoEProblem(1, 8, 128, n13, k13, n2, k2, 768, 2048, "float16", qt, group, "silu"))
        assert plan.gemv and plan.up.unroll == plan.down.unroll == 2, (plan.up.name, plan.down.name)
        assert plan.up.occupancy == 16 // plan.up.warps


# Known: NVRTC lets these one-column-block tiles (kwarps == warps) spill a register or two on
# sm_120 at 128 registers (16-warp blocks, bounded before this rule too, did the same): stored
# once before the K loop, reloaded in the epilogue (uint4 w8k8u4 down, NVRTC 13). Checked to
# stay that small.
_SM120_SMALL_SPILLS = {("nvfp4", "float16", "up"), ("uint4", "float16", "up"), ("uint4", "bfloat16", "up")}
_SM120_SMALL_SPILLS |= {("uint4", "float16", "down"), ("uint4", "bfloat16", "down")}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_gemv_tiles_fit_their_launch_bounds(arch):
    """Tiles of 4 and 8 warps (one column block a block, the planner's batch), every quant type,
    both dtypes and stages: within the 128 registers of 16 warps an SM, without spills (but for
    the small sm_120 ones above). Unbounded, the 4-bit types took 141-192 registers on sm_90: one
    8-warp block an SM."""
    from jitmarlin.kernels.moe.spec import MoEGemvSpec

    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch}")
    for qt, gb in GEMV_GROUP_BLOCKS.items():
        unroll = 4 if MoEGemvSpec("sm80", qt, "float16", gb, 8, 1, 1).bits == 4 else 2
        for act in ("float16", "bfloat16"):
            for warps, stage in ((4, "up"), (8, "down")):
                s = MoEGemvSpec("sm80", qt, act, gb, warps, warps, unroll, stage, "silu" if stage == "up" else "")
                r = default_cache().get(s, arch)[0].resources
                assert s.occupancy == 16 // warps and r["registers"] <= 128, (s.name, arch, r)
                if arch == "sm_120" and (qt, act, stage) in _SM120_SMALL_SPILLS:
                    assert r["spill_stores"] <= 8 and r["stack_bytes"] <= 8, (s.name, arch, r)
                else:
                    assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (s.name, arch, r)


def test_decode_gemv_tiles_balance_the_sms():
    """At T = 1 the planner trades a tile whose blocks take one wave and a half for one whose
    blocks are all resident and spread evenly, where that is clearly better: gpt-oss-20b's w13
    (4 pairs x 90 column blocks) as 360 blocks of 4 warps, not 180 of 16 (the busiest SM's load
    over an even share 0.91, not 0.68); Qwen3-30B and Mixtral keep theirs; T > 1 is untouched."""
    from jitmarlin.kernels.moe.plan import _balance

    h = get_profile("h100")
    assert round(_balance(h, 4, 90, 16, 8), 2) == 0.68 and round(_balance(h, 4, 90, 4, 4), 2) == 0.91
    got = {}
    for model in ("gpt-oss-20b", "qwen3-30b-a3b", "mixtral-8x7b"):
        plan = plan_moe(h, _problem(model, 1, "float16"))
        assert plan.gemv and plan.direct
        got[model] = ((plan.up.warps, plan.up.kwarps), (plan.down.warps, plan.down.kwarps))
        for spec, n in ((plan.up, plan.problem.n13), (plan.down, plan.problem.n2)):
            assert plan.grid(spec, n) <= h.sms * spec.occupancy or spec.warps == 16, (model, spec.name)
    assert got == {
        "gpt-oss-20b": ((4, 4), (8, 8)),
        "qwen3-30b-a3b": ((8, 8), (4, 4)),
        "mixtral-8x7b": ((16, 4), (16, 16)),
    }
    t16 = plan_moe(h, _problem("gpt-oss-20b", 16, "float16"))
    assert (t16.up.warps, t16.up.kwarps) == (4, 1)  # the T = 16 rule as before
