"""Launch stage: load cubins into CuPy modules (per device), own the Stream-K workspace, launch.

Nothing here compiles or plans; it receives an Artifact and a Plan.
"""
from __future__ import annotations

import numpy as np

from jitmarlin.errors import CaptureError
from jitmarlin.jit.nvrtc import Artifact
from jitmarlin.kernels.planner import Plan
from jitmarlin.kernels.spec import HYBRID_SLOT_WORDS, GemvSpec

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
MAX_SLOT_FLOATS = 128 * 256         # largest output tile (wgmma 256x128 or 128x256): floats per partial slot
# A block leaves partial sums for at most one split tile (its first): one slot a block, the size
# of its tile. A finisher counts its contributors in on the counter of its own block index.
MAX_BLOCKS_PER_SM = 2               # the most blocks of one kernel an SM holds (occupancy 1 or 2)
# A pair gemv plan's block (one an SM) uses half its column blocks' slots: at most 4 column
# blocks of 16 rows x 16 pieces, two words a piece, over 2.
PAIR_SLOT_WORDS = 4 * 16 * 16 * 2 // 2

_modules: dict[tuple[int, str], object] = {}
_functions: dict[tuple[int, str, str], object] = {}
_workspaces: dict[tuple[int, int], "Workspace"] = {}
_retired: list = []   # outgrown workspaces: launchers and captured graphs may still point into them
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


def workspace_needs(plan: Plan) -> tuple[int, int, int]:
    """(counters, partial-sum floats, tagged 64-bit words) a launch of `plan` uses: Stream-K
    kernels a counter and a tile-sized partial slot a block, hybrid and pair gemv plans tagged
    slots (GemvSpec.tagged_words), other gemv plans nothing."""
    spec = plan.spec
    if plan.route != "fused":
        return 0, 0, 0
    if isinstance(spec, GemvSpec):
        return 0, 0, spec.tagged_words(plan.grid)
    return plan.grid, plan.grid * spec.tile_m * spec.tile_n, 0


def workspace_capacity(sms: int) -> tuple[int, int, int]:
    """(counters, partial-sum floats, tagged words) of the workspace made for a GPU of `sms` SMs:
    a counter for every block of the largest grid (MAX_BLOCKS_PER_SM a SM), a largest tile's
    partial slot an SM (blocks two an SM have tiles of at most half that), the tagged slots of
    one hybrid or pair gemv block an SM (both are one block an SM)."""
    return MAX_BLOCKS_PER_SM * sms, sms * MAX_SLOT_FLOATS, sms * max(HYBRID_SLOT_WORDS, PAIR_SLOT_WORDS)


def workspace_misfit(plan: Plan, capacity: tuple[int, int, int]) -> str | None:
    """Why `plan` would overrun a workspace of `capacity` (None where it fits)."""
    what = ("counters", "partial-sum floats", "tagged slot words")
    for name, need, have in zip(what, workspace_needs(plan), capacity):
        if need > have:
            return (f"{plan.spec.name} with {plan.grid} blocks needs {need} workspace {name}, the "
                    f"workspace has {have}")
    return None


class Workspace:
    """Per (device, stream) scratch for cross-block reduction, sized for a GPU of `sms` SMs
    (workspace_capacity): int32 counters, fp32 partial tiles, and the hybrid and pair gemv plans'
    tagged 64-bit slots. Counters are zero and the tagged slots empty between
    launches (the kernels reset them), so one allocation serves every call on that stream,
    CUDA-graph replays included. Zeroed on a private stream that is synchronised alone (never on
    the caller's stream, which may be busy)."""

    def __init__(self, device: int, sms: int):
        cp = _cp()
        s = private_stream(device)
        self.capacity = workspace_capacity(sms)
        counters, floats, words = self.capacity
        with cp.cuda.Device(device), s:
            self.locks = cp.zeros(counters, dtype=cp.int32)
            self.partials = cp.empty(floats, dtype=cp.float32)
            self.tagged = cp.zeros(words, dtype=cp.uint64)
        s.synchronize()
        self.sms = sms
        self.locks_ptr = self.locks.data.ptr
        self.partials_ptr = self.partials.data.ptr
        self.tagged_ptr = self.tagged.data.ptr


def workspace(device: int, stream_ptr: int, sms: int) -> Workspace:
    """The workspace for calls on `stream_ptr` on a GPU of `sms` SMs: one per (device, stream), so
    kernels running concurrently on different streams never share counters. Calls captured into
    CUDA graphs (whose capture streams are new) share one per-device graph workspace made at
    warm-up, as allocating during capture is not allowed: replay graphs of one device one at a
    time. A workspace is never freed once made (graphs and queued launches may point into it)."""
    ws = _workspaces.get((device, stream_ptr))
    if ws is not None and ws.sms >= sms:
        return ws
    if is_capturing(stream_ptr):
        ws = _workspaces.get((device, -1))
        if ws is None or ws.sms < sms:
            raise CaptureError(
                "jitmarlin needs to allocate its workspace, which cannot happen during CUDA-graph "
                "capture: call linear() once on this GPU before capturing (warm-up)"
            )
        return ws
    for key in ((device, stream_ptr), (device, -1)):
        old = _workspaces.get(key)
        if old is None or old.sms < sms:
            if old is not None:
                _retired.append(old)
            _workspaces[key] = Workspace(device, max(sms, 1))
    return _workspaces[(device, stream_ptr)]


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
X_BOX_K = 64          # halves of x along K per TMA box: one 128-byte swizzle row
MAX_X_MAPS = 64       # tensor maps kept per launcher (x buffers seen), oldest dropped first


