"""jitmarlin.torch: the jitmarlin::linear custom op, MarlinLinear and quantize_model.

CPU tests cover the fake (meta) implementation, tracing under torch.compile, quantization in
from_linear, layer selection and error propagation; GPU tests check numbers against a float64
reference built from jitmarlin.dequantize (the exact oracle of the packed layout)."""

import copy
import gc
import logging
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import jitmarlin  # noqa: E402
import jitmarlin.torch as jmt  # noqa: E402
from jitmarlin import CaptureError, InputError  # noqa: E402

ACT = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
OP = torch.ops.jitmarlin.linear


def _linear(k, n, dtype=torch.float16, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=bias, dtype=dtype)


# ---- CPU: registry, fake implementation, tracing ---------------------------------------------


def test_jitmarlin_imports_without_torch():
    """`import jitmarlin` neither needs torch nor imports jitmarlin.torch (checked in a fresh
    interpreter where `import torch` fails)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(jitmarlin.__file__)))
    code = "import sys; sys.modules['torch'] = None; import jitmarlin; assert 'jitmarlin.torch' not in sys.modules"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fake_impl_on_meta_tensors(dtype):
    m = jmt.MarlinLinear.from_linear(_linear(256, 128, dtype))
    x = torch.empty(3, 5, 256, dtype=dtype, device="meta")
    y = OP(x, m._handle, 128, None)
    assert y.shape == (3, 5, 128) and y.dtype == dtype and y.device.type == "meta"
    y = m.to("meta")(x)  # the module moves its bias; the weight stays on the host
    assert m.bias.device.type == "meta"
    assert y.shape == (3, 5, 128) and y.dtype == dtype


def test_fake_impl_under_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    m = jmt.MarlinLinear.from_linear(_linear(256, 128, bias=False))
    with FakeTensorMode():
        x = torch.empty(4, 256, dtype=torch.bfloat16, device="cuda")  # fake: no GPU needed
        y = OP(x, m._handle, 128, None)
    assert y.shape == (4, 128) and y.dtype == torch.bfloat16 and y.device.type == "cuda"


def test_opcheck_on_meta_tensors():
    """opcheck's schema, autograd-registration, fake-tensor and AOT checks; on meta tensors the
    real kernel is the fake one, so this checks the registration, not the numbers (GPU test)."""
    m = jmt.MarlinLinear.from_linear(_linear(256, 128))
    x = torch.empty(3, 256, dtype=torch.float16, device="meta")
    b = torch.empty(128, dtype=torch.float16, device="meta")
    for args in ((x, m._handle, 128, b), (x, m._handle, 128, None)):
        torch.library.opcheck(OP, args)


def _two_layer_model(dtype=torch.float16):
    return nn.Sequential(
        jmt.MarlinLinear.from_linear(_linear(256, 128, dtype, seed=1)),
        nn.GELU(),
        jmt.MarlinLinear.from_linear(_linear(128, 64, dtype, seed=2)),
    )


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_traces_on_meta(backend):
    torch._dynamo.reset()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm

    model = _two_layer_model().to("meta")
    compiled = torch.compile(model, fullgraph=True, backend=record if backend == "eager" else backend)
    for shape in ((3, 256), (5, 256), (7, 2, 256)):  # (5, 256): recompiled with a dynamic batch
        y = compiled(torch.empty(shape, dtype=torch.float16, device="meta"))
        assert y.shape == shape[:-1] + (64,)
    if backend == "eager":  # the op stays one opaque node per layer in the traced graph
        calls = [n for n in graphs[0].graph.nodes if n.target is OP or n.target is OP.default]
        assert len(calls) == 2


def test_errors_propagate_unchanged(monkeypatch):
    """jitmarlin's own exceptions (CaptureError during graph capture, say) reach the caller as the
    same object, through the custom op and through a compiled graph."""
    err = CaptureError("warm up before capture")

    def fail(x, qw, bias=None, out=None):
        raise err

    monkeypatch.setattr(jmt.api, "linear", fail)  # the module jitmarlin.torch calls (ops.linear)
    m = jmt.MarlinLinear.from_linear(_linear(256, 128))
    x = torch.zeros(2, 256, dtype=torch.float16)
    with pytest.raises(CaptureError) as info:
        m(x)
    assert info.value is err
    torch._dynamo.reset()
    with pytest.raises(CaptureError) as info:
        torch.compile(m, fullgraph=True, backend="eager")(x)
    assert info.value is err


def test_cpu_input_is_a_clear_error():
    m = jmt.MarlinLinear.from_linear(_linear(256, 128))
    with pytest.raises(InputError, match="CPU tensor"):
        m(torch.zeros(2, 256, dtype=torch.float16))


def test_registry_follows_module_lifetime():
    m = jmt.MarlinLinear.from_linear(_linear(256, 128))
    h = m._handle
    m.qweight.__dict__["_launchers"] = {"used": threading.Lock()}  # stands in for CuPy state
    c = copy.deepcopy(m)  # the copy registers its own handle, shares the weight
    assert c._handle != h and jmt._weights[c._handle] is c.qweight is m.qweight
    assert c.bias is not m.bias and torch.equal(c.bias, m.bias)
    del m
    gc.collect()
    assert h not in jmt._weights and c._handle in jmt._weights
    with pytest.raises(InputError, match="no QuantizedWeight is registered"):
        OP(torch.zeros(1, 256, dtype=torch.float16), h, 128, None)
    with pytest.raises(InputError, match="out_features = 128"):
        OP(torch.zeros(1, 256, dtype=torch.float16), c._handle, 64, None)


# ---- CPU: from_linear / from_quantized ---------------------------------------------------------


@pytest.mark.parametrize(
    "dtype,scale_dtype", [(torch.float16, "float16"), (torch.bfloat16, "bfloat16"), (torch.float32, "float16")]
)
@pytest.mark.parametrize("group_size", [128, -1])
def test_from_linear_quantizes_within_rtn_bounds(dtype, scale_dtype, group_size):
    lin = _linear(512, 192, dtype)
    m = jmt.MarlinLinear.from_linear(lin, group_size=group_size)
    qw = m.qweight
    assert (qw.n, qw.k, qw.group_size, qw.scale_dtype) == (192, 512, group_size, scale_dtype)
    assert (m.in_features, m.out_features) == (512, 192)
    w = lin.weight.detach().double().numpy()
    err = np.abs(jitmarlin.dequantize(qw).astype(np.float64) - w)
    gs = 512 if group_size == -1 else group_size
    # Round to nearest on scale s = absmax/7.5: at most half a step, s/2 = absmax/15, per
    # element; the stored scale is s(1 + d) with |d| <= eps of its 16-bit format, and an element
    # at absmax may then clip to 7 steps: error <= s/2 + 7.5 s |d| = absmax/15 (1 + 15 eps).
    eps = 2.0**-8 if scale_dtype == "bfloat16" else 2.0**-11
    absmax = np.abs(w.reshape(192, -1, gs)).max(axis=2, keepdims=True)
    bound = np.broadcast_to(absmax / 15 * (1 + 15 * eps), (192, 512 // gs, gs)).reshape(192, 512)
    assert np.all(err <= bound + 1e-7)
    assert m.bias.dtype == dtype and torch.equal(m.bias, lin.bias)
    assert m.bias.data_ptr() != lin.bias.data_ptr()  # a copy, not the trained parameter


def test_from_linear_without_bias_and_repr():
    m = jmt.MarlinLinear.from_linear(_linear(256, 128, bias=False), group_size=64)
    assert m.bias is None
    r = repr(m)
    assert "in_features=256" in r and "out_features=128" in r
    assert "qtype=uint4b8" in r and "group_size=64" in r


def test_from_linear_unsupported_shape():
    with pytest.raises(InputError, match="multiples of 8"):
        jmt.MarlinLinear.from_linear(_linear(256, 100))


def test_from_quantized():
    qw = jitmarlin.quantize(np.random.default_rng(0).standard_normal((128, 256)), group_size=128)
    m = jmt.MarlinLinear.from_quantized(qw, torch.ones(128, dtype=torch.bfloat16))
    assert m.qweight is qw and m.bias.dtype == torch.bfloat16
    assert m.state_dict().keys() == {"bias"}
    with pytest.raises(InputError, match=r"bias must have shape \(128,\)"):
        jmt.MarlinLinear.from_quantized(qw, torch.ones(64))


# ---- CPU: quantize_model -----------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(128, 256)
        self.gate = nn.Linear(128, 64)  # skipped by pattern "*.gate"
        self.odd = nn.Linear(128, 100)  # out_features not a multiple of 8
        self.wide = nn.Linear(192, 64)  # in_features 192: fine for group 64, not for 128


def _model():
    torch.manual_seed(0)
    return nn.ModuleDict(
        {
            "layers": nn.Sequential(Block(), Block()),
            "attn": nn.MultiheadAttention(128, 2),  # its out_proj (an nn.Linear subclass) is left alone
            "lm_head": nn.Linear(128, 512),
        }
    )


def test_quantize_model_converts_and_skips(caplog):
    model = _model()
    with caplog.at_level(logging.INFO, logger="jitmarlin.torch"):
        out = jmt.quantize_model(model, skip=("lm_head", "*.gate"))
    assert out is model
    for i in (0, 1):
        blk = model["layers"][i]
        assert isinstance(blk.proj, jmt.MarlinLinear)
        for name in ("gate", "odd", "wide"):
            assert type(getattr(blk, name)) is nn.Linear
    assert type(model["lm_head"]) is nn.Linear
    assert not isinstance(model["attn"].out_proj, jmt.MarlinLinear)
    assert "layers.1.odd" in caplog.text and "converted 2 linear layers" in caplog.text


def test_select_linears_reasons():
    sel = jmt.select_linears(_model(), group_size=128, skip=("lm_head", "*.gate"))
    assert sel.convert == ["layers.0.proj", "layers.1.proj"]
    assert "skip pattern '*.gate'" in sel.skipped["layers.0.gate"]
    assert "skip pattern 'lm_head'" in sel.skipped["lm_head"]
    assert "multiples of 8" in sel.skipped["layers.0.odd"]
    assert "group_size=128" in sel.skipped["layers.1.wide"]
    assert not any("attn" in name for name in [*sel.convert, *sel.skipped])
    sel64 = jmt.select_linears(_model(), group_size=64, skip=())
    assert sel64.convert == [
        "layers.0.proj",
        "layers.0.gate",
        "layers.0.wide",
        "layers.1.proj",
        "layers.1.gate",
        "layers.1.wide",
        "lm_head",
    ]


def test_quantize_model_keeps_shared_layers_shared():
    shared = nn.Linear(128, 128)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    jmt.quantize_model(model, group_size=64, scale_dtype="bfloat16")
    assert isinstance(model[0], jmt.MarlinLinear) and model[0] is model[2]
    assert model[0].qweight.scale_dtype == "bfloat16" and model[0].qweight.group_size == 64


# ---- GPU ---------------------------------------------------------------------------------------


def _bf16_unsupported() -> bool:
    from jitmarlin.jit.profiles import planning_profile

    return planning_profile(0).path in ("sm70", "sm75")  # no bf16 tensor cores (real or emulated)


def _reference(m: "jmt.MarlinLinear", x) -> np.ndarray:
    """float64 x @ W.T + b on the host (NumPy), W from the exact dequantizer with x's scale
    rounding, b rounded to x's dtype."""
    from jitmarlin.reference import linear_reference

    bias = None if m.bias is None else m.bias.to(x.dtype)
    return linear_reference(x, m.qweight, bias, ACT[x.dtype])


