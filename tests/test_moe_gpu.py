"""jitmarlin.moe on a GPU against the float64 per-expert reference: quant types, dtypes, expert
counts, top-k, token counts, routings that leave experts empty or put every token on one, half
the experts on another GPU, torch tensors, and a CUDA graph replayed with new routing each time."""

from __future__ import annotations

import numpy as np
import pytest

import jitmarlin
from jitmarlin.reference import ATOL_U_MOE, check_output, moe_reference
from jitmarlin.weights import halves
from jitmarlin.weights.moe import quantize_moe

pytestmark = pytest.mark.gpu

QTYPES = [("uint4b8", 128), ("uint4", 64), ("uint8b128", -1), ("float8_e4m3fn", 128), ("nvfp4", 16), ("mxfp4", 32)]
SHAPES = [(8, 2, 1), (32, 4, 7), (64, 6, 64), (128, 8, 1000), (8, 1, 4096)]  # E, k, T
_weights_cache: dict = {}


def _weights(qtype, group, e, hidden=256, inter=128, seed=0, bias=False):
    key = (qtype, group, e, hidden, inter, seed, bias)
    if key not in _weights_cache:
        r = np.random.default_rng(seed)
        w13 = quantize_moe(
            r.standard_normal((e, 2 * inter, hidden)) * 0.05,
            qtype,
            group,
            gated=True,
            bias=r.standard_normal((e, 2 * inter)) * 0.3 if bias else None,
        )
        w2 = quantize_moe(
            r.standard_normal((e, hidden, inter)) * 0.05,
            qtype,
            group,
            bias=r.standard_normal((e, hidden)) * 0.3 if bias else None,
        )
        _weights_cache[key] = (w13, w2)
    return _weights_cache[key]


def _routing(rng, t, k, e):
    ids = np.argsort(rng.random((t, e)), axis=1)[:, :k].astype(np.int32)  # k distinct experts a token
    return ids, (rng.random((t, k)) + 0.05).astype(np.float32)


def _check(cp, rng, seed, w13, w2, ids, tw, act, *, activation="silu", expert_map=None, what=""):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels.plan_base import PATH_ACTS

    if act not in PATH_ACTS[planning_profile(0).path]:  # JITMARLIN_EMULATE of a GPU without bf16
        pytest.skip(f"{act} is not supported on the {planning_profile(0).name} path")
    t = ids.shape[0]
    x = rng.standard_normal((t, w13.in_features)).astype(np.float32)
    xb = halves.to_bits(x, act)
    dt = cp.float16 if act == "float16" else None
    xd = cp.asarray(xb).view(cp.float16) if dt is not None else None
    if act == "bfloat16":
        torch = pytest.importorskip("torch")
        xd = torch.from_numpy(xb.view(np.int16)).cuda().view(torch.bfloat16)
        idd, twd = torch.from_numpy(ids).cuda(), torch.from_numpy(tw).cuda()
        emd = None if expert_map is None else torch.from_numpy(expert_map).cuda()
        out = jitmarlin.moe(xd, w13, w2, twd, idd, activation=activation, expert_map=emd)
        got = halves.from_bits(out.view(torch.int16).cpu().numpy().view(np.uint16), act)
    else:
        emd = None if expert_map is None else cp.asarray(expert_map)
        out = jitmarlin.moe(xd, w13, w2, cp.asarray(tw), cp.asarray(ids), activation=activation, expert_map=emd)
        got = halves.from_bits(cp.asnumpy(out.view(cp.uint16)), act)
    ref = moe_reference(
        halves.from_bits(xb, act), w13, w2, tw, ids, activation=activation, expert_map=expert_map, act=act
    )
    check_output(got, ref, act, what=what, seed=seed, family="moe", atol_u=ATOL_U_MOE)