def tensor_map_2d(ptr: int, elem_bytes: int, dims: tuple[int, int], row_bytes: int,
                  box: tuple[int, int], swizzle_128b: bool = False):
    """A 2-D tensor map for the wgmma kernel's TMA loads: dims = (elements along the contiguous
    dimension, rows) of `elem_bytes` (2 or 8) each at `ptr` (16-byte aligned), rows `row_bytes`
    apart (a multiple of 16); boxes of box[0] x box[1] elements; reads outside the array give
    zeros. Host-only (the driver encodes it; no GPU work, so allowed during CUDA-graph capture)."""
    from cuda.bindings import driver as cu   # cuda-python >= 12.6 (both extras pin it)

    dtype = {2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16,
             8: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT64}[elem_bytes]
    swizzle = (cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle_128b
               else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE)
    err, tmap = cu.cuTensorMapEncodeTiled(
        dtype, 2, ptr, [cu.cuuint64_t(dims[0]), cu.cuuint64_t(dims[1])], [cu.cuuint64_t(row_bytes)],
        [cu.cuuint32_t(box[0]), cu.cuuint32_t(box[1])], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({err}): {dims[1]} rows of {dims[0]} "
                           f"{elem_bytes}-byte elements, {row_bytes} bytes apart, at 0x{ptr:x}, box {box}")
    import ctypes

    return np.frombuffer(ctypes.string_at(tmap.getPtr(), TENSOR_MAP.itemsize), dtype=TENSOR_MAP)[0]


def x_tensor_map(ptr: int, rows: int, cols: int, lda: int, box_rows: int):
    """x's map: `rows` x `cols` halves, rows `lda` elements apart, boxes of 64 columns x
    `box_rows` rows with the 128-byte swizzle (the wgmma operand layout)."""
    return tensor_map_2d(ptr, 2, (cols, rows), lda * 2, (X_BOX_K, box_rows), swizzle_128b=True)


def weight_tensor_maps(spec, ptrs: dict, n: int, k: int) -> tuple:
    """(B, S, Z) maps of an uploaded weight for the wgmma kernel (N x K padded; see wgmma.cu.j2):
    B as K/16 rows of N * bits/4 8-byte words, boxes of one tile's words x 4 rows; S and Z as
    rows of N halves (one per group, or one), boxes of one tile's features x the rows of a
    64-deep K step. A pointer that is 0 (no offsets), or a box the kernel does not load by TMA,
    gets an empty map."""
    empty = np.zeros((), dtype=TENSOR_MAP)[()]
    words = n * spec.bits // 4
    box_words = spec.tile_n * spec.bits // 4
    bmap = (tensor_map_2d(ptrs["B"], 8, (words, k // 16), words * 8, (box_words, spec.tk))
            if box_words <= 256 else empty)
    if spec.group_blocks < 0:      # per-channel scales, read in the epilogue
        return bmap, empty, empty
    rows = 1 if spec.group_blocks == 0 else k // (16 * spec.group_blocks)
    box_rows = spec.scale_rows // (2 if spec.affine else 1)   # scale rows of one K tile
    maps = [tensor_map_2d(ptrs[key], 2, (n, rows), n * 2, (spec.tile_n, box_rows)) if ptrs[key] else empty
            for key in ("S", "Z")]
    return (bmap, *maps)


PDL_MIN_CC = (9, 0)   # griddepcontrol and the launch attribute: Hopper and newer


def _ctype_of(value):
    """A ctypes copy of one kernel argument as the Launcher holds it for CuPy's launch (a NumPy
    scalar; a tensor map is a 128-byte NumPy void)."""
    import ctypes

    if isinstance(value, np.void):
        return (ctypes.c_ubyte * value.dtype.itemsize).from_buffer_copy(value.tobytes())
    kind = {np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.int32): ctypes.c_int32,
            np.dtype(np.float32): ctypes.c_float}[np.asarray(value).dtype]
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
        self.seen: list = []     # the argument objects of the last call, and their ctypes copies
        self.vals: list = []
        self.ptrs = None

    def __call__(self, args: tuple) -> None:
        import ctypes

        if len(args) != len(self.seen):
            self.seen, self.vals = [None] * len(args), [None] * len(args)
            self.ptrs = (ctypes.c_void_p * len(args))()
        for i, a in enumerate(args):   # the launcher's fixed arguments are the same objects
            if a is not self.seen[i]:
                self.seen[i], self.vals[i] = a, _ctype_of(a)
                self.ptrs[i] = ctypes.addressof(self.vals[i])
        err, = self.cu.cuLaunchKernelEx(self.cfg, self.f, ctypes.addressof(self.ptrs), 0)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent launch) failed: {err}")


