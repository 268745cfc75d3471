"""Launch glue of the fused families (mma.sync Stream-K, wgmma, GEMV): the Stream-K workspace
(counters, partial tiles, tagged slots) and the Launcher that turns a Plan into a grid, tensor
maps and kernel arguments. The generic part (modules, streams, devices, PDL) is
jitmarlin.jit.launch, reached through its module so that one patch of it reaches here too.
"""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import CaptureError
from jitmarlin.jit import launch as jl
from jitmarlin.kernels.plan_base import Plan
from jitmarlin.kernels.spec import HYBRID_SLOT_WORDS, GemvSpec

MAX_SLOT_FLOATS = 128 * 256  # largest output tile (wgmma 256x128 or 128x256): floats per partial slot
# A block leaves partial sums for at most one split tile (its first): one slot a block, the size
# of its tile. A finisher counts its contributors in on the counter of its own block index.
MAX_BLOCKS_PER_SM = 2  # the most blocks of one kernel an SM holds (occupancy 1 or 2)
# A pair gemv plan's block (one an SM) uses half its column blocks' slots: at most 4 column
# blocks of 16 rows x 16 pieces, two words a piece, over 2.
PAIR_SLOT_WORDS = 4 * 16 * 16 * 2 // 2

_workspaces: dict[tuple[int, int], "Workspace"] = {}
_retired: list = []  # outgrown workspaces: launchers and captured graphs may still point into them


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
            return f"{plan.spec.name} with {plan.grid} blocks needs {need} workspace {name}, the workspace has {have}"
    return None


class Workspace:
    """Per (device, stream) scratch for cross-block reduction, sized for a GPU of `sms` SMs
    (workspace_capacity): int32 counters, fp32 partial tiles, and the hybrid and pair gemv plans'
    tagged 64-bit slots. Counters are zero and the tagged slots empty between
    launches (the kernels reset them), so one allocation serves every call on that stream,
    CUDA-graph replays included. Zeroed on a private stream that is synchronised alone (never on
    the caller's stream, which may be busy)."""

    def __init__(self, device: int, sms: int):
        cp = jl._cp()
        s = jl.private_stream(device)
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
    if jl.is_capturing(stream_ptr):
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


X_BOX_K = 64  # halves of x along K per TMA box: one 128-byte swizzle row
MAX_X_MAPS = 64  # tensor maps kept per launcher (x buffers seen), oldest dropped first


def x_tensor_map(ptr: int, rows: int, cols: int, lda: int, box_rows: int):
    """x's map: `rows` x `cols` halves, rows `lda` elements apart, boxes of 64 columns x
    `box_rows` rows with the 128-byte swizzle (the wgmma operand layout)."""
    return jl.tensor_map_2d(ptr, 2, (cols, rows), lda * 2, (X_BOX_K, box_rows), swizzle_128b=True)


