"""The large-M route (dequantise into a dense workspace + cuBLAS) end to end.

CPU: the cuBLAS binding against a fake libcublas built here (argument order, transposes, leading
dimensions, alpha/beta, workspace kept across stream changes), the workspace bookkeeping
(growth, the graph workspace, CaptureError) and the launcher's call sequence with the GPU calls
recorded. GPU (marked): linear() against the float64 reference at M = 1000, 1024, 4096 for every
quant type and both dtypes, the dense weight bit for bit, act-order, bias, padding, strided x,
the caller's stream, CUDA-graph capture and replay.
"""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

import jitmarlin
from jitmarlin import emu
from jitmarlin.errors import CaptureError, UnsupportedError
from jitmarlin.kernels import planner
from jitmarlin.kernels.dequant import cublas, dequant_gemm
from jitmarlin.reference import check_output
from jitmarlin.weights import halves

# ---- CPU: the cuBLAS binding against a fake libcublas ---------------------------------------------

FAKE_CUBLAS = r"""
// A stand-in for libcublas: the five entry points jitmarlin.kernels.dequant.cublas uses, on host memory. A GEMM
// without a caller workspace fails (the real one would allocate: not allowed in graph capture);
// leading dimensions are checked as cuBLAS checks them.
#include <cstddef>
#include <cstdint>
#include <cstring>
struct Handle { void* stream; void* ws; size_t ws_bytes; int gemms; int set_streams; };
static double load(const void* p, size_t i, int t) {
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(p) + 2 * i, 2);
  if (t == 2) { _Float16 h; std::memcpy(&h, &b, 2); return (double)h; }
  uint32_t u = (uint32_t)b << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static void store(void* p, size_t i, int t, double v) {
  uint16_t b;
  if (t == 2) { _Float16 h = (_Float16)v; std::memcpy(&b, &h, 2); }
  else { float f = (float)v; uint32_t u; std::memcpy(&u, &f, 4); b = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
  std::memcpy(static_cast<char*>(p) + 2 * i, &b, 2);
}
extern "C" {
int cublasCreate_v2(Handle** h) { *h = new Handle{nullptr, nullptr, 0, 0, 0}; return 0; }
int cublasDestroy_v2(Handle* h) { delete h; return 0; }
int cublasSetStream_v2(Handle* h, void* s) { h->stream = s; h->ws = nullptr; h->ws_bytes = 0; h->set_streams++; return 0; }
int cublasSetWorkspace_v2(Handle* h, void* w, size_t n) { h->ws = w; h->ws_bytes = n; return 0; }
int cublasGemmEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A,
                 int at, int lda, const void* B, int bt, int ldb, const void* beta, void* C, int ct,
                 int ldc, int compute, int algo) {
  if (!h->ws || !h->ws_bytes) return 15;
  if (compute != 68 || algo != -1 || at != bt || at != ct || (at != 2 && at != 14)) return 7;
  if (lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
  float al, be;
  std::memcpy(&al, alpha, 4);
  std::memcpy(&be, beta, 4);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int l = 0; l < k; ++l)
        s += load(A, ta ? l + (size_t)i * lda : i + (size_t)l * lda, at) *
             load(B, tb ? j + (size_t)l * ldb : l + (size_t)j * ldb, bt);
      const size_t c = i + (size_t)j * ldc;
      store(C, c, ct, al * s + (be != 0 ? be * load(C, c, ct) : 0.0));
    }
  h->gemms++;
  return 0;
}
int fake_state(Handle* h, void** stream, void** ws, int* gemms, int* set_streams) {
  *stream = h->stream; *ws = h->ws; *gemms = h->gemms; *set_streams = h->set_streams;
  return 0;
}
}
"""


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    cxx = emu.compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("fake_cublas")
    (d / "fake.cpp").write_text(FAKE_CUBLAS)
    so = d / "libfakecublas.so"
    r = subprocess.run(
        [cxx, "-std=c++17", "-O1", "-fPIC", "-shared", "-o", str(so), str(d / "fake.cpp")],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        pytest.skip(f"cannot build the fake cuBLAS (needs _Float16): {r.stderr[-300:]}")
    lib = cublas.declare(ctypes.CDLL(str(so)))
    lib.fake_state.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 4
    return lib


def _state(lib, blas):
    stream, ws = ctypes.c_void_p(), ctypes.c_void_p()
    gemms, sets = ctypes.c_int(), ctypes.c_int()
    lib.fake_state(blas.handle, ctypes.byref(stream), ctypes.byref(ws), ctypes.byref(gemms), ctypes.byref(sets))
    return stream.value, ws.value, gemms.value, sets.value


@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_blas_linear_is_row_major_x_at_w_transposed(fake_lib, act, seed, rng):
    m, n, k = 5, 24, 40  # x (m, k) with row stride 48; w (n, k) inside (32, 64)
    x = halves.to_bits(rng.standard_normal((m, 48)), act)
    w = halves.to_bits(rng.standard_normal((32, 64)), act)
    bias = halves.to_bits(rng.standard_normal(n), act)
    out = np.tile(bias, (m, 1))
    ws = np.zeros(256, np.uint8)
    blas = cublas.Blas(ws.ctypes.data, ws.nbytes, lib=fake_lib)
    blas.linear(1234, act, m, n, k, x.ctypes.data, 48, w.ctypes.data, 64, out.ctypes.data, n, alpha=0.5, beta=1.0)
    xf, wf, bf = (halves.from_bits(a, act).astype(np.float64) for a in (x, w, bias))
    ref = 0.5 * xf[:, :k] @ wf[:n, :k].T + bf
    check_output(halves.from_bits(out, act), ref, act, what="alpha 0.5, beta 1", seed=seed, family="fake cuBLAS")
    assert _state(fake_lib, blas) == (1234, ws.ctypes.data, 1, 1)
    blas.linear(1234, act, m, n, k, x.ctypes.data, 48, w.ctypes.data, 64, out.ctypes.data, n)
    assert _state(fake_lib, blas)[2:] == (2, 1)  # same stream: not re-bound
    blas.linear(0, act, m, n, k, x.ctypes.data, 48, w.ctypes.data, 64, out.ctypes.data, n)
    assert _state(fake_lib, blas) == (None, ws.ctypes.data, 3, 2)  # workspace set again
    check_output(
        halves.from_bits(out, act), (ref - bf) / 0.5, act, what="alpha 1, beta 0", seed=seed, family="fake cuBLAS"
    )
    blas.close()


def test_blas_errors_are_clear(fake_lib):
    ws = np.zeros(16, np.uint8)
    blas = cublas.Blas(ws.ctypes.data, 16, lib=fake_lib)
    a = np.zeros((8, 8), np.uint16)
    with pytest.raises(cublas.CublasError, match="cublasGemmEx failed: CUBLAS_STATUS_INVALID_VALUE"):
        blas.linear(1, "float16", 8, 8, 8, a.ctypes.data, 4, a.ctypes.data, 8, a.ctypes.data, 8)


def test_missing_cublas_is_a_clear_error(monkeypatch):
    def not_found():
        raise RuntimeError("no cublas here")

    monkeypatch.setattr(cublas, "_lib", None)
    monkeypatch.setattr(cublas, "SONAMES", ("libjitmarlin-no-such-cublas.so.0",))
    monkeypatch.setattr(cublas, "_pathfinder_path", not_found)
    with pytest.raises(UnsupportedError, match="nvidia-cublas.*no cublas here"):
        cublas.library()


# ---- CPU: workspace bookkeeping and the launcher's call sequence ----------------------------------


class FakeWorkspace:
    made: list = []

    def __init__(self, device, cc):
        self.elems = 0
        self.grown = []
        FakeWorkspace.made.append(self)

    def grow(self, elems):
        if elems > self.elems:
            self.elems = elems
            self.grown.append(elems)


def test_workspace_per_stream_graph_workspace_and_capture(monkeypatch):
    capturing = set()
    monkeypatch.setattr(dequant_gemm, "DenseWorkspace", FakeWorkspace)
    monkeypatch.setattr(dequant_gemm, "_dense", {})
    monkeypatch.setattr(dequant_gemm, "is_capturing", lambda s: s in capturing)
    ws7 = dequant_gemm.workspace(0, 7, 100, (9, 0))
    graph = dequant_gemm._dense[(0, -1)]
    assert ws7.elems == 100 and graph.elems == 100 and ws7 is not graph
    assert dequant_gemm.workspace(0, 7, 50, (9, 0)) is ws7 and ws7.grown == [100]
    assert dequant_gemm.workspace(0, 7, 300, (9, 0)) is ws7 and graph.elems == 300
    ws8 = dequant_gemm.workspace(0, 8, 200, (9, 0))
    assert ws8 not in (ws7, graph) and graph.grown == [100, 300]
    capturing.update({9, 7})
    assert dequant_gemm.workspace(0, 9, 250, (9, 0)) is graph  # a new capture stream
    assert dequant_gemm.workspace(0, 7, 300, (9, 0)) is ws7  # captured on a warmed stream
    with pytest.raises(CaptureError, match="warm-up"):
        dequant_gemm.workspace(0, 9, 301, (9, 0))
    with pytest.raises(CaptureError, match="warm-up"):
        dequant_gemm.workspace(1, 9, 1, (9, 0))  # nothing made on device 1


def test_launcher_call_sequence(monkeypatch):
    from types import SimpleNamespace

    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.planner import plan
    from jitmarlin.kernels.problem import Problem

    calls = []

    def fake_function(artifact, key, device, name=None):
        fname = name or artifact.name

        def f(grid, block, args, stream=None):
            calls.append((fname, grid, block, tuple(int(a) for a in args), stream))

        return f

    class Blas:
        def linear(self, *args, **kw):
            calls.append(("gemm", args, kw))

    monkeypatch.setattr(dequant_gemm, "get_function", fake_function)
    monkeypatch.setattr(dequant_gemm, "stream_object", lambda s: f"stream{s}")
    monkeypatch.setattr(dequant_gemm, "current_device", lambda: 0)
    h100, problem = get_profile("h100"), Problem(1000, 1024, 2048, "bfloat16", "nvfp4", 16)
    p = plan(h100, problem, planner.dequant_spec(h100, problem))
    ws = SimpleNamespace(weights=SimpleNamespace(data=SimpleNamespace(ptr=0x9000)), blas=Blas())
    art = SimpleNamespace(name=p.spec.name)
    lz = dequant_gemm.DequantLauncher(
        p, art, "key", 0, 77, {"B": 1, "S": 2, "Z": 0}, ws, n_out=1000, k_in=2040, gscale=0.25
    )
    lz(0x100, 2048 + 64, 0x200, 0x300)
    name = p.spec.name
    assert calls[0] == (name, (p.grid, 1, 1), (256, 1, 1), (1, 2, 0, 0x9000, 1024, 2048), "stream77")
    assert calls[1][0] == name + "_bias" and calls[1][3] == (0x300, 0x200, 1000, 1000)
    assert calls[1][1][0] == min(dequant_gemm.BIAS_MAX_BLOCKS, -(-1000 * 500 // 256))
    assert calls[2] == (
        "gemm",
        (77, "bfloat16", 1000, 1000, 2040, 0x100, 2048 + 64, 0x9000, 2048, 0x200, 1000),
        {"alpha": 0.25, "beta": 1.0},
    )
    calls.clear()
    lz(0x100, 2048, 0x200, 0)  # no bias: no bias kernel, beta 0
    assert [c[0] for c in calls] == [name, "gemm"] and calls[1][2] == {"alpha": 0.25, "beta": 0.0}


# ---- GPU ------------------------------------------------------------------------------------------


def _cp():
    import cupy

    return cupy


def _path() -> str:
    from jitmarlin.jit.profiles import planning_profile

    return planning_profile(0).path


@pytest.fixture
def large_m_from_256(monkeypatch):
    """Send M >= 256 to the dequant route whatever thresholds the planner holds (so that M = 1000,
    not a multiple of 16, is tested on this route too; on sm_90 also where the wgmma plan would
    have whole tiles)."""
    monkeypatch.setattr(planner, "dequant_min_m", lambda profile: 256)
    monkeypatch.setattr(planner, "dequant_route", lambda profile, p: p.m >= 256)


def _skip_unsupported(act):
    if act == "bfloat16" and _path() in ("sm70", "sm75"):
        pytest.skip("bf16 needs the sm80 path")


def _torch_dtype(act):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[act]


def _case(qw, m, act, kind, rng, *, bias=True, poison=True, lda=None):
    """(x, bias, out) in the array kind, x rounded to act (row stride lda when given), out
    poisoned with NaN; and the float64 reference on the GPU from the exact dequantized weight."""
    from jitmarlin.weights.quant import dequantize

    cp = _cp()
    k, n = qw.in_features, qw.out_features
    xh = halves.round_to(rng.standard_normal((m, lda or k)), act)
    bh = halves.round_to(rng.standard_normal(n), act) if bias else None
    w64 = cp.asarray(dequantize(qw, act, dtype=np.float64))
    ref = cp.asarray(xh[:, :k], dtype=cp.float64) @ w64.T
    if bh is not None:
        ref += cp.asarray(bh, dtype=cp.float64)
    if kind == "torch":
        import torch

        dt = _torch_dtype(act)
        x = torch.from_numpy(xh).to("cuda", dt)[:, :k]
        b = None if bh is None else torch.from_numpy(bh).to("cuda", dt)
        out = torch.full((m, n), float("nan"), dtype=dt, device="cuda") if poison else None
    else:
        assert act == "float16", "CuPy has no bfloat16 arrays: use torch"
        x = cp.asarray(xh, dtype=cp.float16)[:, :k]
        b = None if bh is None else cp.asarray(bh, dtype=cp.float16)
        out = cp.full((m, n), cp.nan, dtype=cp.float16) if poison else None
    return x, b, out, ref


def _check(y, ref, act, qw, what="", seed=None):
    """linear()'s output y (rows, N) against the float64 reference (CuPy) element by element
    (tests/gpu_cases.py's check_linear: every element written and within the bound; the margin
    recorded under the family of the kernel linear() ran for these rows)."""
    from gpu_cases import check_linear

    return check_linear(y, ref, act, qw, int(y.shape[0]), what=what or f"M={int(y.shape[0])}", seed=seed)


def _sync(kind):
    if kind == "torch":
        import torch

        torch.cuda.synchronize()
    else:
        _cp().cuda.Device().synchronize()


def _dequant_launchers(qw):
    return [v for v in qw._launchers.values() if isinstance(v, dequant_gemm.DequantLauncher)]


LARGE_M_CASES = [
    ("uint4b8", 128, "float16", 1024, "cupy"),
    ("uint4b8", 128, "bfloat16", 1000, "torch"),
    ("uint4", 32, "float16", 1000, "torch"),
    ("uint4", -1, "bfloat16", 4096, "torch"),
    ("uint8b128", -1, "float16", 4096, "cupy"),
    ("uint8b128", 64, "bfloat16", 1024, "torch"),
    ("uint8", 64, "bfloat16", 1000, "torch"),
    ("uint8", -1, "float16", 1024, "cupy"),
    ("float8_e4m3fn", 128, "bfloat16", 1000, "torch"),
    ("float8_e4m3fn", -1, "float16", 4096, "cupy"),
    ("nvfp4", 16, "float16", 4096, "cupy"),
    ("nvfp4", 16, "bfloat16", 1024, "torch"),
    ("mxfp4", 32, "float16", 1000, "cupy"),
    ("mxfp4", 32, "bfloat16", 4096, "torch"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("qt,group,act,m,kind", LARGE_M_CASES, ids=lambda v: str(v))
def test_large_m_matches_float64_reference(qt, group, act, m, kind, seed, rng, large_m_from_256):
    if kind == "torch":
        pytest.importorskip("torch")
    _skip_unsupported(act)
    # out_features 1000 (padded to 1024), in_features 2048; fresh random data every run
    qw = jitmarlin.quantize(rng.standard_normal((1000, 2048)) * 0.05, qt, group, scale_dtype=act)
    if qt == "nvfp4":
        assert qw.global_scale != 1.0  # applied as the GEMM's alpha
    x, b, out, ref = _case(qw, m, act, kind, rng)
    y = jitmarlin.linear(x, qw, bias=b, out=out)
    assert y is out and tuple(y.shape) == (m, 1000)
    _sync(kind)
    assert len(_dequant_launchers(qw)) == 1
    _check(y, ref, act, qw, f"{qt} g{group} M={m}", seed)
    x2, _, _, ref2 = _case(qw, m, act, kind, rng, bias=False)  # again: the workspace is reused
    _check(jitmarlin.linear(x2, qw), ref2, act, qw, f"{qt} g{group} M={m}, no bias, second call", seed)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "qt,group,act",
    [
        (q, g, a)
        for q, g in [
            ("uint4b8", 32),
            ("uint4", -1),
            ("uint4", 128),
            ("uint8b128", -1),
            ("uint8", 32),
            ("float8_e4m3fn", 128),
            ("nvfp4", 16),
            ("mxfp4", 32),
        ]
        for a in ("float16", "bfloat16")
    ],
    ids=lambda v: str(v),
)
def test_dense_weight_is_bitwise_the_oracle_on_gpu(qt, group, act, seed, rng, large_m_from_256):
    """The hardware's dense weight equals the float64 oracle rounded once (same check as the
    emulator test), and the output is right."""
    from test_dequant_kernel import check_dense, random_weight

    pytest.importorskip("torch")
    _skip_unsupported(act)
    qw = random_weight(rng, qt, group, act, n=200, k=256, float_zeros=(group == 128))
    x, b, out, ref = _case(qw, 256, act, "torch", rng)
    y = jitmarlin.linear(x, qw, bias=b, out=out)
    _sync("torch")
    _check(y, ref, act, qw, f"{qt} g{group} M=256", seed)
    (lz,) = _dequant_launchers(qw)
    w = _cp().asnumpy(lz.keep[1][: qw.n * qw.k]).reshape(qw.n, qw.k)
    check_dense(w, qw, act)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_large_m_act_order_and_padding(kind, seed, rng, large_m_from_256):
    from jitmarlin.weights.quant import from_codes

    if kind == "torch":
        pytest.importorskip("torch")
    g_idx = rng.permutation(np.repeat(np.arange(8), 128))
    qw = from_codes(
        "uint4b8", rng.integers(0, 16, (1000, 1024)), rng.random((8, 1000)) * 0.01 + 0.001, 128, g_idx=g_idx
    )
    assert qw.perm is not None and qw.n == 1024
    for m in (1024, 1000):
        for i in range(2):  # the gather buffer and workspace reused
            x, b, out, ref = _case(qw, m, "float16", kind, rng)
            y = jitmarlin.linear(x, qw, bias=b, out=out)
            _sync(kind)
            _check(y, ref, "float16", qw, f"act-order M={m} call {i + 1}", seed)
    qw = from_codes(
        "uint4",
        rng.integers(0, 16, (200, 136)),
        rng.random((1, 200)) * 0.01 + 0.001,
        -1,
        zeros=rng.random((1, 200)) * 15,
    )  # padded K and N, float zero points
    x, b, out, ref = _case(qw, 1000, "float16", kind, rng)
    y = jitmarlin.linear(x, qw, bias=b, out=out)
    _sync(kind)
    _check(y, ref, "float16", qw, "padded M=1000", seed)


@pytest.mark.gpu
def test_large_m_strided_rows(seed, rng, large_m_from_256):
    cp = _cp()
    qw = jitmarlin.quantize(rng.standard_normal((512, 1024)) * 0.05, "uint4b8", 128)
    x, b, out, ref = _case(qw, 1000, "float16", "cupy", rng, lda=1024 + 64)  # row stride 1088
    assert x.strides[0] == (1024 + 64) * 2
    y = jitmarlin.linear(x, qw, bias=b, out=out)
    _check(y, ref, "float16", qw, "M=1000, row stride 1088", seed)
    big = cp.asarray(rng.standard_normal((2, 600, 1024 + 128)), dtype=cp.float16)
    x3 = big[:, :, :1024]  # (2, 600, 1024), rows 1152 apart
    y3 = jitmarlin.linear(x3, qw)
    from jitmarlin.weights.quant import dequantize

    ref3 = x3.reshape(1200, 1024).astype(cp.float64) @ cp.asarray(dequantize(qw, dtype=np.float64)).T
    assert y3.shape == (2, 600, 512)
    _check(y3.reshape(1200, 512), ref3, "float16", qw, "M=2x600, row stride 1152", seed)


@pytest.mark.gpu
def test_large_m_runs_on_the_callers_stream(seed, rng, large_m_from_256):
    torch = pytest.importorskip("torch")
    qw = jitmarlin.quantize(rng.standard_normal((4096, 4096)) * 0.05, "uint4b8", 128)
    x, _, out, ref = _case(qw, 1024, "float16", "torch", rng, bias=False)
    jitmarlin.linear(x, qw)  # warm: compile, upload, workspace outside the timed part
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # keeps `s` busy for tens of milliseconds
        jitmarlin.linear(x, qw, out=out)
    snap = out.clone()  # on the default stream: must not see results yet
    torch.cuda.default_stream().synchronize()
    assert bool(torch.isnan(snap).all()), "the dequant kernel or the GEMM did not run on torch's stream"
    s.synchronize()
    _check(out, ref, "float16", qw, "M=1024 on a side stream", seed)


@pytest.mark.gpu
def test_large_m_cuda_graph_replay(seed, rng, large_m_from_256):
    torch = pytest.importorskip("torch")
    act = "float16" if _path() in ("sm70", "sm75") else "bfloat16"
    dt = _torch_dtype(act)
    q1 = jitmarlin.quantize(rng.standard_normal((1024, 2048)) * 0.05, "uint4b8", 128, scale_dtype=act)
    q2 = jitmarlin.quantize(rng.standard_normal((3072, 1024)) * 0.05, "nvfp4", 16, scale_dtype=act)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(1000, 2048, device="cuda", dtype=dt, generator=gen)
    b1 = torch.randn(1024, device="cuda", dtype=dt, generator=gen)
    h = jitmarlin.linear(x, q1, bias=b1)  # warm-up: compile, upload, workspaces
    y = jitmarlin.linear(h, q2)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # a new capture stream: the graph workspace
        h = jitmarlin.linear(x, q1, bias=b1)
        y = jitmarlin.linear(h, q2)
    from jitmarlin.weights.quant import dequantize

    cp = _cp()
    w1 = cp.asarray(dequantize(q1, act, dtype=np.float64))
    w2 = cp.asarray(dequantize(q2, act, dtype=np.float64))
    for i in range(3):  # new inputs each replay, same buffers
        x.copy_(torch.randn(1000, 2048, device="cuda", dtype=dt, generator=gen))
        h.fill_(float("nan"))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref_h = cp.from_dlpack(x.double()) @ w1.T + cp.from_dlpack(b1.double())
        _check(h, ref_h, act, q1, f"first GEMM, replay {i + 1}", seed)
        ref_y = cp.from_dlpack(h.double()) @ w2.T  # the second GEMM's oracle, on its actual input
        _check(y, ref_y, act, q2, f"second GEMM, replay {i + 1}", seed)


@pytest.mark.gpu
def test_large_m_capture_needs_warm_up(seed, rng, large_m_from_256):
    torch = pytest.importorskip("torch")
    small = jitmarlin.quantize(rng.standard_normal((256, 1024)) * 0.05, "uint4b8", 128)
    big = jitmarlin.quantize(rng.standard_normal((8192, 4096)) * 0.05, "uint4b8", 128)
    # Earlier tests may have grown the per-device graph workspace past `big`: set it aside (the
    # launchers that use it hold references) and put it back afterwards.
    saved = dequant_gemm._dense.pop((0, -1), None)
    try:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(1024, 1024, device="cuda", dtype=torch.float16, generator=gen)
        jitmarlin.linear(x, small)  # compiles the kernel; workspaces of <= small
        xb = torch.randn(1024, 4096, device="cuda", dtype=torch.float16, generator=gen)
        jitmarlin.linear(xb[:1], big)  # uploads `big` (fused route at M = 1)
        torch.cuda.synchronize()
        graph_ws = dequant_gemm._dense.get((0, -1))
        assert graph_ws is None or graph_ws.elems < big.n * big.k
        g = torch.cuda.CUDAGraph()
        with pytest.raises(CaptureError, match="warm-up"):
            with torch.cuda.graph(g):
                jitmarlin.linear(xb, big)  # the graph workspace would have to grow
    finally:
        now = dequant_gemm._dense.get((0, -1))
        if saved is not None and (now is None or saved.elems >= now.elems):
            dequant_gemm._dense[(0, -1)] = saved


@pytest.mark.gpu
def test_workspace_grows_and_keeps_outgrown_buffers(seed, rng, large_m_from_256):
    cp = _cp()
    stream = cp.cuda.Stream(non_blocking=True)
    dequant_gemm._dense.pop((0, stream.ptr), None)  # a destroyed stream's handle value may recur
    small = jitmarlin.quantize(rng.standard_normal((256, 1024)) * 0.05, "uint8b128", 64)
    big = jitmarlin.quantize(rng.standard_normal((2048, 2048)) * 0.05, "uint8b128", 64)
    with stream:
        for qw in (small, big, small):
            x, b, out, ref = _case(qw, 300, "float16", "cupy", rng)
            y = jitmarlin.linear(x, qw, bias=b, out=out)
            stream.synchronize()
            _check(y, ref, "float16", qw, f"M=300, N={qw.out_features}", seed)
    ws = dequant_gemm._dense[(0, stream.ptr)]
    assert ws.elems == big.n * big.k and len(ws.retired) == 1
    assert dequant_gemm._dense[(0, -1)].elems >= ws.elems


@pytest.mark.gpu
def test_workspace_growth_waits_for_the_allocators_writes():
    """grow() allocates on jitmarlin's private stream. An allocator that writes new memory (this
    suite's NaN fill, or a user's CuPy allocator) writes it on that stream, and the caller's
    stream writes the dense weight there next: grow() must not return before those writes are
    done. (Without the wait, the emulated-t4 run of s53 saw whole NaN columns: the fill landed
    between the dequantisation kernel and the GEMM.) Deterministic: the allocator here spins for
    about a tenth of a second before it returns the memory."""
    cp = _cp()
    from jitmarlin.jit.launch import private_stream

    spin = cp.RawKernel(
        r'''extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
    }''',
        "spin",
    )
    pool = cp.get_default_memory_pool()

    def slow(size):
        mem = pool.malloc(size)
        spin((1,), (1,), (np.int64(200_000_000),))  # on the current (allocating) stream
        return mem

    ws = dequant_gemm.DenseWorkspace(0, (9, 0))
    prev = cp.cuda.get_allocator()
    cp.cuda.set_allocator(slow)
    try:
        ws.grow(1 << 16)
        assert private_stream(0).done, "grow() returned while the allocator's work was still running"
    finally:
        cp.cuda.set_allocator(prev)
        ws.blas.close()


# ---- CPU: the autotuner can pick the route ---------------------------------------------------------


def test_spec_kinds_read_back_either_kind():
    from jitmarlin.kernels.spec import DequantSpec, KernelSpec, spec_from_canonical, spec_kind

    d = DequantSpec("sm80", "nvfp4", "bfloat16", 1)
    k = KernelSpec("sm80", "nvfp4", "bfloat16", 1, 1, 8, 8, 4)
    assert spec_kind(d) == "DequantSpec" and spec_kind(k) == "KernelSpec"
    assert spec_from_canonical(d.canonical()) == d == spec_from_canonical(d.canonical(), "DequantSpec")
    assert spec_from_canonical(k.canonical()) == k
    with pytest.raises(ValueError):
        spec_from_canonical(d.canonical(), "KernelSpec")  # a kind's text is not read as another's
    with pytest.raises(ValueError):
        spec_from_canonical(k.canonical(), "DequantSpec")
    with pytest.raises(ValueError, match="unknown route"):
        spec_from_canonical(d.canonical().replace('"dequant"', '"other"'))


def test_prepare_builds_the_launcher_of_the_chosen_route(tmp_path, monkeypatch):
    """api._prepare with the GPU parts faked: the planner's route by M, and a tuned choice whose
    winner is the dequant route (an autotuner comparing routes) builds a DequantLauncher."""
    import dataclasses
    import types

    from jitmarlin.jit import launch
    from jitmarlin.jit.cache import KernelCache
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels import launch as family_launch
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.kernels.spec import DequantSpec
    from jitmarlin.ops import linear as api
    from jitmarlin.service import tune
    from jitmarlin.weights.quant import QuantizedWeight

    monkeypatch.setenv("JITMARLIN_CACHE_DIR", str(tmp_path))
    prof = dataclasses.replace(get_profile("h100"), name="NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(api, "planning_profile", lambda d: prof)
    monkeypatch.setattr(api, "live_profile", lambda d: prof)
    monkeypatch.setattr(launch, "is_capturing", lambda s: False)
    monkeypatch.setattr(launch, "get_function", lambda art, key, dev: "func")
    monkeypatch.setattr(family_launch, "workspace", lambda dev, s, slots: "ws")
    monkeypatch.setattr(family_launch, "Launcher", lambda plan, *a, **kw: ("fused", plan))
    grown = []
    monkeypatch.setattr(dequant_gemm, "workspace", lambda dev, s, elems, cc: grown.append(elems) or "dws")
    monkeypatch.setattr(dequant_gemm, "DequantLauncher", lambda plan, *a: ("dequant", plan, a))
    monkeypatch.setattr(
        KernelCache,
        "get",
        lambda self, spec, arch, compile_missing=True: (types.SimpleNamespace(name=spec.name), "k" * 64, "memory"),
    )
    ptr = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0))
    monkeypatch.setattr(QuantizedWeight, "to_device", lambda self, d, a: (ptr, ptr, None, None))
    # N = 896: at 2048 rows its 56 wgmma tiles fill less than one wave of SMs and do not deal
    # whole (a Stream-K plan), so the planner takes the route there (planner.dequant_route)
    qw = QuantizedWeight(
        "uint4b8",
        128,
        896,
        2048,
        np.zeros((128, 1792), np.int32),
        np.zeros((16, 896), np.uint16),
        out_features=848,
        in_features=2000,
        global_scale=0.5,
    )
    threshold = planner.dequant_min_m(prof)
    route, p, args = api._prepare(qw, 0, "float16", threshold, 0)
    assert route == "dequant" and p.route == "dequant" and grown == [896 * 2048]
    assert args[-3:] == (848, 2000, 0.5)  # n_out, k_in, global scale
    assert api._prepare(qw, 0, "float16", threshold - 1, 0)[0] == "fused"
    # a stored tuned choice: the dequant route wins the M=256 bucket
    bp = Problem(256, 896, 2048, "float16", "uint4b8", 128)
    default = planner.plan(prof, bp).spec
    win = DequantSpec("sm80", "uint4b8", "float16", 8)
    assert default.route == "fused"
    c = tune.TunedChoice(
        gpu=prof.name,
        arch=prof.arch,
        qtype="uint4b8",
        act="float16",
        group_size=128,
        n=896,
        k=2048,
        m_bucket=256,
        spec=win.canonical(),
        kind="DequantSpec",
        us=5.0,
        default_spec=default.canonical(),
        default_kind="KernelSpec",
        default_us=9.0,
        candidates=3,
        failed=0,
        jitmarlin=tune.__version__,
        templates=tune.templates_tag(),
        created=1.7e9,
    )
    assert tune.record_problem(c.key, c.to_dict()) is None
    tune.store(KernelCache(tmp_path), c)
    route, p, _ = api._prepare(qw, 0, "float16", 200, 0)
    assert route == "dequant" and p.spec == win
