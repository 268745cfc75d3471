"""cuBLAS through ctypes: a handle with a workspace of its own, bound to one stream at a time, and
row-major half-precision GEMMs with fp32 accumulation (the large-M route's GEMM).

Why not CuPy's cuBLAS wrappers: they set the handle's stream to CuPy's current stream before
every call, and cublasSetStream() puts the handle back on cuBLAS's own workspace pool, which
allocates on demand: not allowed during CUDA-graph capture. Here the order is always set stream,
then set workspace, then GEMM, so a GEMM never allocates and can be captured.
"""

from __future__ import annotations

import ctypes
import os

from jitmarlin.errors import JitMarlinError, UnsupportedError

# Enum values from cublas_api.h and library_types.h
OP_N, OP_T = 0, 1
R_32F, R_16F, R_16BF = 0, 2, 14
COMPUTE_32F = 68
GEMM_DEFAULT = -1
DTYPES = {"float16": R_16F, "bfloat16": R_16BF}

STATUS = {
    1: "NOT_INITIALIZED",
    3: "ALLOC_FAILED",
    7: "INVALID_VALUE",
    8: "ARCH_MISMATCH",
    11: "MAPPING_ERROR",
    13: "EXECUTION_FAILED",
    14: "INTERNAL_ERROR",
    15: "NOT_SUPPORTED",
    16: "LICENSE_ERROR",
}
SONAMES = ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so")


class CublasError(JitMarlinError, RuntimeError):
    """A cuBLAS call returned an error status."""


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasError(f"{what} failed: CUBLAS_STATUS_{STATUS.get(status, status)}")


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give the five functions used here their C signatures (all return cublasStatus_t)."""
    vp, i = ctypes.c_void_p, ctypes.c_int
    sigs = {
        "cublasCreate_v2": [ctypes.POINTER(vp)],
        "cublasDestroy_v2": [vp],
        "cublasSetStream_v2": [vp, vp],
        "cublasSetWorkspace_v2": [vp, vp, ctypes.c_size_t],
        # handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
        # ldc, computeType, algo
        "cublasGemmEx": [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i],
    }
    for name, args in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_int
    return lib


_lib: ctypes.CDLL | None = None


def _pathfinder_path() -> str | None:
    """Where CUDA's pathfinder (the loader CuPy uses) finds libcublas."""
    from cuda import pathfinder

    return pathfinder.load_nvidia_dynamic_lib("cublas").abs_path


def _load() -> ctypes.CDLL:
    """The libcublas already in the process (CuPy's), else the one CUDA's pathfinder finds (the
    one CuPy would load), else the first the dynamic loader knows."""
    for name in SONAMES:
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        except OSError:
            pass
    tried = []
    try:
        path = _pathfinder_path()
        if path:
            return ctypes.CDLL(path)
    except Exception as e:  # not installed, or an older cuda-python without pathfinder
        tried.append(f"pathfinder: {e}")
    for name in SONAMES:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(str(e))
    raise UnsupportedError(
        "cuBLAS not found: the large-M route (dequantise + cuBLAS GEMM) needs libcublas "
        "(pip install nvidia-cublas-cu12, or a CUDA toolkit on the loader path). Tried: " + "; ".join(tried)
    )


def library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = declare(_load())
    return _lib


class Blas:
    """One cuBLAS handle using `workspace_bytes` of device memory at `workspace_ptr` (owned and
    kept alive by the caller) as its workspace. Create it with the right device current."""

    def __init__(self, workspace_ptr: int, workspace_bytes: int, lib: ctypes.CDLL | None = None):
        self.lib = lib if lib is not None else library()
        h = ctypes.c_void_p()
        _check(self.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        self.handle = h
        self.workspace_ptr = workspace_ptr
        self.workspace_bytes = workspace_bytes
        self.stream: int | None = None

    def bind(self, stream_ptr: int) -> None:
        """Run subsequent GEMMs on `stream_ptr`, with this handle's own workspace."""
        if stream_ptr == self.stream:
            return
        _check(self.lib.cublasSetStream_v2(self.handle, stream_ptr or None), "cublasSetStream")
        # cublasSetStream has just put the handle back on cuBLAS's own pool: set ours again.
        _check(
            self.lib.cublasSetWorkspace_v2(self.handle, self.workspace_ptr, self.workspace_bytes), "cublasSetWorkspace"
        )
        self.stream = stream_ptr

    def linear(
        self,
        stream_ptr: int,
        act: str,
        m: int,
        n: int,
        k: int,
        x_ptr: int,
        ldx: int,
        w_ptr: int,
        ldw: int,
        out_ptr: int,
        ldo: int,
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> None:
        """out = alpha * x @ w.T + beta * out on `stream_ptr`, fp32 accumulation: x (m, k),
        w (n, k), out (m, n), all row-major in `act` with row strides ldx, ldw, ldo (elements).

        cuBLAS is column-major: a row-major (r, c) matrix with row stride ld is its (c, r)
        transpose with leading dimension ld. So out^T (n x m, ld ldo) = op_T(w^T: k x n, ld ldw)
        @ (x^T: k x m, ld ldx), i.e. transa = T, transb = N, GEMM sizes (n, m, k).
        """
        self.bind(stream_ptr)
        dt = DTYPES[act]
        a, b = ctypes.c_float(alpha), ctypes.c_float(beta)
        _check(
            self.lib.cublasGemmEx(
                self.handle,
                OP_T,
                OP_N,
                n,
                m,
                k,
                ctypes.byref(a),
                w_ptr,
                dt,
                ldw,
                x_ptr,
                dt,
                ldx,
                ctypes.byref(b),
                out_ptr,
                dt,
                ldo,
                COMPUTE_32F,
                GEMM_DEFAULT,
            ),
            "cublasGemmEx",
        )

    def close(self) -> None:
        if self.handle:
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = ctypes.c_void_p()
