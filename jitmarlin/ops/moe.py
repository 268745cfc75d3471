"""The MoE op: moe(), the routed-expert block of a mixture-of-experts layer, in four launches on
the caller's stream (kernels/moe): alignment, the w13 grouped GEMM with the gated activation
fused, the w2 grouped GEMM with the router weights, and the combine (three for a direct plan at
T = 1: the GEMV kernels read topk_ids themselves, no alignment). Nothing on the host depends on
the routing, so a CUDA graph captured once replays with new topk_ids every step.
"""

from __future__ import annotations

import sys
import weakref

import numpy as np

from jitmarlin.errors import CaptureError, InputError
from jitmarlin.jit import launch
from jitmarlin.jit.arrays import is_cupy, is_torch
from jitmarlin.jit.cache import default_cache
from jitmarlin.jit.profiles import live_profile, planning_profile
from jitmarlin.kernels.moe import MoEProblem
from jitmarlin.kernels.moe import tuned as moe_tuned
from jitmarlin.kernels.moe.spec import ACTIVATIONS, ROUTE_THREADS
from jitmarlin.kernels.moe.wgmma import weight_maps
from jitmarlin.weights.moe import MoEWeight
from jitmarlin.weights.qtypes import normalize_act

# w13 -> {key: _Runner}: one per (w2, device, dtype, T, k, stream, activation, options)
_runners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _u64(v: int) -> np.uint64:
    return np.uint64(v)


def moe_problem(w13: MoEWeight, w2: MoEWeight, act: str, tokens: int, topk: int, activation: str) -> MoEProblem:
    """The MoEProblem that moe() plans for these stacked weights, T tokens and top-k (w2's quant
    type and group named apart only where they differ from w13's)."""
    mixed = (w2.qtype, w2.group_size) != (w13.qtype, w13.group_size)
    return MoEProblem(
        tokens,
        topk,
        w13.num_experts,
        w13.n,
        w13.k,
        w2.n,
        w2.k,
        w13.intermediate,
        w2.out_features,
        act,
        w13.qtype,
        w13.group_size,
        activation,
        w2.qtype if mixed else "",
        w2.group_size if mixed else 0,
    )


