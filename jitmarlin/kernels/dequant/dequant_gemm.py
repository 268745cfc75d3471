"""Launch stage of the large-M route: dequantise the weight into a dense workspace, then one
cuBLAS GEMM, on the caller's stream.

Per (device, stream) a DenseWorkspace holds the dense weight buffer (act dtype, grown to the
largest N*K seen on that stream) and a cuBLAS handle with a cuBLAS workspace of its own. As in
launch.workspace, calls captured into CUDA graphs (whose capture streams are new) share one
per-device graph workspace, made and grown at warm-up: nothing is allocated during capture, and
graphs of one device must be replayed one at a time. A buffer that is outgrown is kept (graphs
captured earlier still point into it), so the memory held is at most the sum of the sizes seen
in increasing order, per stream and once more for graphs.
"""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import CaptureError
from jitmarlin.jit.launch import current_device, get_function, is_capturing, private_stream, stream_object
from jitmarlin.jit.nvrtc import Artifact
from jitmarlin.kernels.dequant import cublas
from jitmarlin.kernels.plan_base import Plan

MB = 1 << 20
BIAS_MAX_BLOCKS = 4096  # the bias kernel strides over the rows with at most this many


def cublas_workspace_bytes(cc: tuple[int, int]) -> int:
    """cuBLAS's recommended workspace: 32 MiB from Hopper on, 4 MiB before."""
    return 32 * MB if cc >= (9, 0) else 4 * MB


def _cp():
    import cupy

    return cupy


class DenseWorkspace:
    """A dense weight buffer and a cuBLAS handle (with its cuBLAS workspace) for one (device,
    stream), or for the device's CUDA-graph captures."""

    def __init__(self, device: int, cc: tuple[int, int]):
        cp = _cp()
        self.device = device
        self.weights = None  # CuPy uint16 array of `elems` act-dtype values, or None
        self.elems = 0
        self.retired: list = []  # outgrown weight buffers: captured graphs may point into them
        nbytes = cublas_workspace_bytes(cc)
        s = private_stream(device)
        with cp.cuda.Device(device), s:
            self.blas_memory = cp.empty(nbytes, dtype=cp.uint8)
            self.blas = cublas.Blas(self.blas_memory.data.ptr, nbytes)
            # One small GEMM now, outside any capture: whatever the handle sets up on first use
            # happens here, not inside a graph.
            scratch = cp.zeros((3, 16, 16), dtype=cp.float16)
            p = scratch.data.ptr
            self.blas.linear(s.ptr, "float16", 16, 16, 16, p, 16, p + 512, 16, p + 1024, 16)
        s.synchronize()

    def grow(self, elems: int) -> None:
        """Make the weight buffer hold at least `elems` values (never during capture)."""
        if elems <= self.elems:
            return
        cp = _cp()
        s = private_stream(self.device)
        with cp.cuda.Device(self.device), s:
            buf = cp.empty(elems, dtype=cp.uint16)
        # An allocator may write new memory on the stream current at allocation (CuPy allows
        # custom ones; the test suite's fills it with NaN): that write must land before the
        # caller's stream writes the weight here.
        s.synchronize()
        if self.weights is not None:
            self.retired.append(self.weights)
        self.weights, self.elems = buf, elems


_dense: dict[tuple[int, int], DenseWorkspace] = {}


def workspace(device: int, stream_ptr: int, elems: int, cc: tuple[int, int]) -> DenseWorkspace:
    """The dense workspace for calls on `stream_ptr` with a weight of `elems` values: one per
    (device, stream), grown as needed; during capture the per-device graph workspace (key -1),
    which eager calls grow alongside."""
    ws = _dense.get((device, stream_ptr))
    if ws is not None and ws.elems >= elems:
        return ws
    if is_capturing(stream_ptr):
        ws = _dense.get((device, -1))
        if ws is None or ws.elems < elems:
            raise CaptureError(
                "the large-M route needs a dense weight workspace that is not allocated yet, and "
                "allocating is not allowed during CUDA-graph capture: call linear() once with this "
                "weight and a batch of this size on this GPU before capturing (warm-up)"
            )
        return ws
    if ws is None:
        ws = _dense[(device, stream_ptr)] = DenseWorkspace(device, cc)
    ws.grow(elems)
    graph_ws = _dense.get((device, -1))
    if graph_ws is None:
        graph_ws = _dense[(device, -1)] = DenseWorkspace(device, cc)
    graph_ws.grow(elems)
    return ws