def weight_tensor_maps(spec, ptrs: dict, n: int, k: int) -> tuple:
    """(B, S, Z) maps of an uploaded weight for the wgmma kernel (N x K padded; see wgmma.cu.j2):
    B as K/16 rows of N * bits/4 8-byte words, boxes of one tile's words x 4 rows; S and Z as
    rows of N halves (one per group, or one), boxes of one tile's features x the rows of a
    64-deep K step. A pointer that is 0 (no offsets), or a box the kernel does not load by TMA,
    gets an empty map."""
    empty = np.zeros((), dtype=jl.TENSOR_MAP)[()]
    words = n * spec.bits // 4
    box_words = spec.tile_n * spec.bits // 4
    bmap = (
        jl.tensor_map_2d(ptrs["B"], 8, (words, k // 16), words * 8, (box_words, spec.tk)) if box_words <= 256 else empty
    )
    if spec.group_blocks < 0:  # per-channel scales, read in the epilogue
        return bmap, empty, empty
    rows = 1 if spec.group_blocks == 0 else k // (16 * spec.group_blocks)
    box_rows = spec.scale_rows // (2 if spec.affine else 1)  # scale rows of one K tile
    maps = [
        jl.tensor_map_2d(ptrs[key], 2, (n, rows), n * 2, (spec.tile_n, box_rows)) if ptrs[key] else empty
        for key in ("S", "Z")
    ]
    return (bmap, *maps)


class Launcher:
    """Everything fixed for one (weight, device, activation dtype, M, stream, PDL): the call only
    adds the pointers of x, out and bias (and, for the wgmma kernel, x's tensor map, kept per x
    buffer). pdl: launch with programmatic dependent launch (the caller has checked the GPU)."""

    __slots__ = (
        "func",
        "grid",
        "block",
        "smem",
        "stream",
        "static",
        "plan",
        "device",
        "keep",
        "iters",
        "whole",
        "x_tail",
        "x_maps",
        "w_maps",
        "pdl",
        "wgmma",
    )

    def __init__(
        self,
        plan: Plan,
        func,
        device: int,
        stream_ptr: int,
        ptrs: dict,
        ws: Workspace,
        n_out: int,
        k_in: int,
        gscale: float,
        pdl: bool = False,
    ):
        self.plan = plan
        self.func = func
        self.device = device
        self.keep = ws  # the workspace must outlive every launcher that points into it
        self.grid = (plan.grid, 1, 1)
        self.block = (plan.spec.threads, 1, 1)
        self.smem = plan.smem_bytes
        self.stream = jl.stream_object(stream_ptr)
        p = plan.problem
        self.iters = np.int32(plan.iters)
        self.whole = np.int32(plan.whole)
        self.x_maps = {} if plan.spec.wgmma or getattr(plan.spec, "xbox", False) else None
        self.wgmma = bool(plan.spec.wgmma)  # the order of the maps in the arguments, decided once
        self.x_tail = np.int32(p.m % plan.spec.tile_m if plan.spec.wgmma else 0)
        tagged = isinstance(plan.spec, GemvSpec) and plan.spec.tagged_words(plan.grid) > 0
        if pdl and not getattr(plan.spec, "pdl", False):  # it would touch x before the grid ahead is done
            raise ValueError(f"{plan.spec.name} is not built for programmatic dependent launch (spec.pdl)")
        misfit = workspace_misfit(plan, ws.capacity)
        if misfit:  # a kernel past its counters would read another block's (or anything's) memory
            raise ValueError(misfit)
        if plan.spec.wgmma:
            self.w_maps = weight_tensor_maps(plan.spec, ptrs, plan.problem.n, plan.problem.k)
        elif getattr(plan.spec, "bulk", False):  # the weights' map only (KernelSpec.bulk)
            self.w_maps = weight_tensor_maps(plan.spec, ptrs, plan.problem.n, plan.problem.k)[:1]
        else:
            self.w_maps = ()
        self.static = (
            np.uint64(ptrs["B"]),
            np.uint64(ptrs["S"]),
            np.uint64(ptrs["Z"]),
            np.float32(gscale),
            np.uint64(ws.tagged_ptr if tagged else ws.partials_ptr),
            np.uint64(ws.locks_ptr),
            np.int32(p.m),
            np.int32(p.n),
            np.int32(p.k),
            np.int32(n_out),
            np.int32(k_in),
        )
        from cupy.cuda import driver

        with jl._cp().cuda.Device(device):
            driver.funcSetAttribute(func.ptr, jl.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem)
        self.pdl = jl.PdlLaunch(func.ptr, self.grid, self.block, self.smem, stream_ptr) if pdl else None

    def __call__(self, x_ptr: int, lda: int, out_ptr: int, bias_ptr: int) -> None:
        b, s, z, gscale, part, locks, m, n, k, n_out, k_in = self.static
        args = (
            np.uint64(x_ptr),
            b,
            s,
            z,
            np.uint64(bias_ptr),
            np.uint64(out_ptr),
            gscale,
            part,
            locks,
            m,
            n,
            k,
            n_out,
            k_in,
            np.int32(lda),
            self.iters,
        )
        if self.x_maps is not None:
            maps = self.x_maps.get((x_ptr, lda))
            if maps is None:
                if len(self.x_maps) >= MAX_X_MAPS:
                    del self.x_maps[next(iter(self.x_maps))]
                full = x_tensor_map(x_ptr, int(m), int(k_in), lda, self.plan.spec.tile_m)
                if not self.plan.spec.tail:  # (KernelSpec.xbox: never tail)
                    maps = (full,)
                else:  # the short last row block's boxes of its own rows (wgmma.cu.j2, x_tail)
                    tail = x_tensor_map(x_ptr, int(m), int(k_in), lda, int(self.x_tail)) if self.x_tail else full
                    maps = (self.x_tail, tail, full)
                self.x_maps[(x_ptr, lda)] = maps
            if self.wgmma:
                args += (self.whole, *maps, *self.w_maps)
            else:  # KernelSpec.xbox: the weights' map, then x's
                args += (*self.w_maps, *maps)
        elif self.w_maps:
            args += self.w_maps
        if jl.current_device() != self.device:  # (x on a GPU that is not the caller's current one)
            with jl._cp().cuda.Device(self.device):
                self._launch(args)
        else:
            self._launch(args)

    def _launch(self, args) -> None:
        if self.pdl is not None:
            self.pdl(args)
        else:
            self.func(self.grid, self.block, args, shared_mem=self.smem, stream=self.stream)