class _Runner:
    """Everything fixed for one (weights, device, dtype, T, topk, stream, ...): the plan, the four
    kernels and the workspaces (aligned pair list, intermediate rows, per-pair outputs)."""

    def __init__(
        self,
        w13: MoEWeight,
        w2: MoEWeight,
        device: int,
        act: str,
        tokens: int,
        topk: int,
        stream_ptr: int,
        activation: str,
        on_input: bool,
        plan=None,
    ):
        import cupy as cp
        from cupy.cuda import driver

        profile = planning_profile(device)
        arch = live_profile(device).arch
        problem = moe_problem(w13, w2, act, tokens, topk, activation)
        cache = default_cache()
        if plan is None:  # a tuned choice for this GPU model and token bucket, else the planner's
            plan = moe_tuned.plan_for(profile, arch, problem, cache)
        elif plan.problem != problem:  # (a sweep's or tuner's plan: kernels.moe.plan_moe with overrides)
            raise InputError(f"the plan is for {plan.problem}, not {problem}")
        capturing = launch.is_capturing(stream_ptr)
        funcs = {}
        for spec in (plan.route, plan.up, plan.down):
            art, key, _ = cache.get(spec, arch, compile_missing=not capturing)
            if art is None:
                raise CaptureError(
                    f"kernel {spec.name} is not compiled yet and CUDA-graph capture is in "
                    "progress: call jitmarlin.moe once with this shape before capturing"
                )
            funcs[spec.name] = launch.get_function(art, key, device)
            if spec is plan.route:
                funcs[spec.combine_name] = launch.get_function(art, key, device, spec.combine_name)
            if spec is plan.up and plan.up_splits > 1:  # the split up stage's activation kernel
                funcs[spec.name + "_act"] = launch.get_function(art, key, device, spec.name + "_act")
            if spec is plan.up and getattr(spec, "sorted_x", False):  # its row copy of x
                funcs[spec.name + "_permute"] = launch.get_function(art, key, device, spec.name + "_permute")
        self.plan, self.device, self.on_input = plan, device, on_input
        self.stream = launch.stream_object(stream_ptr)
        self.align = None if plan.direct else funcs[plan.route.name]  # (direct: no alignment launch)
        self.combine = funcs[plan.route.combine_name]
        self.up = funcs[plan.up.name]
        self.act_k = funcs.get(plan.up.name + "_act")
        self.permute = funcs.get(plan.up.name + "_permute")
        self.down = funcs[plan.down.name]
        # pdl plans: the w2 GEMV and the combine launched behind the kernel before them (sm_90+)
        self.down_pdl = self.combine_pdl = None
        if plan.pdl:
            self.down_pdl = launch.PdlLaunch(
                self.down.ptr, (plan.grid_down, 1, 1), (plan.down.threads, 1, 1), plan.down.smem_bytes(), stream_ptr
            )
            self.combine_pdl = launch.PdlLaunch(
                self.combine.ptr, (plan.combine_grid, 1, 1), (ROUTE_THREADS, 1, 1), 0, stream_ptr
            )
        for f, smem in ((self.up, plan.up.smem_bytes()), (self.down, plan.down.smem_bytes())):
            with cp.cuda.Device(device):
                driver.funcSetAttribute(f.ptr, launch.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)

        # Workspaces shared by every MoE layer on this device and stream (launches on one stream
        # run in order): the aligned pair list, the intermediate rows, the per-pair outputs and,
        # with K splits, the down GEMM's fp32 partial sums (x's dtype as bit patterns).
        def ws(name, dtype, shape):
            return _workspace(device, stream_ptr, name, dtype, shape, capturing)

        # (a direct plan's GEMV kernels take topk_ids and expert_map instead of the aligned list)
        self.sorted = None if plan.direct else ws("sorted", cp.int32, (plan.sorted_rows,))
        self.blk = None if plan.direct else ws("blk", cp.int32, (plan.max_blocks,))
        self.n_rows = None if plan.direct else ws("n_rows", cp.int32, (1,))
        self.route_ptrs = tuple(_u64(0 if a is None else a.data.ptr) for a in (self.sorted, self.blk, self.n_rows))
        self.h = ws("h", cp.uint16, (plan.h_rows, problem.inter))
        self.y = ws("y", cp.uint16, (problem.pairs, problem.hidden))
        self.yp = ws("yp", cp.float32, (plan.splits, problem.pairs, problem.hidden)) if plan.splits > 1 else None
        self.hp = ws("hp", cp.float32, (plan.up_splits, problem.pairs, problem.n13)) if plan.up_splits > 1 else None
        self.ws_ptrs = tuple(_u64(0 if a is None else a.data.ptr) for a in (self.h, self.y, self.yp, self.hp))
        # sorted_x: x's rows in the aligned list's order, for the up stage's TMA boxes
        self.xs = ws("xs", cp.uint16, (plan.sorted_rows, problem.hidden)) if self.permute is not None else None
        self.xs_ptr = _u64(0 if self.xs is None else self.xs.data.ptr)
        b13, s13, z13, g13, bias13 = w13.to_device(device, act)
        b2, s2, z2, g2, bias2 = w2.to_device(device, act)

        def ptr(a):
            return _u64(0 if a is None else a.data.ptr)

        p = problem
        self.up_w = (ptr(b13), ptr(s13), ptr(z13), ptr(bias13), ptr(g13))
        self.down_w = (ptr(b2), ptr(s2), ptr(z2), ptr(bias2), ptr(g2))
        self.keep = (w13.to_device(device, act), w2.to_device(device, act))
        # The wgmma kind reads the stacked weights through tensor maps over all experts (appended
        # to its arguments); the other kinds take none.
        self.up_maps = self.down_maps = ()
        if plan.wgmma:
            self.up_maps = weight_maps(plan.up, w13.num_experts, w13.n, w13.k, *(int(v) for v in self.up_w[:3]))
            self.down_maps = weight_maps(plan.down, w2.num_experts, w2.n, w2.k, *(int(v) for v in self.down_w[:3]))

            # row-sorted A operands (sorted_h's H, sorted_x's copy of x): a row block's rows as one
            # TMA box of 64 columns (128-byte swizzle: the wgmma layout)
            def rows_map(a, cols: int, tile_m: int):
                rows = a.shape[0]
                return (launch.tensor_map_2d(int(a.data.ptr), 2, (cols, rows), 2 * cols, (64, tile_m), True),)

            if plan.down.sorted_h:
                self.down_maps += rows_map(self.h, p.inter, plan.down.tile_m)
            if self.xs is not None:
                self.up_maps += rows_map(self.xs, p.hidden, plan.up.tile_m)
        self.ints = {
            name: np.int32(v)
            for name, v in dict(
                pairs=p.pairs,
                topk=topk,
                n13=w13.n,
                k13=w13.k,
                n2=w2.n,
                k2=w2.k,
                inter=p.inter,
                hidden=p.hidden,
                experts=p.experts,
                max_blocks=plan.max_blocks,
                tokens=tokens,
                splits=plan.splits,
                up_splits=plan.up_splits,
            ).items()
        }

    def __call__(self, x_ptr: int, ids_ptr: int, tw_ptr: int, emap_ptr: int, n_global: int, out_ptr: int):
        plan, i = self.plan, self.ints
        sorted_, blk, n_rows = self.route_ptrs
        h, y, yp, hp = self.ws_ptrs
        one = np.int32(1)
        ids, emap, tw = _u64(ids_ptr), _u64(emap_ptr), _u64(tw_ptr)
        ng = np.int32(n_global)
        st = self.stream
        # direct (T = 1): the GEMV kernels' trailing arguments, the routing they read themselves
        up_tail = down_tail = (ids, emap, ng, i["experts"])
        if self.align is not None:
            up_tail, down_tail = self.up_maps, self.down_maps
            self.align(
                (1,),
                (ROUTE_THREADS,),
                (ids, emap, i["pairs"], ng, i["experts"], i["max_blocks"], sorted_, blk, n_rows),
                shared_mem=2 * ROUTE_THREADS * 4,
                stream=st,
            )
        a_up = _u64(x_ptr)
        if self.permute is not None:  # sorted_x: x's rows into the aligned list's order first
            a_up = self.xs_ptr
            self.permute(
                (plan.permute_grid,),
                (plan.up.threads,),
                (_u64(x_ptr), sorted_, n_rows, i["pairs"], i["topk"], i["hidden"], i["hidden"], a_up),
                stream=st,
            )
        b, s, z, bias, g = self.up_w
        self.up(
            (plan.grid_up,),
            (plan.up.threads,),
            (
                a_up,
                b,
                s,
                z,
                bias,
                g,
                tw if self.on_input else _u64(0),
                sorted_,
                blk,
                n_rows,
                h,
                i["pairs"],
                i["topk"],
                i["n13"],
                i["k13"],
                i["inter"],
                i["hidden"],
                i["hidden"],
                hp,
                i["up_splits"],
                *up_tail,
            ),
            shared_mem=plan.up.smem_bytes(),
            stream=st,
        )
        if self.act_k is not None:  # up_splits > 1: the splits' sums, activated, into the intermediate rows
            self.act_k(
                (plan.act_grid,),
                (plan.up.threads,),
                (hp, h, i["pairs"], i["n13"], i["inter"], i["up_splits"]),
                stream=st,
            )
        b, s, z, bias, g = self.down_w
        down_args = (
            h,
            b,
            s,
            z,
            bias,
            g,
            _u64(0) if self.on_input else tw,
            sorted_,
            blk,
            n_rows,
            y,
            i["pairs"],
            one,
            i["n2"],
            i["k2"],
            i["hidden"],
            i["inter"],
            i["inter"],
            yp,
            i["splits"],
            *down_tail,
        )
        combine_args = (
            y,
            ids,
            emap,
            ng,
            i["experts"],
            i["tokens"],
            i["topk"],
            i["hidden"],
            _u64(out_ptr),
            yp,
            i["splits"],
        )
        if self.down_pdl is not None:
            self.down_pdl(down_args)
            self.combine_pdl(combine_args)
            return
        self.down((plan.grid_down,), (plan.down.threads,), down_args, shared_mem=plan.down.smem_bytes(), stream=st)
        self.combine((plan.combine_grid,), (ROUTE_THREADS,), combine_args, stream=st)