class DequantLauncher:
    """Everything fixed for one (weight, device, activation dtype, M, stream) on the large-M
    route; the call only adds the pointers of x, out and bias (the same call as
    kernels.launch.Launcher's). A call: expand the weight into the workspace (dequant kernel), fill out
    with the bias rows when there is a bias, then out = gscale * x @ W.T (+ out) by cuBLAS."""

    __slots__ = (
        "plan",
        "device",
        "stream",
        "stream_ptr",
        "keep",
        "dequant",
        "bias",
        "grid",
        "block",
        "bias_grid",
        "dq_args",
        "blas",
        "act",
        "m",
        "n_out",
        "k_in",
        "w_ptr",
        "ldw",
        "gscale",
        "m32",
        "n_out32",
    )

    def __init__(
        self,
        plan: Plan,
        artifact: Artifact,
        key: str,
        device: int,
        stream_ptr: int,
        ptrs: dict,
        ws: DenseWorkspace,
        n_out: int,
        k_in: int,
        gscale: float,
    ):
        spec, p = plan.spec, plan.problem
        self.plan = plan
        self.device = device
        self.stream_ptr = stream_ptr
        self.stream = stream_object(stream_ptr)
        self.keep = (ws, ws.weights)  # the buffer this launcher writes must outlive it
        self.dequant = get_function(artifact, key, device)
        self.bias = get_function(artifact, key, device, artifact.name + "_bias")
        self.grid = (plan.grid, 1, 1)
        self.block = (spec.threads, 1, 1)
        words = p.m * n_out // 2
        self.bias_grid = (max(1, min(BIAS_MAX_BLOCKS, -(-words // spec.threads))), 1, 1)
        self.w_ptr = ws.weights.data.ptr
        self.dq_args = (
            np.uint64(ptrs["B"]),
            np.uint64(ptrs["S"]),
            np.uint64(ptrs["Z"]),
            np.uint64(self.w_ptr),
            np.int32(p.n),
            np.int32(p.k),
        )
        self.blas = ws.blas
        self.act = spec.act
        self.m, self.n_out, self.k_in = p.m, n_out, k_in
        self.m32, self.n_out32 = np.int32(p.m), np.int32(n_out)
        self.ldw = p.k
        self.gscale = float(gscale)

    def __call__(self, x_ptr: int, lda: int, out_ptr: int, bias_ptr: int) -> None:
        if current_device() != self.device:  # its kernels and cuBLAS handle belong to this device
            with _cp().cuda.Device(self.device):
                self._run(x_ptr, lda, out_ptr, bias_ptr)
        else:
            self._run(x_ptr, lda, out_ptr, bias_ptr)

    def _run(self, x_ptr: int, lda: int, out_ptr: int, bias_ptr: int) -> None:
        self.dequant(self.grid, self.block, self.dq_args, stream=self.stream)
        if bias_ptr:
            self.bias(
                self.bias_grid,
                self.block,
                (np.uint64(bias_ptr), np.uint64(out_ptr), self.m32, self.n_out32),
                stream=self.stream,
            )
        # Only the caller's k_in columns and n_out rows of the padded weight take part.
        self.blas.linear(
            self.stream_ptr,
            self.act,
            self.m,
            self.n_out,
            self.k_in,
            x_ptr,
            lda,
            self.w_ptr,
            self.ldw,
            out_ptr,
            self.n_out,
            alpha=self.gscale,
            beta=1.0 if bias_ptr else 0.0,
        )