def _check(y, m: "jmt.MarlinLinear", x, what="", seed=None):
    """The module's output y for input x against the float64 reference, element by element
    (tests/gpu_cases.py's check_linear: the margin recorded under the family of the kernel that
    ran for x's rows)."""
    from gpu_cases import check_linear

    rows = x.numel() // x.shape[-1]
    return check_linear(
        y.reshape(rows, -1),
        _reference(m, x).reshape(rows, -1),
        ACT[x.dtype],
        m.qweight,
        rows,
        what=what or f"M={rows}",
        seed=seed,
    )


def _randn(*shape, dtype, seed_or_gen):
    """Standard normal CUDA tensor from a seeded torch.Generator (reproducible from the test's seed)."""
    gen = seed_or_gen
    if isinstance(gen, int):
        gen = torch.Generator(device="cuda").manual_seed(gen)
    return torch.randn(*shape, device="cuda", dtype=dtype, generator=gen)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_forward_matches_float64_reference(dtype, seed):
    if dtype == torch.bfloat16 and _bf16_unsupported():
        pytest.skip("bf16 needs sm_80+ code paths")
    m = jmt.MarlinLinear.from_linear(_linear(1024, 512, dtype, seed=seed)).cuda()
    assert m.bias.is_cuda
    x = _randn(2, 3, 1024, dtype=dtype, seed_or_gen=seed)
    y = m(x)
    assert y.shape == (2, 3, 512) and y.dtype == dtype
    _check(y, m, x, seed=seed)