# (device, stream, name) -> [the current buffer, the outgrown ones]: outgrown buffers stay alive,
# since runners made earlier (and graphs captured with them) still point into them
_workspaces: dict = {}


def _workspace(device: int, stream_ptr: int, name: str, dtype, shape: tuple, capturing: bool):
    """A view of `shape` on the shared workspace `name` of (device, stream), grown by doubling."""
    import cupy as cp

    need = int(np.prod(shape)) * np.dtype(dtype).itemsize
    held = _workspaces.get((device, stream_ptr, name))
    if held is None or held[0].nbytes < need:
        if capturing:
            raise CaptureError(
                "jitmarlin.moe needs a larger workspace, which cannot be allocated during "
                "CUDA-graph capture: call it once with this shape (the largest first) before capturing"
            )
        size = max(need, 2 * held[0].nbytes if held else 0, 256)
        s = launch.private_stream(device)
        with cp.cuda.Device(device), s:
            buf = cp.empty(size, dtype=cp.uint8)
        s.synchronize()
        held = [buf] + ([held[0]] + held[1] if held else [])
        held = [held[0], held[1:]]
        _workspaces[(device, stream_ptr, name)] = held
    return held[0][:need].view(dtype).reshape(shape)


def _check_weights(w13, w2, activation: str) -> None:
    for name, w in (("w13", w13), ("w2", w2)):
        if not isinstance(w, MoEWeight):
            raise InputError(f"{name} must be a jitmarlin MoEWeight, got {type(w).__name__}")
    if not w13.gated:
        raise InputError(
            "w13 must be a gated MoEWeight (gate and up fused: quantize_moe(..., gated=True) or "
            "MoEWeight.stack_gate_up)"
        )
    if w2.gated:
        raise InputError("w2 must not be gated")
    if w13.num_experts != w2.num_experts:
        raise InputError(f"w13 has {w13.num_experts} experts but w2 has {w2.num_experts}")
    if w2.in_features != w13.intermediate:
        raise InputError(f"w2.in_features ({w2.in_features}) must equal w13's intermediate size ({w13.intermediate})")
    if activation not in ACTIVATIONS:
        raise InputError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")