@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("qtype,group", QTYPES)
@pytest.mark.parametrize("e,k,t", SHAPES)
def test_moe_gpu(rng, seed, qtype, group, act, e, k, t):
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights(qtype, group, e)
    ids, tw = _routing(rng, t, k, e)
    _check(cp, rng, seed, w13, w2, ids, tw, act, what=f"moe {qtype} {act} E={e} k={k} T={t}")


@pytest.mark.parametrize("activation", ["silu", "gelu", "swigluoai"])
def test_moe_gpu_activations_bias(rng, seed, activation):
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights("mxfp4", 32, 8, bias=True)
    ids, tw = _routing(rng, 64, 4, 8)
    _check(cp, rng, seed, w13, w2, ids, tw, "float16", activation=activation, what=f"moe {activation}")


def test_moe_gpu_all_tokens_one_expert(rng, seed):
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights("uint4b8", 128, 64)
    ids = np.tile(np.array([[5, 9]], dtype=np.int32), (1000, 1))
    tw = (rng.random((1000, 2)) + 0.05).astype(np.float32)
    _check(cp, rng, seed, w13, w2, ids, tw, "float16", what="moe skewed")


def test_moe_gpu_expert_map_half_absent(rng, seed):
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights("uint4b8", 128, 32)
    emap = np.full(64, -1, dtype=np.int32)
    emap[::2] = np.arange(32, dtype=np.int32)
    ids, tw = _routing(rng, 300, 6, 64)
    _check(cp, rng, seed, w13, w2, ids, tw, "float16", expert_map=emap, what="moe expert_map")


def _graph_replay(cp, rng, seed, w13, w2, act, routings, what, expert_map=None):
    """jitmarlin.moe captured once on routings[0] (static T), then replayed with each later (ids,
    weights) copied into the captured buffers on the capture stream, the output poisoned first:
    every replay matches the reference of its own routing."""
    t = routings[0][0].shape[0]
    x = cp.asarray(halves.to_bits(rng.standard_normal((t, w13.in_features)), act)).view(cp.float16)
    ids_d, tw_d = cp.asarray(routings[0][0]), cp.asarray(routings[0][1])
    emap_d = None if expert_map is None else cp.asarray(expert_map)
    out = cp.empty((t, w13.in_features), dtype=cp.float16)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        jitmarlin.moe(x, w13, w2, tw_d, ids_d, expert_map=emap_d, out=out)  # warm-up: plan, compile, workspaces
        s.synchronize()
        s.begin_capture()
        jitmarlin.moe(x, w13, w2, tw_d, ids_d, expert_map=emap_d, out=out)
        graph = s.end_capture()
    xr = halves.from_bits(cp.asnumpy(x.view(cp.uint16)), act)
    for step, (ids, tw) in enumerate(routings[1:]):
        with s:  # (a non-blocking stream: the copies and the poison on it, ahead of the replay)
            ids_d.set(ids)
            tw_d.set(tw)
            out.fill(cp.nan)
        graph.launch(s)
        s.synchronize()
        got = halves.from_bits(cp.asnumpy(out.view(cp.uint16)), act)
        check_output(
            got,
            moe_reference(xr, w13, w2, tw, ids, expert_map=expert_map, act=act),
            act,
            what=f"{what} step {step}" + (f" {ids.tolist()}" if ids.size <= 16 else ""),
            seed=seed,
            family="moe",
            atol_u=ATOL_U_MOE,
        )


def _replay_routings(rng, t, k, e, replays):
    """A captured routing and `replays` more, the last with every slot on expert 7."""
    routings = [_routing(rng, t, k, e) for _ in range(replays + 1)]
    routings[-1][0][:] = 7
    return routings


def test_moe_gpu_graph_replay_new_routing(rng, seed):
    """Captured once (static T = 16), replayed with fresh topk_ids and weights copied into the
    captured buffers: every replay matches the reference of its own routing."""
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights("uint4b8", 128, 32)
    _graph_replay(cp, rng, seed, w13, w2, "float16", _replay_routings(rng, 16, 4, 32, 4), "moe graph")


