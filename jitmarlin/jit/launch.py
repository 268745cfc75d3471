"""Launch stage, the generic part: load cubins into CuPy modules (per device), the current
device and stream, CUDA-graph capture, private streams, TMA tensor maps and programmatic
dependent launch.

Nothing here compiles or plans or knows a kernel family: the families' launch glue (the
Stream-K workspace, the Launcher that turns a Plan into a grid and arguments) is
jitmarlin.kernels.launch.
"""

from __future__ import annotations

import numpy as np

from jitmarlin.jit.nvrtc import Artifact

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_modules: dict[tuple[int, str], object] = {}
_functions: dict[tuple[int, str, str], object] = {}
_streams: dict[int, object] = {}


def _cp():
    import cupy

    return cupy


_get_device = None


def current_device() -> int:
    """The calling thread's current CUDA device (the runtime's, which CuPy and torch share). A
    module's functions launch only in their own device's context (CUDA_ERROR_INVALID_HANDLE
    otherwise), so the launchers make their device current where it is not. (Every launch asks:
    the function is looked up once, not imported each time.)"""
    global _get_device
    if _get_device is None:
        from cupy.cuda import runtime

        _get_device = runtime.getDevice
    return _get_device()


def is_capturing(stream_ptr: int) -> bool:
    from cupy.cuda import runtime

    try:
        return runtime.streamIsCapturing(stream_ptr) != 0
    except Exception:
        return False


def get_function(artifact: Artifact, key: str, device: int, name: str | None = None):
    """Kernel `name` (default: the artifact's main kernel) of the artifact's module as a CuPy
    Function on `device` (the module is loaded once per device)."""
    name = name or artifact.name
    f = _functions.get((device, key, name))
    if f is None:
        mod = _modules.get((device, key))
        if mod is None:
            cp = _cp()
            from cupy.cuda import function

            with cp.cuda.Device(device):
                mod = function.Module()
                mod.load(artifact.cubin)
            _modules[(device, key)] = mod
        f = _functions[(device, key, name)] = mod.get_function(name)
    return f


_private: dict[int, object] = {}


def private_stream(device: int):
    """A non-blocking stream of jitmarlin's own per device, for one-time set-up work (uploads,
    zeroing) that must finish before first use but must not wait on the caller's streams."""
    s = _private.get(device)
    if s is None:
        cp = _cp()
        with cp.cuda.Device(device):
            s = cp.cuda.Stream(non_blocking=True)
        _private[device] = s
    return s


def stream_object(stream_ptr: int):
    """A CuPy stream object for a raw stream handle (cached)."""
    s = _streams.get(stream_ptr)
    if s is None:
        cp = _cp()
        if stream_ptr == 0:
            s = cp.cuda.Stream.null
        else:
            import warnings

            with warnings.catch_warnings():  # CuPy 14 prefers Stream.from_external(obj), which
                warnings.simplefilter("ignore", DeprecationWarning)  # needs an object, not a handle
                s = cp.cuda.ExternalStream(stream_ptr)
        _streams[stream_ptr] = s
    return s


# A CUtensorMap: 128 opaque bytes, passed by value (a __grid_constant__ parameter, 64-byte aligned).
TENSOR_MAP = np.dtype([("opaque", "<u8", (16,))], align=True)


def tensor_map_2d(
    ptr: int, elem_bytes: int, dims: tuple[int, int], row_bytes: int, box: tuple[int, int], swizzle_128b: bool = False
):
    """A 2-D tensor map for the wgmma kernel's TMA loads: dims = (elements along the contiguous
    dimension, rows) of `elem_bytes` (2 or 8) each at `ptr` (16-byte aligned), rows `row_bytes`
    apart (a multiple of 16); boxes of box[0] x box[1] elements; reads outside the array give
    zeros. Host-only (the driver encodes it; no GPU work, so allowed during CUDA-graph capture)."""
    from cuda.bindings import driver as cu  # cuda-python >= 12.6 (both extras pin it)

    dtype = {
        2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16,
        8: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT64,
    }[elem_bytes]
    swizzle = (
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
        if swizzle_128b
        else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE
    )
    err, tmap = cu.cuTensorMapEncodeTiled(
        dtype,
        2,
        ptr,
        [cu.cuuint64_t(dims[0]), cu.cuuint64_t(dims[1])],
        [cu.cuuint64_t(row_bytes)],
        [cu.cuuint32_t(box[0]), cu.cuuint32_t(box[1])],
        [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(
            f"cuTensorMapEncodeTiled failed ({err}): {dims[1]} rows of {dims[0]} "
            f"{elem_bytes}-byte elements, {row_bytes} bytes apart, at 0x{ptr:x}, box {box}"
        )
    import ctypes

    return np.frombuffer(ctypes.string_at(tmap.getPtr(), TENSOR_MAP.itemsize), dtype=TENSOR_MAP)[0]


PDL_MIN_CC = (9, 0)  # griddepcontrol and the launch attribute: Hopper and newer


def _ctype_of(value):
    """A ctypes copy of one kernel argument as the Launcher holds it for CuPy's launch (a NumPy
    scalar; a tensor map is a 128-byte NumPy void)."""
    import ctypes

    if isinstance(value, np.void):
        return (ctypes.c_ubyte * value.dtype.itemsize).from_buffer_copy(value.tobytes())
    kind = {
        np.dtype(np.uint64): ctypes.c_uint64,
        np.dtype(np.int32): ctypes.c_int32,
        np.dtype(np.float32): ctypes.c_float,
    }[np.asarray(value).dtype]
    return kind(value.item())


class PdlLaunch:
    """One kernel launched with programmatic dependent launch (cuLaunchKernelEx, programmatic
    stream serialization): the grid may start while the grid before it on the stream is still
    finishing, and the kernel waits (griddepcontrol.wait) before it touches anything that grid may
    write or read: x, the output, bias, the workspace. On sm_90+ only (PDL_MIN_CC)."""

    __slots__ = ("cfg", "f", "cu", "seen", "vals", "ptrs")

    def __init__(self, func_ptr: int, grid: tuple, block: tuple, smem: int, stream_ptr: int):
        from cuda.bindings import driver as cu

        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = smem
        cfg.hStream = cu.CUstream(stream_ptr)
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        self.cfg, self.f, self.cu = cfg, cu.CUfunction(func_ptr), cu
        self.seen: list = []  # the argument objects of the last call, and their ctypes copies
        self.vals: list = []
        self.ptrs = None

    def __call__(self, args: tuple) -> None:
        import ctypes

        if len(args) != len(self.seen):
            self.seen, self.vals = [None] * len(args), [None] * len(args)
            self.ptrs = (ctypes.c_void_p * len(args))()
        for i, a in enumerate(args):  # the launcher's fixed arguments are the same objects
            if a is not self.seen[i]:
                self.seen[i], self.vals[i] = a, _ctype_of(a)
                self.ptrs[i] = ctypes.addressof(self.vals[i])
        (err,) = self.cu.cuLaunchKernelEx(self.cfg, self.f, ctypes.addressof(self.ptrs), 0)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent launch) failed: {err}")