def moe(
    x,
    w13: MoEWeight,
    w2: MoEWeight,
    topk_weights,
    topk_ids,
    *,
    activation: str = "silu",
    expert_map=None,
    apply_router_weight_on_input: bool = False,
    out=None,
):
    """The routed experts of a MoE layer: out[t] = sum_j w[t, j] * W2[e] @ act(W13[e] @ x[t]),
    e = topk_ids[t, j] (vLLM's fused_experts).

    x: (T, hidden) float16 or bfloat16 on a GPU (CuPy or torch; returned as the same kind).
    w13: gated MoEWeight of E experts, (2I, hidden) each (gate rows then up rows, stored
    interleaved); w2: MoEWeight (hidden, I). topk_weights: (T, k) float32 (other float dtypes are
    converted); topk_ids: (T, k) int32 expert ids (int64 is converted: a copy). activation: 'silu'
    (SwiGLU), 'gelu' (exact erf GELU times up) or 'swigluoai' (gpt-oss: clamped at 7,
    (up + 1) * gate * sigmoid(1.702 gate); w13/w2 biases from the MoEWeights). expert_map:
    optional (num_global_experts,) int32, global id -> local expert or -1 for experts on other
    GPUs (those pairs add nothing; the sum over GPUs is the caller's). Ids outside the experts
    (or the map) add nothing either. apply_router_weight_on_input: weight the input rows instead
    of the outputs (k = 1 models). out: optional (T, hidden) of x's dtype.

    The intermediate activations are rounded to x's dtype, as in vLLM. Runs on x's GPU and current
    stream; the first call for a shape plans, compiles and allocates (warm up before capturing).
    """
    _check_weights(w13, w2, activation)
    if is_torch(x):
        return _moe_torch(
            x, w13, w2, topk_weights, topk_ids, activation, expert_map, bool(apply_router_weight_on_input), out
        )
    if is_cupy(x):
        return _moe_cupy(
            x, w13, w2, topk_weights, topk_ids, activation, expert_map, bool(apply_router_weight_on_input), out
        )
    raise InputError(f"x must be a CuPy array or a torch tensor on a GPU, got {type(x).__name__}")


def _shapes(x_shape, w13, w2, tw_shape, ids_shape, on_input: bool) -> tuple[int, int]:
    if len(x_shape) != 2:
        raise InputError(f"x must be 2-D (tokens, hidden), got shape {tuple(x_shape)}")
    t, hidden = x_shape
    if hidden != w13.in_features:
        raise InputError(f"x has hidden size {hidden} but w13 has in_features {w13.in_features}")
    if w2.out_features != hidden:
        raise InputError(f"w2.out_features ({w2.out_features}) must equal x's hidden size ({hidden})")
    if len(ids_shape) != 2 or ids_shape[0] != t:
        raise InputError(f"topk_ids must be (tokens={t}, k), got {tuple(ids_shape)}")
    if tuple(tw_shape) != tuple(ids_shape):
        raise InputError(f"topk_weights has shape {tuple(tw_shape)} but topk_ids {tuple(ids_shape)}")
    k = ids_shape[1]
    if k < 1:
        raise InputError("topk must be >= 1")
    if on_input and k != 1:
        raise InputError("apply_router_weight_on_input needs topk == 1")
    return t, k