def test_moe_gpu_refuses_bad_input():
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights("uint4b8", 128, 8)
    x = cp.zeros((4, 256), dtype=cp.float16)
    ids = cp.zeros((4, 2), dtype=cp.int32)
    tw = cp.ones((4, 2), dtype=cp.float32)
    with pytest.raises(jitmarlin.InputError, match="hidden"):
        jitmarlin.moe(cp.zeros((4, 128), dtype=cp.float16), w13, w2, tw, ids)
    with pytest.raises(jitmarlin.InputError, match="topk_weights"):
        jitmarlin.moe(x, w13, w2, tw[:, :1], ids)
    with pytest.raises(jitmarlin.InputError, match="gated"):
        jitmarlin.moe(x, w2, w2, tw, ids)
    with pytest.raises(jitmarlin.InputError, match="topk == 1"):
        jitmarlin.moe(x, w13, w2, tw, ids, apply_router_weight_on_input=True)


def test_marlin_moe_compile_and_torch_graph(rng, seed):
    """jitmarlin.torch.MarlinMoE under torch.compile(fullgraph=True), then inside a torch CUDA graph
    replayed with new routing."""
    torch = pytest.importorskip("torch")
    import jitmarlin.torch as jmt

    w13, w2 = _weights("uint4b8", 128, 16)
    mod = jmt.MarlinMoE(w13, w2)
    t, k, act = 8, 2, "float16"
    xb = halves.to_bits(rng.standard_normal((t, w13.in_features)), act)
    x = torch.from_numpy(xb.view(np.int16)).cuda().view(torch.float16)
    ids, tw = _routing(rng, t, k, 16)
    ids_d, tw_d = torch.from_numpy(ids).cuda(), torch.from_numpy(tw).cuda()
    compiled = torch.compile(mod, fullgraph=True)
    xr = halves.from_bits(xb, act)

    def got(y):
        return halves.from_bits(y.view(torch.int16).cpu().numpy().view(np.uint16), act)

    check_output(
        got(compiled(x, tw_d, ids_d)),
        moe_reference(xr, w13, w2, tw, ids, act=act),
        act,
        what="MarlinMoE compiled",
        seed=seed,
        family="moe",
        atol_u=ATOL_U_MOE,
    )
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        mod(x, tw_d, ids_d)  # warm-up on the capture stream
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):  # the stream it was warmed up on (per-stream workspaces)
        y = mod(x, tw_d, ids_d)
    for _ in range(3):
        ids, tw = _routing(rng, t, k, 16)
        ids_d.copy_(torch.from_numpy(ids))
        tw_d.copy_(torch.from_numpy(tw))
        g.replay()
        torch.cuda.synchronize()
        check_output(
            got(y),
            moe_reference(xr, w13, w2, tw, ids, act=act),
            act,
            what="MarlinMoE graph",
            seed=seed,
            family="moe",
            atol_u=ATOL_U_MOE,
        )


def _run_plan(cp, rng, seed, w13, w2, ids, tw, plan, what):
    """jitmarlin.moe's runner with a given plan (the tuner's and sweep's way in), fp16, checked."""
    from jitmarlin.ops import moe as moe_ops

    t, k = ids.shape
    x = rng.standard_normal((t, w13.in_features))
    xb = halves.to_bits(x, "float16")
    xd = cp.asarray(xb).view(cp.float16)
    out = cp.full((t, w2.out_features), cp.nan, dtype=cp.float16)
    s = cp.cuda.get_current_stream()
    r = moe_ops._Runner(w13, w2, 0, "float16", t, k, s.ptr, "silu", False, plan=plan)
    ids_d, tw_d = cp.asarray(ids), cp.asarray(tw)  # (kept alive until the synchronize)
    r(xd.data.ptr, ids_d.data.ptr, tw_d.data.ptr, 0, w13.num_experts, out.data.ptr)
    s.synchronize()
    got = halves.from_bits(cp.asnumpy(out.view(cp.uint16)), "float16")
    ref = moe_reference(halves.from_bits(xb, "float16"), w13, w2, tw, ids, act="float16")
    check_output(got, ref, "float16", what=what, seed=seed, family="moe", atol_u=ATOL_U_MOE)