@pytest.mark.gpu
def test_forward_strided_input_and_fp32_bias(seed):
    """Like nn.Linear: any input layout (copied when the kernel cannot read it in place), and a
    bias of another dtype (kept from an fp32 model) is cast to x's."""
    m = jmt.MarlinLinear.from_linear(_linear(1024, 512, torch.float32, seed=seed)).cuda()
    x = _randn(1024, 6, dtype=torch.float16, seed_or_gen=seed).t()  # stride (1, 6)
    y = m(x)
    _check(y, m, x, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compile_fullgraph_matches_eager(dtype, seed):
    """The compiled two-layer model and the eager one, each against the float64 reference of its
    last layer at the dtype's bound. That reference takes the eager hidden activations
    (GELU(layer 1), rounded to the dtype; layer 1 itself checked against its own reference): the
    compiled graph's GELU (inductor's) may round a hidden value differently by an ulp, which moves
    the output far less than the bound, so compiled and eager are not compared bit for bit."""
    if dtype == torch.bfloat16 and _bf16_unsupported():
        pytest.skip("bf16 needs sm_80+ code paths")
    torch._dynamo.reset()
    model = _two_layer_model(dtype).cuda()
    compiled = torch.compile(model, fullgraph=True)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for shape in ((5, 256), (9, 256), (2, 9, 256)):  # (9, 256): recompiled with a dynamic batch
        x = _randn(*shape, dtype=dtype, seed_or_gen=gen)
        y = compiled(x)
        h1 = model[0](x)  # eager, layer by layer: model(x)
        h = model[1](h1)  # the eager hidden activations, in dtype
        eager = model[2](h)
        assert y.shape == eager.shape == shape[:-1] + (64,)
        _check(h1, model[0], x, what=f"layer 1, x {tuple(shape)}", seed=seed)
        _check(eager, model[2], h, what=f"eager, x {tuple(shape)}", seed=seed)
        _check(y, model[2], h, what=f"compiled, x {tuple(shape)}", seed=seed)


@pytest.mark.gpu
def test_opcheck_cuda(seed):
    m = jmt.MarlinLinear.from_linear(_linear(1024, 512, seed=seed)).cuda()
    x = _randn(4, 1024, dtype=torch.float16, seed_or_gen=seed)
    torch.library.opcheck(OP, (x, m._handle, 512, m.bias))
    torch.library.opcheck(OP, (x, m._handle, 512, None))


@pytest.mark.gpu
def test_cuda_graph_replay(seed):
    m = jmt.MarlinLinear.from_linear(_linear(1024, 512, seed=seed)).cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = _randn(7, 1024, dtype=torch.float16, seed_or_gen=gen)
    m(x)  # warm-up: compile, upload, workspace
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = m(x)
    for i in range(3):  # new inputs each replay, same buffers
        x.copy_(_randn(7, 1024, dtype=torch.float16, seed_or_gen=gen))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        _check(y, m, x, what=f"M=7 replay {i + 1}", seed=seed)


@pytest.mark.gpu
def test_capture_without_warmup_raises_capture_error(seed):
    # a fresh module (its weight never uploaded) on a shape no other test runs
    m = jmt.MarlinLinear.from_linear(_linear(192, 320, seed=seed), group_size=64).cuda()
    x = _randn(3, 192, dtype=torch.float16, seed_or_gen=seed)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(CaptureError, match="warm"):
        with torch.cuda.graph(g):
            m(x)