def _runner(w13, w2, device, act, t, k, stream, activation, on_input) -> _Runner:
    per = _runners.get(w13)
    if per is None:
        per = _runners[w13] = {}
    key = (id(w2), device, act, t, k, stream, activation, on_input)
    r = per.get(key)
    if r is None or r.keep[1] is not w2.to_device(device, act):
        r = per[key] = _Runner(w13, w2, device, act, t, k, stream, activation, on_input)
    return r


def _moe_cupy(x, w13, w2, tw, ids, activation, expert_map, on_input, out):
    import cupy as cp

    act = normalize_act(x.dtype)
    dev = x.data.device_id
    for name, a in (("topk_weights", tw), ("topk_ids", ids), ("expert_map", expert_map), ("out", out)):
        if a is not None and (not is_cupy(a) or a.data.device_id != dev):
            raise InputError(f"{name} must be a CuPy array on device {dev}")
    t, k = _shapes(x.shape, w13, w2, tw.shape, ids.shape, on_input)
    if not x.flags.c_contiguous or x.data.ptr % 16:
        raise InputError("x must be C-contiguous and 16-byte aligned")
    if ids.dtype != cp.int32:
        if ids.dtype.kind not in "iu":
            raise InputError(f"topk_ids must be an integer array, got {ids.dtype}")
        ids = ids.astype(cp.int32)
    ids = cp.ascontiguousarray(ids)
    tw = cp.ascontiguousarray(tw, dtype=cp.float32)
    n_global, emap_ptr = _expert_map(
        expert_map, lambda m: m.dtype == cp.int32 and m.ndim == 1 and m.flags.c_contiguous, lambda m: m.data.ptr
    )
    if out is None:
        out = cp.empty((t, x.shape[1]), dtype=x.dtype)
    elif tuple(out.shape) != (t, x.shape[1]) or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise InputError(f"out must be a contiguous ({t}, {x.shape[1]}) array of {x.dtype}")
    if t == 0:
        return out
    with cp.cuda.Device(dev):
        stream = cp.cuda.get_current_stream().ptr
        r = _runner(w13, w2, dev, act, t, k, stream, activation, on_input)
        r(
            x.data.ptr,
            ids.data.ptr,
            tw.data.ptr,
            emap_ptr,
            n_global if expert_map is not None else w13.num_experts,
            out.data.ptr,
        )
    return out


def _expert_map(m, ok, ptr) -> tuple[int, int]:
    if m is None:
        return 0, 0
    if not ok(m):
        raise InputError("expert_map must be a 1-D contiguous int32 array (global expert -> local, -1 = absent)")
    return int(m.shape[0]), int(ptr(m))


def _moe_torch(x, w13, w2, tw, ids, activation, expert_map, on_input, out):
    torch = sys.modules["torch"]
    if not x.is_cuda:
        raise InputError("x is a CPU tensor: move it to a CUDA device first")
    act = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(x.dtype)
    if act is None:
        raise InputError(f"x must be float16 or bfloat16, got {x.dtype}")
    for name, a in (("topk_weights", tw), ("topk_ids", ids), ("expert_map", expert_map), ("out", out)):
        if a is not None and (not is_torch(a) or a.device != x.device):
            raise InputError(f"{name} must be a torch tensor on {x.device}")
    t, k = _shapes(tuple(x.shape), w13, w2, tuple(tw.shape), tuple(ids.shape), on_input)
    if not x.is_contiguous() or x.data_ptr() % 16:
        raise InputError("x must be contiguous and 16-byte aligned")
    if ids.dtype != torch.int32:
        if ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise InputError(f"topk_ids must be an integer tensor, got {ids.dtype}")
        ids = ids.to(torch.int32)
    ids = ids.contiguous()
    tw = tw.to(torch.float32).contiguous()
    n_global, emap_ptr = _expert_map(
        expert_map, lambda m: m.dtype == torch.int32 and m.dim() == 1 and m.is_contiguous(), lambda m: m.data_ptr()
    )
    if out is None:
        out = torch.empty((t, x.shape[1]), dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (t, x.shape[1]) or out.dtype != x.dtype or not out.is_contiguous():
        raise InputError(f"out must be a contiguous ({t}, {x.shape[1]}) tensor of {x.dtype}")
    if t == 0:
        return out
    dev = x.device.index
    stream = torch.cuda.current_stream(dev).cuda_stream
    import cupy as cp

    with cp.cuda.Device(dev):
        r = _runner(w13, w2, dev, act, t, k, stream, activation, on_input)
        r(
            x.data_ptr(),
            ids.data_ptr(),
            tw.data_ptr(),
            emap_ptr,
            n_global if expert_map is not None else w13.num_experts,
            out.data_ptr(),
        )
    return out
