"""jitmarlin.linear: argument checking (CPU) and correctness on the GPU against a float64
reference computed from the quantized values themselves (not from the package's unpacker)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_cases import ACTS, Case, cases, check_forced, check_linear, rel

import jitmarlin
from jitmarlin import InputError, QuantizedWeight
from jitmarlin.ops.linear import _rows

# ---- CPU: argument checks that need no GPU ---------------------------------------------------


def test_rows_flattens_leading_dims():
    assert _rows((3, 5, 128), (640, 128, 1), 128) == (15, 128)
    assert _rows((128,), (1,), 128) == (1, 128)
    assert _rows((4, 128), (256, 1), 128) == (4, 256)  # row stride wider than K
    assert _rows((2, 1, 128), (12480, 4160, 1), 128) == (2, 12480)  # size-1 dims ignored
    assert _rows((1, 1, 128), (7, 7, 1), 128) == (1, 128)


@pytest.mark.parametrize(
    "shape,strides,msg",
    [
        ((4, 64), (64, 1), "in_features = 128"),
        ((4, 128), (1, 4), "contiguous along its last"),
        ((4, 128), (132, 1), "multiple of 8"),
        ((2, 3, 128), (1024, 128, 1), "cannot be flattened"),
    ],
)
def test_rows_rejects(shape, strides, msg):
    with pytest.raises(InputError, match=msg):
        _rows(shape, strides, 128)


def test_linear_rejects_host_arrays(rng):
    qw = jitmarlin.quantize(rng.standard_normal((64, 128)), "uint4b8", 128)
    with pytest.raises(InputError, match="host"):
        jitmarlin.linear(np.zeros((1, 128), np.float16), qw)
    with pytest.raises(InputError, match="QuantizedWeight"):
        jitmarlin.linear(np.zeros((1, 128), np.float16), object())


def test_act_order_gather_buffer_grows_by_doubling_and_keeps_old_buffers(rng):
    """One buffer per (weight, device, stream, dtype), grown by doubling; outgrown buffers stay
    referenced (CUDA graphs captured earlier point into them); the index is made once."""
    from jitmarlin.ops.linear import _gather_buffer

    qw = jitmarlin.quantize(rng.standard_normal((64, 128)), "uint4b8", 128)
    made, index_calls = [], []

    def alloc(rows):
        made.append(np.zeros((rows, 128), np.float16))
        return made[-1]

    def index():
        index_calls.append(1)
        return np.arange(128)

    b3, _ = _gather_buffer(qw, 0, 7, 3, "float16", "cupy", alloc, index)
    b2, _ = _gather_buffer(qw, 0, 7, 2, "float16", "cupy", alloc, index)
    assert b3.shape == (3, 128) and b2.shape == (2, 128) and len(made) == 1
    assert b2.base is made[0] or b2.base is made[0].base
    b5, _ = _gather_buffer(qw, 0, 7, 5, "float16", "cupy", alloc, index)
    assert b5.shape == (5, 128) and len(made) == 2 and made[1].shape[0] == 6  # doubled
    assert qw._gather[(0, 7, "float16", "cupy")][2] == (made[0],)  # kept alive
    _gather_buffer(qw, 0, 8, 5, "float16", "cupy", alloc, index)  # another stream
    assert len(made) == 3 and len(index_calls) == 2


# ---- GPU ---------------------------------------------------------------------------------------


def _cp():
    import cupy

    return cupy


_weights: dict = {}


def make_weight(n: int, k: int, group: int, act: str, seed: int):
    """A random quantized weight built on the GPU from `seed` (the test's: a failure's seed
    rebuilds it), and its exact dequantized float64 matrix computed directly from the random
    codes and scales."""
    key = (n, k, group, act, seed)
    if key in _weights:
        return _weights[key]
    _weights.clear()  # keep GPU memory small: one weight at a time
    cp = _cp()
    from jitmarlin.weights import halves, packing

    # one stream per (seed, shape): two weights of one test share no codes
    rs = cp.random.RandomState(
        int(np.random.SeedSequence([seed, n, k, group + 1, ACTS.index(act)]).generate_state(1)[0])
    )
    q = rs.randint(0, 16, size=(n, k), dtype=cp.uint8)
    groups = 1 if group == -1 else k // group
    s32 = rs.random_sample((groups, n), dtype=cp.float32) * 0.02 + 0.002
    s_host = halves.to_bits(cp.asnumpy(s32), act)  # round scales to act dtype
    s_exact = cp.asarray(halves.from_bits(s_host, act), dtype=cp.float64)  # (G, n)
    sbits = cp.asarray(s_host)
    scales = packing.permute_scales(sbits) if group != -1 else sbits.reshape(n)
    qw = QuantizedWeight("uint4b8", group, n, k, packing.pack_int4(q), scales, scale_dtype=act)
    gs = k if group == -1 else group
    w = (q.astype(cp.float64) - 8.0) * cp.repeat(s_exact.T, gs, axis=1)
    _weights[key] = (qw, w)
    return qw, w


def _torch_dtype(act):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[act]


def make_input(case, rng_seed):
    """x (m, k), bias (n,) or None, out or None in the case's array kind; plus float64 copies."""
    cp = _cp()
    gen = cp.random.default_rng(rng_seed)
    x32 = gen.standard_normal((case.m, case.k), dtype=cp.float32)
    b32 = gen.standard_normal(case.n, dtype=cp.float32) if case.bias else None
    if case.kind == "torch":
        import torch

        dt = _torch_dtype(case.act)
        x = torch.from_dlpack(x32).to(dt)
        bias = torch.from_dlpack(b32).to(dt) if b32 is not None else None
        out = torch.full((case.m, case.n), float("nan"), dtype=dt, device=x.device) if case.poison_out else None
        x64 = cp.from_dlpack(x.double())
        b64 = cp.from_dlpack(bias.double()) if bias is not None else None
        return x, bias, out, x64, b64
    if case.act == "bfloat16":
        ml = pytest.importorskip("ml_dtypes", reason="CuPy bfloat16 arrays need ml_dtypes")
        try:
            x = x32.astype(ml.bfloat16)
        except Exception as e:  # pragma: no cover - depends on the CuPy build
            pytest.skip(f"this CuPy cannot hold bfloat16 arrays ({e}); bf16 is covered by the torch cases")
        dt = ml.bfloat16
    else:
        x = x32.astype(cp.float16)
        dt = cp.float16
    bias = b32.astype(dt) if b32 is not None else None
    out = cp.full((case.m, case.n), cp.nan, dtype=cp.float32).astype(dt) if case.poison_out else None
    x64 = x.astype(cp.float64)
    b64 = bias.astype(cp.float64) if bias is not None else None
    return x, bias, out, x64, b64