def _sm80_or_skip():
    from jitmarlin.jit.profiles import planning_profile

    if planning_profile(0).path != "sm80":
        pytest.skip("K splits and the GEMV kind are built on the sm80 path only")
    return planning_profile(0)


@pytest.mark.parametrize("t", [1, 5])
def test_moe_gpu_down_k_splits(rng, seed, t):
    """Decode shapes on the mma.sync kernels (forced: the planner takes the GEMV kind), whose w2 GEMM
    splits K (few row blocks x column tiles): fp32 partials added by the combine kernel."""
    cp = pytest.importorskip("cupy")
    from jitmarlin.kernels.moe import MoEProblem, plan_moe

    prof = _sm80_or_skip()
    w13, w2 = _weights("uint4b8", 128, 8, hidden=512, inter=2048, bias=True)
    plan = plan_moe(prof, MoEProblem(t, 2, 8, w13.n, w13.k, w2.n, w2.k, 2048, 512, "float16", "uint4b8", 128), tm=1)
    assert plan.splits > 1 and not plan.gemv
    ids, tw = _routing(rng, t, 2, 8)
    _run_plan(cp, rng, seed, w13, w2, ids, tw, plan, f"moe K splits {plan.splits} T={t}")


@pytest.mark.parametrize("qtype,group", QTYPES)
def test_moe_gpu_mma_kernels_at_decode(rng, seed, qtype, group):
    """The mma.sync grouped kernels on decode shapes (E=32, k=4, T=7), forced, for every type; the
    planner's GEMV kind runs them in test_moe_gpu."""
    cp = pytest.importorskip("cupy")
    from jitmarlin.kernels.moe import MoEProblem, plan_moe

    prof = _sm80_or_skip()
    w13, w2 = _weights(qtype, group, 32)
    p = MoEProblem(7, 4, 32, w13.n, w13.k, w2.n, w2.k, 128, 256, "float16", qtype, group)
    plan, gemv = plan_moe(prof, p, tm=1), plan_moe(prof, p)
    assert gemv.gemv and not plan.gemv
    ids, tw = _routing(rng, 7, 4, 32)
    _run_plan(cp, rng, seed, w13, w2, ids, tw, plan, f"moe mma.sync {qtype} T=7")


@pytest.mark.parametrize("qtype,group", QTYPES)
@pytest.mark.parametrize("t", [64, 100])
def test_moe_gpu_gemv_sixteen_rows(rng, seed, qtype, group, t):
    """The GEMV kind in blocks of 16 routed rows (kernels.moe.plan.gemv_rows16, by override): E=8,
    k=2, 16 and 25 rows an expert (one and two row blocks), every type."""
    cp = pytest.importorskip("cupy")
    from jitmarlin.kernels.moe import MoEProblem, plan_moe
    from jitmarlin.kernels.moe.plan import gemv_rows16

    prof = _sm80_or_skip()
    w13, w2 = _weights(qtype, group, 8)
    p = MoEProblem(t, 2, 8, w13.n, w13.k, w2.n, w2.k, 128, 256, "float16", qtype, group)
    g = plan_moe(prof, p, gemv=True)
    plan = plan_moe(prof, p, up=gemv_rows16(g.up), down=gemv_rows16(g.down))
    assert plan.block_m == 16
    ids, tw = _routing(rng, t, 2, 8)
    _run_plan(cp, rng, seed, w13, w2, ids, tw, plan, f"moe gemv 16 rows {qtype} T={t}")


def test_moe_gpu_w2_of_another_quant_type(rng, seed):
    """A GGUF-style mix: w13 uint4 (zero points, group 32), w2 uint8b128 group 16."""
    cp = pytest.importorskip("cupy")
    r = np.random.default_rng(5)
    w13 = quantize_moe(r.standard_normal((16, 256, 256)) * 0.05, "uint4", 32, gated=True)
    w2 = quantize_moe(r.standard_normal((16, 256, 128)) * 0.05, "uint8b128", 16)
    ids, tw = _routing(rng, 40, 2, 16)
    _check(cp, rng, seed, w13, w2, ids, tw, "float16", what="moe uint4 + uint8b128")