class Launcher:
    """Everything fixed for one (weight, device, activation dtype, M, stream, PDL): the call only
    adds the pointers of x, out and bias (and, for the wgmma kernel, x's tensor map, kept per x
    buffer). pdl: launch with programmatic dependent launch (the caller has checked the GPU)."""

    __slots__ = ("func", "grid", "block", "smem", "stream", "static", "plan", "device", "keep",
                 "iters", "whole", "x_tail", "x_maps", "w_maps", "pdl", "wgmma")

    def __init__(self, plan: Plan, func, device: int, stream_ptr: int, ptrs: dict, ws: Workspace,
                 n_out: int, k_in: int, gscale: float, pdl: bool = False):
        self.plan = plan
        self.func = func
        self.device = device
        self.keep = ws  # the workspace must outlive every launcher that points into it
        self.grid = (plan.grid, 1, 1)
        self.block = (plan.spec.threads, 1, 1)
        self.smem = plan.smem_bytes
        self.stream = stream_object(stream_ptr)
        p = plan.problem
        self.iters = np.int32(plan.iters)
        self.whole = np.int32(plan.whole)
        self.x_maps = {} if plan.spec.wgmma or getattr(plan.spec, "xbox", False) else None
        self.wgmma = bool(plan.spec.wgmma)   # the order of the maps in the arguments, decided once
        self.x_tail = np.int32(p.m % plan.spec.tile_m if plan.spec.wgmma else 0)
        tagged = isinstance(plan.spec, GemvSpec) and plan.spec.tagged_words(plan.grid) > 0
        if pdl and not getattr(plan.spec, "pdl", False):   # it would touch x before the grid ahead is done
            raise ValueError(f"{plan.spec.name} is not built for programmatic dependent launch (spec.pdl)")
        misfit = workspace_misfit(plan, ws.capacity)
        if misfit:   # a kernel past its counters would read another block's (or anything's) memory
            raise ValueError(misfit)
        if plan.spec.wgmma:
            self.w_maps = weight_tensor_maps(plan.spec, ptrs, plan.problem.n, plan.problem.k)
        elif getattr(plan.spec, "bulk", False):   # the weights' map only (KernelSpec.bulk)
            self.w_maps = weight_tensor_maps(plan.spec, ptrs, plan.problem.n, plan.problem.k)[:1]
        else:
            self.w_maps = ()
        self.static = (np.uint64(ptrs["B"]), np.uint64(ptrs["S"]), np.uint64(ptrs["Z"]),
                       np.float32(gscale), np.uint64(ws.tagged_ptr if tagged else ws.partials_ptr),
                       np.uint64(ws.locks_ptr),
                       np.int32(p.m), np.int32(p.n), np.int32(p.k), np.int32(n_out), np.int32(k_in))
        from cupy.cuda import driver

        with _cp().cuda.Device(device):
            driver.funcSetAttribute(func.ptr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem)
        self.pdl = PdlLaunch(func.ptr, self.grid, self.block, self.smem, stream_ptr) if pdl else None

    def __call__(self, x_ptr: int, lda: int, out_ptr: int, bias_ptr: int) -> None:
        b, s, z, gscale, part, locks, m, n, k, n_out, k_in = self.static
        args = (np.uint64(x_ptr), b, s, z, np.uint64(bias_ptr), np.uint64(out_ptr), gscale, part,
                locks, m, n, k, n_out, k_in, np.int32(lda), self.iters)
        if self.x_maps is not None:
            maps = self.x_maps.get((x_ptr, lda))
            if maps is None:
                if len(self.x_maps) >= MAX_X_MAPS:
                    del self.x_maps[next(iter(self.x_maps))]
                full = x_tensor_map(x_ptr, int(m), int(k_in), lda, self.plan.spec.tile_m)
                if not self.plan.spec.tail:   # (KernelSpec.xbox: never tail)
                    maps = (full,)
                else:   # the short last row block's boxes of its own rows (wgmma.cu.j2, x_tail)
                    tail = x_tensor_map(x_ptr, int(m), int(k_in), lda, int(self.x_tail)) if self.x_tail else full
                    maps = (self.x_tail, tail, full)
                self.x_maps[(x_ptr, lda)] = maps
            if self.wgmma:
                args += (self.whole, *maps, *self.w_maps)
            else:   # KernelSpec.xbox: the weights' map, then x's
                args += (*self.w_maps, *maps)
        elif self.w_maps:
            args += self.w_maps
        if current_device() != self.device:   # (x on a GPU that is not the caller's current one)
            with _cp().cuda.Device(self.device):
                self._launch(args)
        else:
            self._launch(args)

    def _launch(self, args) -> None:
        if self.pdl is not None:
            self.pdl(args)
        else:
            self.func(self.grid, self.block, args, shared_mem=self.smem, stream=self.stream)