def _path() -> str:
    from jitmarlin.jit.profiles import planning_profile

    return planning_profile(0).path


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases(), ids=lambda c: c.id)
def test_linear_matches_float64_reference(case, seed, rng):
    if case.kind == "torch":
        pytest.importorskip("torch")
    qw, w = make_weight(case.n, case.k, case.group, case.act, seed)
    x, bias, out, x64, b64 = make_input(case, int(rng.integers(1 << 31)))
    if case.act == "bfloat16" and _path() in ("sm70", "sm75"):
        # Volta/Turing paths (real or JITMARLIN_EMULATE'd) have no bf16 tensor cores
        with pytest.raises(jitmarlin.UnsupportedError, match="bfloat16 activations are not supported"):
            jitmarlin.linear(x, qw, bias=bias, out=out)
        return
    y = jitmarlin.linear(x, qw, bias=bias, out=out)
    if out is not None:
        assert y is out
    assert type(y) is type(x)
    assert tuple(y.shape) == (case.m, case.n)
    if case.kind == "torch":
        import torch

        torch.cuda.synchronize()
    ref = x64 @ w.T
    if b64 is not None:
        ref += b64
    check_linear(y, ref, case.act, qw, case.m, what=case.id, seed=seed)  # (NaN: an unwritten element)


@pytest.mark.gpu
def test_the_planned_generation_is_the_one_that_runs(capsys, seed):
    """Without JITMARLIN_EMULATE the live GPU's code path runs; with it, the emulated
    generation's (so the suite run under JITMARLIN_EMULATE=v100 really exercises sm70 code)."""
    import os

    from jitmarlin.jit.profiles import get_profile, live_profile

    cp = _cp()
    qw, _ = make_weight(256, 4096, 128, "float16", seed)
    x = cp.ones((3, 4096), dtype=cp.float16)
    jitmarlin.linear(x, qw)
    lz = qw._launchers[(0, "float16", 3, cp.cuda.get_current_stream().ptr, False)]
    name = os.environ.get("JITMARLIN_EMULATE")
    expected = get_profile(name).path if name else live_profile(0).path
    with capsys.disabled():
        print(f"\n[JITMARLIN_EMULATE={name}] ran {lz.plan.spec.name}, grid {lz.plan.grid}")
    assert lz.plan.spec.path == expected


@pytest.mark.gpu
@pytest.mark.parametrize("group", [-1, 128])
def test_max_elementwise_error_bar(group, seed, rng):
    """The sm70 seed's own bar, on any path: max element-wise relative error < 4% against the
    fp16 reference, elements measured against max(|ref|, 1% of max |ref|) so that near-zero
    outputs do not divide by ~0; and the checker's bound against the float64 reference."""
    cp = _cp()
    qw, w = make_weight(4096, 4096, group, "float16", seed)
    x = cp.asarray(rng.standard_normal((33, 4096)), dtype=cp.float16)
    y = jitmarlin.linear(x, qw).astype(cp.float64)
    check_linear(y, x.astype(cp.float64) @ w.T, "float16", qw, 33, seed=seed)
    ref = (x.astype(cp.float64) @ w.T).astype(cp.float16).astype(cp.float64)  # fp16 reference
    denom = cp.maximum(cp.abs(ref), 0.01 * cp.abs(ref).max())
    assert float((cp.abs(y - ref) / denom).max()) < 0.04


@pytest.mark.gpu
def test_batched_leading_dims_and_strided_rows(seed, rng):
    cp = _cp()
    qw, w = make_weight(256, 4096, 128, "float16", seed)
    big = cp.asarray(rng.standard_normal((2, 3, 4096 + 64)), dtype=cp.float16)
    x = big[:, 1:2, :4096]  # (2, 1, 4096), row stride 3*(4096+64)
    y = jitmarlin.linear(x, qw)
    assert y.shape == (2, 1, 256)
    ref = x.reshape(2, 4096).astype(cp.float64) @ w.T
    check_linear(y.reshape(2, 256), ref, "float16", qw, 2, what="x (2, 1, 4096) strided", seed=seed)


