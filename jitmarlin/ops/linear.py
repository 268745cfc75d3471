"""The linear op: linear() and plan_for() (prewarm() is the service layer's: jitmarlin.service.fleet).

linear() validates its arguments on every call (cheap integer checks) and keeps, per weight, a
launcher for each (device, activation dtype, M, stream) it has seen: the planning, compiling and
workspace set-up happen once, on the first call with that key. The planner picks the route: the
fused kernel (kernels.launch.Launcher), or from its M threshold up, dequantise + cuBLAS
(dequant_gemm.DequantLauncher); both take the same call.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from jitmarlin import settings
from jitmarlin.errors import CaptureError, InputError
from jitmarlin.jit import launch
from jitmarlin.jit.arrays import is_cupy, is_torch
from jitmarlin.jit.cache import default_cache
from jitmarlin.jit.profiles import DeviceProfile, live_profile, planning_profile
from jitmarlin.kernels import launch as family_launch
from jitmarlin.kernels import planner, tuned
from jitmarlin.kernels.dequant import dequant_gemm
from jitmarlin.kernels.problem import Problem
from jitmarlin.weights.qtypes import check_shape, kernel_dims, normalize_act
from jitmarlin.weights.quant import QuantizedWeight

_TORCH_ACT: dict = {}


def _torch_act(dtype) -> str | None:
    a = _TORCH_ACT.get(dtype)
    if a is None:
        s = str(dtype)
        a = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}.get(s)
        if a is not None:
            _TORCH_ACT[dtype] = a
    return a


def _launcher(qw: QuantizedWeight, device: int, act: str, m: int, stream: int, pdl: bool = False):
    launchers = qw._launchers
    key = (device, act, m, stream, pdl)
    lz = launchers.get(key)
    if lz is None:
        lz = _prepare(qw, device, act, m, stream, pdl=pdl)
        launchers[key] = lz
    return lz


def _pdl(enable_pdl) -> bool:
    return settings.pdl_default() if enable_pdl is None else bool(enable_pdl)


def _prepare(
    qw: QuantizedWeight, device: int, act: str, m: int, stream: int, spec=None, pdl: bool = False
) -> family_launch.Launcher | dequant_gemm.DequantLauncher:
    """First call for this key: plan, fetch or compile, upload the weight, set up the workspace.
    `spec` (a KernelSpec or a DequantSpec) overrides the route and kernel choice (the autotuner
    measures candidates through it); without it a tuned choice stored for this GPU and shape
    bucket is used (or, with JITMARLIN_AUTOTUNE=1, made now: jitmarlin.kernels.tuned.choose_for), else the
    planner's. pdl: launch the fused kernel with programmatic dependent launch where the GPU has
    it (sm_90+); the dequant + cuBLAS route and older GPUs launch as usual."""
    profile = planning_profile(device)
    problem = Problem(m, qw.n, qw.k, act, qw.qtype, qw.group_size)
    live = live_profile(device)
    arch = live.arch
    cache = default_cache()
    capturing = launch.is_capturing(stream)
    if spec is None:
        spec = tuned.choose_for(profile, arch, problem, cache, device=device, capturing=capturing)
    plan = planner.plan(profile, problem, spec)
    pdl = pdl and plan.route == "fused" and live.cc >= launch.PDL_MIN_CC
    if pdl != getattr(plan.spec, "pdl", False):  # the same kernel, built with (or without) the wait
        plan = planner.plan(profile, problem, replace(plan.spec, pdl=pdl))
    if capturing and (device, act) not in qw._device:
        raise CaptureError(
            "the weight has not been uploaded to this GPU yet: call linear() once with it before capturing (warm-up)"
        )
    art, key, status = cache.get(plan.spec, arch, compile_missing=not capturing)
    if art is None:
        raise CaptureError(
            f"kernel {plan.spec.name} for M={m} is not compiled yet and CUDA-graph capture is in "
            "progress: run linear() once with this shape before capturing (warm-up), or prewarm"
        )
    b, s, z, _ = qw.to_device(device, act)
    ptrs = {"B": b.data.ptr, "S": s.data.ptr, "Z": 0 if z is None else z.data.ptr}
    if plan.route == "dequant":  # large M: dense weight workspace + cuBLAS
        ws = dequant_gemm.workspace(device, stream, qw.n * qw.k, live.cc)
        return dequant_gemm.DequantLauncher(
            plan, art, key, device, stream, ptrs, ws, qw.out_features, qw.in_features, qw.kernel_global_scale(act)
        )
    func = launch.get_function(art, key, device)
    # Sized for the largest grid this GPU can run (two blocks an SM), so it never has to grow.
    ws = family_launch.workspace(device, stream, live.sms)
    return family_launch.Launcher(
        plan, func, device, stream, ptrs, ws, qw.out_features, qw.in_features, qw.kernel_global_scale(act), pdl=pdl
    )


def _rows(shape, strides, k: int, what: str = "x"):
    """(M, row stride) of an array viewed as rows of length k; strides in elements."""
    nd = len(shape)
    if nd == 0:
        raise InputError(f"{what} must have at least one dimension")
    if shape[-1] != k:
        raise InputError(f"{what}.shape[-1] = {shape[-1]} but the weight has in_features = {k}")
    if shape[-1] > 1 and strides[-1] != 1:
        raise InputError(f"{what} must be contiguous along its last dimension (stride {strides[-1]})")
    m = 1
    for d in shape[:-1]:
        m *= d
    lead = [(shape[i], strides[i]) for i in range(nd - 1) if shape[i] != 1]
    if m <= 1 or not lead:
        return m, k
    for (_, s_outer), (n_inner, s_inner) in zip(lead, lead[1:]):  # must collapse to one index
        if s_outer != s_inner * n_inner:
            raise InputError(f"{what}'s leading dimensions cannot be flattened into rows (strides {tuple(strides)})")
    lda = lead[-1][1]
    if lda < k or lda % 8:
        raise InputError(f"{what}'s row stride must be >= K and a multiple of 8 elements (16 bytes), got {lda}")
    return m, lda


def linear(x, qw: QuantizedWeight, bias=None, out=None, *, enable_pdl: bool | None = None):
    """out = x @ W.T (+ bias), with W the quantized weight `qw` of shape (N, K).

    x: (..., K) float16 or bfloat16 on a GPU, as a CuPy array, a torch tensor or any __dlpack__
    object (returned as CuPy). bias: optional (N,) of x's dtype on the same GPU. out: optional
    preallocated contiguous (..., N) array of x's type and dtype. Runs on x's GPU, whichever is
    current (the weight is copied to each GPU it meets once), on that GPU's current stream (torch's
    for tensors, CuPy's otherwise), and leaves the current device as it was. Returns an array of
    x's kind, shape (..., N).

    enable_pdl: launch with programmatic dependent launch (sm_90+; default: JITMARLIN_PDL, off):
    the kernel may start while the kernel before it on the stream is still finishing, and the
    decode kernel fetches its first weights before it waits for that kernel. x, out, bias and the
    workspace are touched only after the wait, so any kernel ahead is safe. On an H100 it saves
    0.5-1.6 us a decode GEMM behind another jitmarlin GEMM, nothing behind a short elementwise
    kernel (up to 0.75 us more; tools/PERF.md entry 46). Ignored on older GPUs and on the large-M
    dequant + cuBLAS route.
    """
    if not isinstance(qw, QuantizedWeight):
        raise InputError(f"qw must be a jitmarlin.QuantizedWeight, got {type(qw).__name__}")
    pdl = _pdl(enable_pdl)
    if is_torch(x):
        return _linear_torch(x, qw, bias, out, pdl)
    if is_cupy(x):
        return _linear_cupy(x, qw, bias, out, pdl)
    if hasattr(x, "__array_interface__") or type(x).__module__ == "numpy":
        raise InputError("x is a host (NumPy) array: move it to the GPU (CuPy or torch) first")
    if hasattr(x, "__dlpack__"):
        import cupy

        return _linear_cupy(cupy.from_dlpack(x), qw, bias, out, pdl)
    raise InputError(f"x must be a CuPy array, a torch tensor or a DLPack producer, got {type(x).__name__}")


def _check_out_bias(kind, x, out, bias, out_shape, n, device, dtype, contiguous, ptr):
    """Validate `out` and `bias` (same kind, device, dtype; contiguous; 4-byte aligned)."""
    if out is not None:
        if tuple(out.shape) != out_shape:
            raise InputError(f"out has shape {tuple(out.shape)}, expected {out_shape}")
        if out.dtype != dtype:
            raise InputError(f"out has dtype {out.dtype}, expected {dtype}")
        if not contiguous(out):
            raise InputError("out must be contiguous")
        if ptr(out) % 4:
            raise InputError("out must be 4-byte aligned")
    if bias is not None:
        if tuple(bias.shape) != (n,):
            raise InputError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
        if bias.dtype != dtype:
            raise InputError(f"bias has dtype {bias.dtype}, expected x's dtype {dtype}")
        if not contiguous(bias) or ptr(bias) % 4:
            raise InputError("bias must be contiguous and 4-byte aligned")


def _linear_torch(x, qw, bias, out, pdl=False):
    torch = sys.modules["torch"]
    if not x.is_cuda:
        raise InputError("x is a CPU tensor: move it to a CUDA device first")
    act = _torch_act(x.dtype)
    if act is None:
        raise InputError(f"x must be float16 or bfloat16, got {x.dtype}")
    dev = x.device.index
    shape = tuple(x.shape)
    m, lda = _rows(shape, x.stride(), qw.in_features)
    out_shape = shape[:-1] + (qw.out_features,)
    if out is not None or bias is not None:  # checks cost nothing on the common path
        for name, t in (("out", out), ("bias", bias)):
            if t is not None and (not is_torch(t) or t.device != x.device):
                raise InputError(f"{name} must be a torch tensor on {x.device}")
        _check_out_bias(
            "torch",
            x,
            out,
            bias,
            out_shape,
            qw.out_features,
            dev,
            x.dtype,
            lambda t: t.is_contiguous(),
            lambda t: t.data_ptr(),
        )
    if out is None:
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    ptr = x.data_ptr()
    if ptr % 16:
        raise InputError("x's data must be 16-byte aligned")
    stream = _torch_stream(torch, dev)
    lz = _launcher(qw, dev, act, m, stream, pdl)
    if qw.perm is not None:  # act-order: the kernel reads x's columns in the weight's order
        buf, perm = _gather_buffer(
            qw,
            dev,
            stream,
            m,
            x.dtype,
            "torch",
            lambda rows: torch.empty((rows, qw.in_features), dtype=x.dtype, device=x.device),
            lambda: torch.from_dlpack(qw.to_device(dev, act)[3]),
        )
        torch.index_select(x.reshape(m, qw.in_features), 1, perm, out=buf)
        ptr, lda = buf.data_ptr(), qw.in_features
    lz(ptr, lda, out.data_ptr(), 0 if bias is None else bias.data_ptr())
    return out


def _gather_buffer(qw, dev, stream, m, dtype, kind, alloc, index):
    """(buffer view of m rows, column index) for act-order weights: one buffer per (weight,
    device, stream, dtype), grown by doubling to the largest M seen, so varying batch sizes cost
    at most twice the largest one. Outgrown buffers are kept alive: CUDA graphs captured earlier
    still point into them."""
    st = qw._gather.get((dev, stream, str(dtype), kind))
    if st is None or st[0].shape[0] < m:
        if launch.is_capturing(stream):
            raise CaptureError(
                "act-order needs a larger gather buffer, which cannot be allocated "
                "during CUDA-graph capture: warm up with the largest batch first"
            )
        rows = max(m, 2 * st[0].shape[0]) if st is not None else m
        st = (alloc(rows), st[1] if st is not None else index(), (st[0],) + st[2] if st else ())
        qw._gather[(dev, stream, str(dtype), kind)] = st
    return st[0][:m], st[1]


def _torch_stream(torch, dev: int) -> int:
    try:
        return torch._C._cuda_getCurrentRawStream(dev)
    except AttributeError:  # pragma: no cover - older torch
        return torch.cuda.current_stream(dev).cuda_stream


_CUPY_ACT: dict = {}


def _cupy_act(dtype) -> str:
    a = _CUPY_ACT.get(dtype)
    if a is None:
        try:
            a = normalize_act(dtype)
        except InputError:
            raise InputError(f"x must be float16 or bfloat16, got {dtype}") from None
        _CUPY_ACT[dtype] = a
    return a


def _linear_cupy(x, qw, bias, out, pdl=False):
    import cupy

    act = _cupy_act(x.dtype)
    dev = x.data.device_id
    item = x.itemsize
    shape = x.shape
    m, lda = _rows(shape, [s // item for s in x.strides], qw.in_features)
    out_shape = shape[:-1] + (qw.out_features,)
    if out is not None or bias is not None:
        for name, a in (("out", out), ("bias", bias)):
            if a is not None and (not is_cupy(a) or a.data.device_id != dev):
                raise InputError(f"{name} must be a CuPy array on device {dev}")
        _check_out_bias(
            "cupy",
            x,
            out,
            bias,
            out_shape,
            qw.out_features,
            dev,
            x.dtype,
            lambda a: a.flags.c_contiguous,
            lambda a: a.data.ptr,
        )
    if launch.current_device() != dev:  # a device context only when x lives on another GPU
        with cupy.cuda.Device(dev):
            return _linear_cupy(x, qw, bias, out, pdl)
    if out is None:
        out = cupy.empty(out_shape, dtype=x.dtype)
    if m == 0:
        return out
    ptr = x.data.ptr
    if ptr % 16:
        raise InputError("x's data must be 16-byte aligned")
    stream = cupy.cuda.get_current_stream().ptr
    lz = _launcher(qw, dev, act, m, stream, pdl)
    if qw.perm is not None:  # act-order: the kernel reads x's columns in the weight's order
        buf, perm = _gather_buffer(
            qw,
            dev,
            stream,
            m,
            x.dtype,
            "cupy",
            lambda rows: cupy.empty((rows, qw.in_features), dtype=x.dtype),
            lambda: qw.to_device(dev, act)[3],
        )
        cupy.take(x.reshape(m, qw.in_features), perm, axis=1, out=buf)
        ptr, lda = buf.data.ptr, qw.in_features
    lz(ptr, lda, out.data.ptr, 0 if bias is None else bias.data.ptr)
    return out


# ---- prewarm -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrewarmResult:
    profile: str
    arch: str
    kernel: str
    status: str  # 'compiled', 'cached', 'failed'
    seconds: float
    detail: str = ""


def plan_for(
    profile: DeviceProfile, m: int, n: int, k: int, act: str = "float16", qtype: str = "uint4b8", group_size: int = 128
) -> planner.Plan:
    """The plan linear() would use for a weight of (n, k) = (out_features, in_features) on
    `profile` (no GPU needed): n and k must pass the shape rule (qtypes.shape_problem) and are
    padded as the weight is (qtypes.kernel_dims), so the plan is the padded weight's."""
    check_shape(n, k)
    n, k = kernel_dims(n, k, group_size if isinstance(group_size, int) else -1)
    return planner.plan(profile, Problem(m, n, k, act, qtype, group_size))