def test_moe_gpu_layers_share_workspaces(rng, seed):
    """Two MoE layers of different sizes, called alternately on one stream (and the second growing
    the shared workspaces after the first was set up), each match their reference."""
    cp = pytest.importorskip("cupy")
    from jitmarlin.ops import moe as moe_ops

    a13, a2 = _weights("uint4b8", 128, 8)
    b13, b2 = _weights("uint4b8", 128, 16, hidden=512, inter=256)
    for step in range(2):
        for w13, w2, e, t in ((a13, a2, 8, 7), (b13, b2, 16, 300)):
            ids, tw = _routing(rng, t, 2, e)
            _check(cp, rng, seed, w13, w2, ids, tw, "float16", what=f"moe shared workspaces E={e} step {step}")
    assert any(k[2] == "h" for k in moe_ops._workspaces)


def test_moe_gpu_up_k_splits(rng, seed):
    """A plan with the w13 GEMM split over K (the tuner's and sweep's option: partial sums, then the
    activation kernel), run through the op's runner."""
    cp = pytest.importorskip("cupy")
    from dataclasses import replace

    from jitmarlin.kernels.moe import MoEProblem, plan_moe

    prof = _sm80_or_skip()
    w13, w2 = _weights("uint4b8", 128, 8, hidden=1024, inter=256, bias=True)
    t, k = 3, 2
    ids, tw = _routing(rng, t, k, 8)
    p = MoEProblem(t, k, 8, w13.n, w13.k, w2.n, w2.k, 256, 1024, "float16", "uint4b8", 128)
    plan = replace(plan_moe(prof, p, tm=1), up_splits=4)
    _run_plan(cp, rng, seed, w13, w2, ids, tw, plan, "moe up_splits=4")


# ---- the direct GEMV plan at T = 1 (no alignment launch; by override until timed) ---------------

DIRECT = [  # E local, k, qtype, group, act, expert_map (global 2E, odd ids here), duplicated expert
    (8, 1, "uint4b8", 128, "float16", False, False),
    (8, 2, "uint4b8", 128, "bfloat16", True, True),
    (64, 8, "uint4b8", 128, "float16", True, True),
    (64, 8, "uint4b8", 128, "bfloat16", False, False),
    (64, 8, "mxfp4", 32, "bfloat16", False, True),
    (64, 2, "uint8b128", -1, "float16", True, False),
    (8, 8, "nvfp4", 16, "float16", True, True),
]


@pytest.fixture
def direct_plans(monkeypatch):
    """jitmarlin.moe with the direct plan forced at T = 1 (fresh runners, dropped afterwards)."""
    import weakref

    from jitmarlin.kernels.moe import plan_moe
    from jitmarlin.ops import moe as moe_ops

    _sm80_or_skip()
    monkeypatch.setattr(moe_ops, "_runners", weakref.WeakKeyDictionary())
    monkeypatch.setattr(
        moe_ops.moe_tuned, "plan_for", lambda prof, arch, p, cache: plan_moe(prof, p, direct=p.tokens == 1)
    )
    return moe_ops