@pytest.mark.gpu
def test_torch_current_stream_is_used(seed, rng):
    torch = pytest.importorskip("torch")
    cp = _cp()
    qw, w = make_weight(6144, 4096, 128, "float16", seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(16, 4096, device="cuda", dtype=torch.float16, generator=gen)
    out = torch.full((16, 6144), float("nan"), device="cuda", dtype=torch.float16)
    jitmarlin.linear(x, qw)  # warm: compile and upload outside the timed region
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # keeps `s` busy for tens of milliseconds
        jitmarlin.linear(x, qw, out=out)
    snap = out.clone()  # on the default stream: must not see results yet
    torch.cuda.default_stream().synchronize()
    assert bool(torch.isnan(snap).all()), "linear() did not run on torch's current stream"
    s.synchronize()
    ref = cp.from_dlpack(x.double()) @ w.T
    check_linear(out, ref, "float16", qw, 16, what="M=16 on a side stream", seed=seed)


@pytest.mark.gpu
def test_cuda_graph_replay(seed, rng):
    torch = pytest.importorskip("torch")
    cp = _cp()
    act = "float16" if _path() in ("sm70", "sm75") else "bfloat16"
    dt = _torch_dtype(act)
    qw, w = make_weight(4096, 4096, 128, act, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(7, 4096, device="cuda", dtype=dt, generator=gen)
    y = jitmarlin.linear(x, qw)  # warm-up: compile, upload, workspace
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = jitmarlin.linear(x, qw)
    for i in range(3):  # new inputs each replay, same buffers
        x.copy_(torch.randn(7, 4096, device="cuda", dtype=dt, generator=gen))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = cp.from_dlpack(x.double()) @ w.T
        check_linear(y, ref, act, qw, 7, what=f"M=7 replay {i + 1}", seed=seed)


@pytest.mark.gpu
def test_capture_without_warmup_is_a_clear_error(seed, rng):
    torch = pytest.importorskip("torch")
    qw, _ = make_weight(256, 128, 64, "float16", seed)
    x = torch.randn(
        3, 128, device="cuda", dtype=torch.float16, generator=torch.Generator(device="cuda").manual_seed(seed)
    )
    g = torch.cuda.CUDAGraph()
    with pytest.raises(jitmarlin.CaptureError, match="warm"):
        with torch.cuda.graph(g):
            jitmarlin.linear(x, qw)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "bad,msg",
    [
        ("dtype", "float16 or bfloat16"),
        ("k", "in_features"),
        ("bias_shape", "bias must have shape"),
        ("out_dtype", "out has dtype"),
        ("misaligned", "16-byte aligned"),
    ],
)
def test_bad_inputs_raise_before_launch(bad, msg, seed):
    cp = _cp()
    qw, _ = make_weight(256, 128, 64, "float16", seed)
    x = cp.ones((4, 128), dtype=cp.float16)
    kw = {}
    if bad == "dtype":
        x = x.astype(cp.float32)
    elif bad == "k":
        x = cp.ones((4, 192), dtype=cp.float16)
    elif bad == "bias_shape":
        kw["bias"] = cp.ones(255, dtype=cp.float16)
    elif bad == "out_dtype":
        kw["out"] = cp.empty((4, 256), dtype=cp.float32)
    elif bad == "misaligned":
        x = cp.ones(4 * 128 + 1, dtype=cp.float16)[1:].reshape(4, 128)
    with pytest.raises(InputError, match=msg):
        jitmarlin.linear(x, qw, **kw)


@pytest.mark.gpu
def test_unsupported_shape_is_clear():
    cp = _cp()
    w = np.random.default_rng(0).standard_normal((64, 128))
    qw = jitmarlin.quantize(w, "uint4b8", 128)
    qw.n = 96  # a shape the kernel cannot take
    with pytest.raises(InputError, match="multiple of 64"):
        jitmarlin.linear(cp.ones((2, 128), dtype=cp.float16), qw)


# ---- every quant type on the GPU (issue: real checkpoints) --------------------------------------

TYPE_CASES = [
    (qt, g, act)
    for qt, groups in [
        ("uint4b8", (128, -1)),
        ("uint4", (128, 32, -1)),
        ("uint8b128", (64, -1)),
        ("uint8", (128, -1)),
        ("float8_e4m3fn", (128, -1)),
        ("nvfp4", (16,)),
        ("mxfp4", (32,)),
    ]
    for g in groups
    for act in ("float16", "bfloat16")
]


def _host_case(qw, m, act, rng, kind, bias=True):
    """x (m, in_features), bias, in the array kind; the float64 reference from dequantize()."""
    from jitmarlin.reference import linear_reference
    from jitmarlin.weights import halves

    cp = _cp()
    x = halves.round_to(rng.standard_normal((m, qw.in_features)), act)
    b = halves.round_to(rng.standard_normal(qw.out_features), act) if bias else None
    ref = linear_reference(x, qw, b, act)
    if kind == "torch":
        import torch

        dt = _torch_dtype(act)
        xa = torch.from_numpy(x).to("cuda", dt)
        ba = None if b is None else torch.from_numpy(b).to("cuda", dt)
    else:
        xa = cp.asarray(x).astype(cp.float16)
        ba = None if b is None else cp.asarray(b).astype(cp.float16)
    return xa, ba, ref


@pytest.mark.gpu
@pytest.mark.parametrize("qt,g,act", TYPE_CASES, ids=lambda v: str(v))
def test_every_quant_type(qt, g, act, seed, rng):
    kind = "torch" if act == "bfloat16" else "cupy"  # CuPy has no bfloat16 arrays
    if kind == "torch":
        pytest.importorskip("torch")
    w = rng.standard_normal((1088, 1536)) * 0.05
    qw = jitmarlin.quantize(w, qt, g, scale_dtype=act)
    for m in (1, 33, 300):
        x, b, ref = _host_case(qw, m, act, rng, kind)
        if act == "bfloat16" and _path() in ("sm70", "sm75"):
            with pytest.raises(jitmarlin.UnsupportedError, match="bfloat16"):
                jitmarlin.linear(x, qw, bias=b)
            return
        y = jitmarlin.linear(x, qw, bias=b)
        check_linear(y, ref, act, qw, m, what=f"{qt} g{g} M={m}", seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_padded_shapes_with_bias(kind, seed, rng):
    from jitmarlin.weights.quant import from_codes

    if kind == "torch":
        pytest.importorskip("torch")
    # out 200 / in 136: neither a multiple of 64; float (HQQ-style) zero points on another
    qws = [
        from_codes("uint4b8", rng.integers(0, 16, (200, 136)), rng.random((1, 200)) * 0.01 + 0.001, -1),
        from_codes(
            "uint4",
            rng.integers(0, 16, (72, 200)),
            rng.random((7, 72)) * 0.01 + 0.001,
            32,
            zeros=rng.random((7, 72)) * 15,
        ),
    ]
    for qw in qws:
        assert (qw.n, qw.k) != qw.shape
        for m in (3, 70):
            x, b, ref = _host_case(qw, m, "float16", rng, kind)
            y = jitmarlin.linear(x, qw, bias=b)
            assert tuple(y.shape) == (m, qw.out_features)
            check_linear(y, ref, "float16", qw, m, what=f"{qw.qtype} {qw.shape} M={m}", seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_act_order(kind, seed, rng):
    from jitmarlin.weights.quant import from_codes

    if kind == "torch":
        pytest.importorskip("torch")
    g_idx = rng.permutation(np.repeat(np.arange(8), 128))
    qw = from_codes("uint4b8", rng.integers(0, 16, (512, 1024)), rng.random((8, 512)) * 0.01 + 0.001, 128, g_idx=g_idx)
    assert qw.perm is not None
    for m in (1, 40):
        x, b, ref = _host_case(qw, m, "float16", rng, kind)
        for i in range(2):  # the gather buffer is reused
            y = jitmarlin.linear(x, qw, bias=b)
            check_linear(y, ref, "float16", qw, m, what=f"M={m} call {i + 1}", seed=seed)


def _check_decode_plan(case, name, rng, seed):
    """linear() on case (m, n, k, group, act) against the float64 reference: bf16 through torch,
    fp16 through CuPy, with a bias and a poisoned output buffer (whatever plan the caller set up;
    `name`: the kernel the caller expects to run)."""
    m, n, k, group, act = case
    qw, w = make_weight(n, k, group, act, seed)
    c = Case(m, n, k, group, act, "torch" if act == "bfloat16" else "cupy", poison_out=True, bias=True)
    if c.kind == "torch":
        pytest.importorskip("torch")
    x, bias, out, x64, b64 = make_input(c, int(rng.integers(1 << 31)))
    y = jitmarlin.linear(x, qw, bias=bias, out=out)
    assert y is out
    if c.kind == "torch":
        import torch

        torch.cuda.synchronize()
    ref = x64 @ w.T + b64
    check_linear(y, ref, act, qw, m, what=f"{name} expected, M={m}", seed=seed)


# ---- thread-block clusters (sm_90): forced cluster kernels against the reference ---------------
# (m, n, k, group, act, (tn, tk, stages, cluster)): the planner's own choice for 70B o on H100
# (clusters of 2, each tile over both blocks), then forced sizes whose tiles spread over 4 and 8
# blocks (3 and 7 contributors), odd M, per-channel and group-32 scales, N not a multiple of 128.
CLUSTER_CASES = [
    (1, 8192, 8192, 128, "float16", (8, 16, 8, 2)),
    (16, 8192, 8192, 128, "bfloat16", (8, 16, 8, 2)),
    (5, 1024, 4096, 64, "float16", (8, 16, 6, 4)),
    (1, 640, 14336, -1, "bfloat16", (16, 16, 2, 8)),
    (13, 4160, 4096, 32, "float16", (8, 16, 4, 8)),
]


def cluster_case_spec(case):
    from jitmarlin.kernels.spec import KernelSpec

    m, n, k, group, act, (tn, tk, st, c) = case
    return KernelSpec("sm80", "uint4b8", act, -1 if group < 0 else group // 16, 1, tn, tk, st, cluster=c)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CLUSTER_CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-c{c[5][3]}-{c[4]}")
def test_cluster_decode_matches_reference(case, seed, rng, monkeypatch):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner, tuned
    from jitmarlin.kernels.problem import Problem

    m, n, k, group, act, _ = case
    prof = planning_profile(0)
    spec = cluster_case_spec(case)
    if prof.cc < (9, 0) or not planner._fits(prof, spec):
        pytest.skip(f"{prof.name}: no clusters, or {spec.name} does not fit its shared memory")
    monkeypatch.setattr(tuned, "choose_for", lambda *a, **kw: spec)
    pl = planner.plan(prof, Problem(m, n, k, act, "uint4b8", group), spec)
    assert pl.iters % pl.k_tiles, "the case must split tiles over the blocks of a cluster"
    _check_decode_plan(case[:5], spec.name, rng, seed)


# ---- programmatic dependent launch ------------------------------------------------------------


def _pdl_gpu():
    from jitmarlin.jit import launch
    from jitmarlin.jit.profiles import live_profile

    if live_profile(0).cc < launch.PDL_MIN_CC:
        pytest.skip("programmatic dependent launch needs sm_90+")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5, 16, 64])
def test_pdl_kernels_wait_for_the_kernel_before_them(m, seed, rng):
    """A kernel launched with PDL starts before the one ahead of it on the stream has finished.
    Here the one ahead rewrites x in place, 24 times, each followed by linear(enable_pdl=True)
    into its own poisoned output, then two PDL GEMMs in a row, the second reading the first's
    output. Every result must match its own x: a kernel that read x (or wrote out) before its wait
    would see the previous x. Then the same chain captured in a CUDA graph and replayed. Every
    output is checked against the float64 reference of its own inputs (the second GEMM's: the
    first one's output as it stands)."""
    _pdl_gpu()
    torch = pytest.importorskip("torch")
    cp = _cp()
    from jitmarlin.jit.profiles import planning_profile

    # bf16 once, where the profile that plans has bf16 tensor cores (not an emulated T4)
    act = "bfloat16" if m == 5 and planning_profile(0).cc >= (8, 0) else "float16"
    dt = _torch_dtype(act)
    qa, wa = make_weight(4096, 4096, 128, act, seed)
    qb, wb = make_weight(2048, 4096, 64, act, seed)
    base = torch.from_dlpack(cp.asarray(rng.standard_normal((m, 4096)), dtype=cp.float32)).to(dt)

    def f64(t):
        return cp.from_dlpack(t.float().contiguous()).astype(cp.float64)

    x = base.clone()
    for graph in (False, True):
        outs = [torch.full((m, 4096), float("nan"), dtype=dt, device="cuda") for _ in range(24)]
        y2 = torch.full((m, 2048), float("nan"), dtype=dt, device="cuda")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for q in (qa, qb):  # warm-up: compile and upload outside the capture
                jitmarlin.linear(x, q, enable_pdl=True)
            g = torch.cuda.CUDAGraph() if graph else None
            if g is not None:
                g.capture_begin()
            for i, out in enumerate(outs):
                torch.mul(base, 1.0 + i, out=x)  # the kernel ahead writes x
                jitmarlin.linear(x, qa, out=out, enable_pdl=True)
            y1 = jitmarlin.linear(x, qa, enable_pdl=True)
            jitmarlin.linear(y1, qb, out=y2, enable_pdl=True)
            if g is not None:
                g.capture_end()
                x.zero_()
                g.replay()
        stream.synchronize()
        for i, out in enumerate(outs):
            ref = f64(torch.mul(base, 1.0 + i)) @ wa.T
            check_linear(out, ref, act, qa, m, what=f"graph={graph} output {i}", seed=seed)
        check_linear(y1, f64(x) @ wa.T, act, qa, m, what=f"graph={graph} first GEMM of two", seed=seed)
        check_linear(
            y2, f64(y1) @ wb.T, act, qb, m, what=f"graph={graph} second GEMM, on the first's output", seed=seed
        )


# ---- late publish (KernelSpec.late): forced on Stream-K decode plans against the reference -----
# (m, n, k, group, act, (tn, tk, stages)): the planner's own choices for 70B qkv and 8B qkv at
# M = 16 on H100, then odd M, group 32 and per-channel scales, N not a multiple of the tile, and
# a plan where the late contributor's next tile is split too.
LATE_CASES = [
    (16, 10240, 8192, 128, "float16", (16, 16, 3)),
    (16, 6144, 4096, 128, "bfloat16", (8, 16, 8)),
    (11, 6144, 4096, 32, "float16", (8, 16, 6)),
    (5, 2112, 4096, -1, "bfloat16", (8, 8, 4)),
    (13, 4160, 2816, 64, "float16", (16, 16, 3)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", LATE_CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-g{c[3]}-{c[4]}")
def test_late_publish_matches_reference(case, seed, rng, monkeypatch):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner, tuned
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.kernels.spec import KernelSpec

    m, n, k, group, act, (tn, tk, st) = case
    prof = planning_profile(0)
    spec = KernelSpec("sm80", "uint4b8", act, -1 if group < 0 else group // 16, 1, tn, tk, st, late=True)
    if prof.path != "sm80" or act not in planner.PATH_ACTS[prof.path] or not planner._fits(prof, spec):
        pytest.skip(f"{prof.name}: not the sm80 path, or {spec.name} does not fit it")
    p = Problem(m, n, k, act, "uint4b8", group)
    pl = planner.plan(prof, p, spec)
    if not planner.late_contributors(p, spec, pl.grid, pl.iters):
        pytest.skip(f"{prof.name}: this plan of {spec.name} has no late contributor")
    monkeypatch.setattr(tuned, "choose_for", lambda *a, **kw: spec)
    _check_decode_plan(case[:5], spec.name, rng, seed)


# ---- raw codes (KernelSpec.raw_codes: bf16, 256-wide tiles, groups of 128) ---------------------
# (m, n, k, (tn, tk, stages, whole)): Llama-3-8B down at M = 16 (each tile over ~8 blocks), an N
# tail with tiles over 2-3 blocks at odd M, one row, a plan of whole tiles (8B gate_up's at M = 9).
RAW_CASES = [
    (16, 4096, 14336, (16, 16, 3, False)),
    (11, 4160, 4096, (16, 16, 3, False)),
    (1, 1984, 8192, (16, 16, 3, False)),
    (9, 28672, 4096, (16, 16, 3, True)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", RAW_CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}")
def test_raw_codes_match_reference(case, seed, rng, monkeypatch):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner, tuned
    from jitmarlin.kernels.spec import KernelSpec

    m, n, k, (tn, tk, st, whole) = case
    prof = planning_profile(0)
    spec = KernelSpec("sm80", "uint4b8", "bfloat16", 8, 1, tn, tk, st, whole=whole)
    if prof.path != "sm80" or "bfloat16" not in planner.PATH_ACTS[prof.path] or not planner._fits(prof, spec):
        pytest.skip(f"{prof.name}: not the sm80 path, or {spec.name} does not fit it")
    assert spec.raw_codes and not KernelSpec("sm80", "uint4b8", "float16", 8, 1, tn, tk, st).raw_codes
    monkeypatch.setattr(tuned, "choose_for", lambda *a, **kw: spec)
    _check_decode_plan((m, n, k, 128, "bfloat16"), spec.name, rng, seed)


@pytest.mark.gpu
def test_raw_codes_cancel_offsets_for_x_far_from_zero_mean(seed, rng):
    """Raw codes leave 128 + v in the MMAs and take 136 x sum(x) out of each run's sums: with x of
    mean 3 that cancels sums two orders of magnitude over the result's. On a long K (8B down,
    M = 16) the raw-code kernel stays within bf16's tolerance and within 1.5x (+1e-4) of the error
    of a kernel on 128-wide tiles, which dequantises each weight instead (the fp16 form of this,
    1024 + v against 1032, failed such a check on the gemv kernel: tools/PERF.md entry 84)."""
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner
    from jitmarlin.kernels.spec import KernelSpec

    prof = planning_profile(0)
    raw = KernelSpec("sm80", "uint4b8", "bfloat16", 8, 1, 16, 16, 3)
    plain = KernelSpec("sm80", "uint4b8", "bfloat16", 8, 1, 8, 16, 4)
    if (
        prof.path != "sm80"
        or "bfloat16" not in planner.PATH_ACTS[prof.path]
        or not planner._fits(prof, raw)
        or not planner._fits(prof, plain)
    ):
        pytest.skip(f"{prof.name}: not the sm80 path, or the kernels do not fit it")
    assert raw.raw_codes and not plain.raw_codes
    qw = jitmarlin.quantize(rng.standard_normal((4096, 14336)) * 0.02, "uint4b8", 128, scale_dtype="bfloat16")
    for x_mean in (0.0, 3.0):
        x_seed = int(rng.integers(1, 1 << 30))  # the same x for both kernels
        e_raw, e_plain = (
            rel(
                *check_forced(
                    qw,
                    16,
                    "bfloat16",
                    s,
                    np.random.default_rng(x_seed),
                    bias=False,
                    x_mean=x_mean,
                    what=f"x mean {x_mean}",
                    seed=seed,
                )
            )
            for s in (raw, plain)
        )
        assert e_raw <= 1.5 * e_plain + 1e-4, (x_mean, e_raw, e_plain)


# ---- K-tiles of 512 (tk 32: planner.WHOLE_DECODE_TK32, and autotuner candidates at decode) -----
# (m, n, k, group, (tn, tk, stages, whole)): Stream-K plans whose tiles split over 2-4 blocks
# (Llama-3-8B down, 70B qkv), an N tail (1088 = 8.5 tiles of 128), groups of 64 and 32,
# per-channel scales on whole tiles.
K512_CASES = [
    (16, 4096, 14336, 128, (8, 32, 3, False)),
    (11, 10240, 8192, 128, (16, 32, 2, False)),
    (16, 1088, 3072, 64, (8, 32, 4, False)),
    (7, 1536, 2048, 32, (8, 32, 4, False)),
    (13, 2048, 4096, -1, (16, 32, 2, True)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", K512_CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-g{c[3]}")
def test_k512_tiles_match_reference(case, act, seed, rng, monkeypatch):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner, tuned
    from jitmarlin.kernels.spec import KernelSpec

    m, n, k, group, (tn, tk, st, whole) = case
    prof = planning_profile(0)
    spec = KernelSpec("sm80", "uint4b8", act, -1 if group < 0 else group // 16, 1, tn, tk, st, whole=whole)
    if prof.path != "sm80" or act not in planner.PATH_ACTS[prof.path] or not planner._fits(prof, spec):
        pytest.skip(f"{prof.name}: not the sm80 path, or {spec.name} does not fit it")
    monkeypatch.setattr(tuned, "choose_for", lambda *a, **kw: spec)
    _check_decode_plan((m, n, k, group, act), spec.name, rng, seed)


# ---- whole tiles at decode (planner._whole_decode, sm_90): the planner's own plans -------------
@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    [
        (16, 28672, 2048, 128, "bfloat16"),
        (9, 28672, 4096, 64, "float16"),
        (13, 28416, 4096, -1, "bfloat16"),
        (11, 6144, 4096, 32, "bfloat16"),
        (16, 6144, 4096, 128, "float16"),
    ],
    ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-g{c[3]}-{c[4]}",
)
def test_whole_decode_plans_match_reference(case, seed, rng):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner
    from jitmarlin.kernels.problem import Problem

    m, n, k, group, act = case
    prof = planning_profile(0)
    if act == "bfloat16" and _path() in ("sm70", "sm75"):  # (an emulated V100 or T4)
        with pytest.raises(jitmarlin.UnsupportedError, match="bfloat16 activations are not supported"):
            planner.plan(prof, Problem(m, n, k, act, "uint4b8", group))
        return
    pl = planner.plan(prof, Problem(m, n, k, act, "uint4b8", group))
    if not getattr(pl.spec, "whole", False):
        pytest.skip(f"{prof.name}: the planner takes no whole-tile decode plan here ({pl.spec.name})")
    assert pl.iters == k // pl.spec.tile_k  # one whole tile a block
    _check_decode_plan(case, pl.spec.name, rng, seed)


# ---- TMA weight boxes at decode (KernelSpec.bulk, sm_90) -----------------------------------------
# (m, n, k, qtype, group, (tn, tk, stages, whole)): the planner's 256-wide and 128 x 512 Stream-K
# tiles, a whole plan, M and N not multiples of the tile (the last column tile mostly past N: the
# box's zero fill), groups of 64 and 32, per-channel scales, zero points, 8-bit codes.
BULK_CASES = [
    (16, 7168, 8192, "uint4b8", 128, (16, 16, 3, False)),
    (13, 4096, 14336, "uint4b8", 128, (8, 32, 3, False)),
    (11, 1088, 3072, "uint4b8", 64, (16, 16, 4, False)),
    (9, 1536, 2048, "uint4b8", 32, (8, 16, 4, False)),
    (16, 2048, 4096, "uint4b8", -1, (16, 32, 2, True)),
    (5, 2112, 1024, "uint4", 128, (16, 16, 3, False)),
    (16, 1536, 2048, "uint8b128", 128, (8, 16, 3, False)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("xbox", [False, True], ids=["w", "wx"])  # x by TMA boxes too (KernelSpec.xbox)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", BULK_CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-{c[3]}-g{c[4]}")
def test_bulk_weight_boxes_match_reference(case, act, xbox, seed, rng):
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels.spec import KernelSpec
    from jitmarlin.weights.qtypes import QTYPES

    m, n, k, qtype, group, (tn, tk, st, whole) = case
    if planning_profile(0).cc != (9, 0):  # (an emulated GPU: other limits, and not measured)
        pytest.skip("TMA weight boxes are planned on sm_90")
    gb = (0 if QTYPES[qtype].zero_points else -1) if group < 0 else group // 16
    spec = KernelSpec("sm80", qtype, act, gb, 1, tn, tk, st, whole=whole, bulk=True, xbox=xbox)
    qw = jitmarlin.quantize(rng.standard_normal((n, k)) * 0.02, qtype, group, scale_dtype=act)
    check_forced(qw, m, act, spec, rng, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_x_boxes_stop_at_in_features(act, seed, rng):
    """KernelSpec.xbox: in_features 1000 of K 1024 and x rows 1024 apart with NaN in columns
    1000..1023: x's map ends at in_features, so the last box's 24 columns past it land as zeros."""
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels.spec import KernelSpec
    from jitmarlin.weights.quant import from_codes

    if planning_profile(0).cc != (9, 0):
        pytest.skip("TMA boxes are planned on sm_90")
    qw = from_codes("uint4b8", rng.integers(0, 16, (2048, 1000)), rng.random((1, 2048)) * 0.01 + 0.001, -1)
    assert (qw.k, qw.in_features) == (1024, 1000)
    spec = KernelSpec("sm80", "uint4b8", act, -1, 1, 16, 16, 3, bulk=True, xbox=True)
    check_forced(qw, 13, act, spec, rng, lda=1024, pad=float("nan"), seed=seed)


# ---- two GPUs: x on the GPU that is not current ---------------------------------------------------
# A tensor-parallel worker that never called set_device, or one process driving several GPUs:
# x lives on GPU 1 while GPU 0 is current. The weight (built on GPU 0) is uploaded to GPU 1, the
# kernel module loaded there, the launch runs on x's device and its stream, and the current device
# is left as it was. Then the same weight on GPU 0: each device keeps its own copies and launchers.
def _gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


# (n, k, m, act): one of each route the planner takes on sm_90 (H100 / H200 plans)
TWO_GPU_CASES = [
    (4160, 4096, 1, "float16"),  # gemv, pairs in clusters
    (4160, 4096, 16, "float16"),  # Stream-K
    (4096, 14336, 16, "bfloat16"),  # Stream-K with TMA boxes for the weights and x (torch only)
    (4160, 4096, 64, "float16"),  # wgmma
    (4160, 4096, 300, "float16"),  # wgmma, half tiles in clusters
    (256, 128, 4096, "float16"),  # dequantise, then cuBLAS
]


def _on_device(a, dev: int, act: str, kind: str):
    """Host float64 `a` as a `kind` array of dtype `act` on GPU `dev`."""
    if kind == "torch":
        import torch

        return torch.from_numpy(a).to(f"cuda:{dev}", _torch_dtype(act))
    cp = _cp()
    with cp.cuda.Device(dev):
        return cp.asarray(a).astype(cp.float16)


def _device_of(a) -> int:
    return a.device.index if type(a).__module__.startswith("torch") else a.data.device_id


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("kind", ["cupy", "torch"])
@pytest.mark.parametrize("case", TWO_GPU_CASES, ids=lambda c: f"n{c[0]}-k{c[1]}-m{c[2]}-{c[3]}")
def test_x_on_the_gpu_that_is_not_current(case, kind, seed, rng):
    from jitmarlin.weights import halves

    n, k, m, act = case
    if kind == "cupy" and act != "float16":
        pytest.skip("bf16 CuPy arrays need ml_dtypes; the torch case covers this route")
    if kind == "torch":
        torch = pytest.importorskip("torch")
    cp = _cp()
    assert cp.cuda.runtime.getDevice() == 0
    qw, w = make_weight(n, k, 128, act, seed)  # on GPU 0
    for dev in (1, 0):  # GPU 1 first: nothing of this weight there yet
        xh = halves.round_to(rng.standard_normal((m, k)), act)
        bh = halves.round_to(rng.standard_normal(n), act)
        x, b = _on_device(xh, dev, act, kind), _on_device(bh, dev, act, kind)
        out = _on_device(np.full((m, n), np.nan), dev, act, kind)  # poisoned
        y = jitmarlin.linear(x, qw, bias=b, out=out, enable_pdl=m == 16)  # (PDL: its own launch call)
        assert y is out and _device_of(y) == dev
        assert cp.cuda.runtime.getDevice() == 0, "linear() left another device current"
        if kind == "torch":
            torch.cuda.synchronize(dev)
            yh = y.double().cpu().numpy()
        else:
            with cp.cuda.Device(dev):
                yh = cp.asnumpy(y).astype(np.float64)
        ref = cp.asnumpy(cp.asarray(xh) @ w.T) + bh  # float64, on GPU 0
        check_linear(yh, ref, act, qw, m, what=f"x on GPU {dev}", seed=seed, device=dev)
    assert {(0, act), (1, act)} <= set(qw._device)


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs")
def test_act_order_and_graph_capture_on_the_second_gpu(seed, rng):
    """The act-order gather buffer and a CUDA graph captured and replayed on GPU 1 (torch's
    current device there, as torch.cuda.graph requires), with GPU 0 current before and after."""
    torch = pytest.importorskip("torch")
    from jitmarlin.weights.quant import from_codes

    g_idx = rng.permutation(np.repeat(np.arange(8), 128))
    qw = from_codes("uint4b8", rng.integers(0, 16, (512, 1024)), rng.random((8, 512)) * 0.01 + 0.001, 128, g_idx=g_idx)
    for m in (1, 40):
        x, b, ref = _host_case(qw, m, "float16", rng, "torch")
        y = jitmarlin.linear(x.to("cuda:1"), qw, bias=b.to("cuda:1"))
        assert y.device.index == 1 and torch.cuda.current_device() == 0
        check_linear(y, ref, "float16", qw, m, what=f"act-order M={m} on GPU 1", seed=seed, device=1)
    qw, w = make_weight(4096, 4096, 128, "bfloat16", seed)
    with torch.cuda.device(1):
        gen = torch.Generator(device="cuda:1").manual_seed(seed)
        x = torch.randn(7, 4096, device="cuda:1", dtype=torch.bfloat16, generator=gen)
        y = jitmarlin.linear(x, qw)  # warm-up on GPU 1: compile, upload, workspace
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        # a capture stream on GPU 1: torch.cuda.graph's default one is made once a process, on
        # the GPU current then, and entering it makes that GPU current (linear() would then run
        # on GPU 1's own current stream, outside the capture, as torch's own ops on x would)
        with torch.cuda.graph(g, stream=torch.cuda.Stream(device=1)):
            y = jitmarlin.linear(x, qw)
        for i in range(2):
            x.copy_(torch.randn(7, 4096, device="cuda:1", dtype=torch.bfloat16, generator=gen))
            y.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            ref = x.double().cpu().numpy() @ _cp().asnumpy(w).T
            check_linear(y, ref, "bfloat16", qw, 7, what=f"M=7 on GPU 1, replay {i + 1}", seed=seed, device=1)
    assert torch.cuda.current_device() == 0