def _direct_routing(rng, k, e, emap, dup):
    n_global = 2 * e if emap else e
    ids, tw = _routing(rng, 1, k, n_global)
    expert_map = None
    if emap:
        expert_map = np.full(n_global, -1, dtype=np.int32)
        expert_map[1::2] = np.arange(e, dtype=np.int32)
        ids[0, 0] = 2 * (ids[0, 0] // 2) + 1  # slot 0 on this GPU
        if k >= 2:
            ids[0, 1] = n_global + 3  # outside the map: dropped
    if dup:
        ids[0, -1] = ids[0, 0]
    return ids, tw, expert_map


@pytest.mark.parametrize("e,k,qtype,group,act,emap,dup", DIRECT)
def test_moe_gpu_direct_one_token(rng, seed, direct_plans, e, k, qtype, group, act, emap, dup):
    """T = 1 through jitmarlin.moe on the direct plan: three launches, the GEMV kernels reading the
    routing; experts on another GPU, ids outside the map and a duplicated expert in the top-k."""
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights(qtype, group, e)
    ids, tw, expert_map = _direct_routing(rng, k, e, emap, dup)
    _check(cp, rng, seed, w13, w2, ids, tw, act, expert_map=expert_map, what=f"moe direct {qtype} {ids.tolist()}")
    runners = list(direct_plans._runners[w13].values())
    assert runners and all(r.plan.direct and r.align is None for r in runners)


def test_moe_gpu_direct_graph_replay(rng, seed, direct_plans):
    """The direct plan captured once at T = 1 (expert_map with absent experts), replayed with new
    routings (a duplicated expert, an id outside the map) copied into the captured buffers."""
    cp = pytest.importorskip("cupy")
    e, k = 32, 4
    w13, w2 = _weights("uint4b8", 128, e)
    ids0, tw0, emap = _direct_routing(rng, k, e, True, False)
    routings = [(ids0, tw0)] + [_direct_routing(rng, k, e, step % 2 == 0, step >= 2)[:2] for step in range(5)]
    routings[-1][0][:] = 7  # every slot on one expert (7: on this GPU)
    _graph_replay(cp, rng, seed, w13, w2, "float16", routings, "moe direct graph", expert_map=emap)
    assert all(r.plan.direct for r in direct_plans._runners[w13].values())


# ---- programmatic dependent launch of the GEMV kind (by override until timed) ---------------------


@pytest.fixture
def pdl_plans(monkeypatch):
    """jitmarlin.moe with the GEMV kind built for programmatic dependent launch (sm_90+ only)."""
    import weakref

    from jitmarlin.kernels.moe import plan_moe
    from jitmarlin.ops import moe as moe_ops

    prof = _sm80_or_skip()
    if prof.cc < (9, 0):
        pytest.skip(f"programmatic dependent launch needs sm_90+, not {prof.name}")
    monkeypatch.setattr(moe_ops, "_runners", weakref.WeakKeyDictionary())
    monkeypatch.setattr(moe_ops.moe_tuned, "plan_for", lambda prof, arch, p, cache: plan_moe(prof, p, pdl=True))
    return moe_ops


@pytest.mark.parametrize(
    "t,k,e,qtype,group,act", [(1, 8, 64, "uint4b8", 128, "bfloat16"), (5, 2, 8, "mxfp4", 32, "float16")]
)
def test_moe_gpu_pdl(rng, seed, pdl_plans, t, k, e, qtype, group, act):
    """The GEMV kind with the w2 GEMV and the combine launched behind the kernel before them
    (cuLaunchKernelEx, programmatic stream serialization), direct at T = 1, sorted at T = 5."""
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights(qtype, group, e)
    ids, tw = _routing(rng, t, k, e)
    _check(cp, rng, seed, w13, w2, ids, tw, act, what=f"moe pdl T={t} {qtype} {act}")
    runners = list(pdl_plans._runners[w13].values())
    assert runners and all(r.plan.pdl and r.down_pdl is not None for r in runners)


def test_moe_gpu_pdl_graph_replay(rng, seed, pdl_plans):
    """The pdl plan at T = 1 captured once and replayed with new routings: the launches behind one
    another stay ordered inside a CUDA graph."""
    cp = pytest.importorskip("cupy")
    w13, w2 = _weights("uint4b8", 128, 32)
    _graph_replay(cp, rng, seed, w13, w2, "float16", _replay_routings(rng, 1, 4, 32, 4), "moe pdl graph")
    assert all(r.plan.pdl for r in pdl_plans._runners[w13].values())
