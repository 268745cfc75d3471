"""torch integration: the `jitmarlin::linear` custom op, `MarlinLinear` and `quantize_model`.

    import jitmarlin.torch as jmt
    model = jmt.quantize_model(model, "uint4b8", group_size=128)   # nn.Linear -> MarlinLinear
    model = torch.compile(model, fullgraph=True)                     # traces through the custom op

Importing this module needs torch (>= 2.4); `import jitmarlin` never imports it.

Why a custom op: torch.compile cannot trace into jitmarlin.linear (CuPy launches, Python-side
caches), so the call is wrapped as an opaque operator with a fake implementation that only says
the output's shape, dtype and device. Operators take tensors and scalars, not Python objects, so
the QuantizedWeight travels as an int handle into a module-level registry (see `register`).
"""

import copy
import fnmatch
import itertools
import logging
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from jitmarlin.errors import InputError
from jitmarlin.ops import linear as api
from jitmarlin.ops import moe as moe_api
from jitmarlin.weights.moe import MoEWeight
from jitmarlin.weights.quant import QuantizedWeight, quantize

__all__ = [
    "MarlinLinear",
    "MarlinMoE",
    "MoEBlock",
    "quantize_model",
    "select_linears",
    "Selection",
    "register",
    "unregister",
    "register_moe",
    "fuse_projections",
    "FusedLinear",
    "FusedPart",
]

log = logging.getLogger("jitmarlin.torch")

# ---- weight registry -----------------------------------------------------------------------------

_weights: Dict[int, QuantizedWeight] = {}
_next_handle = itertools.count(1)


def register(qw: QuantizedWeight, owner: object = None) -> int:
    """Make `qw` reachable from `torch.ops.jitmarlin.linear` and return its int handle.

    Lifetime: the registry holds `qw` strongly. With `owner` given (MarlinLinear passes itself),
    the entry is removed when the owner is garbage collected (weakref.finalize), so a module owns
    its weight's registration; without an owner, call `unregister(handle)` when done.
    """
    if not isinstance(qw, QuantizedWeight):
        raise InputError(f"qw must be a jitmarlin.QuantizedWeight, got {type(qw).__name__}")
    handle = next(_next_handle)
    _weights[handle] = qw
    if owner is not None:
        # The callback holds only the handle, never the owner, so it cannot keep it alive.
        weakref.finalize(owner, _weights.pop, handle, None)
    return handle


def unregister(handle: int) -> None:
    """Drop a registration made by `register` (no error if it is already gone)."""
    _weights.pop(handle, None)


def _lookup(handle: int) -> QuantizedWeight:
    qw = _weights.get(handle)
    if qw is None:
        raise InputError(
            f"no QuantizedWeight is registered under handle {handle} "
            "(was its MarlinLinear garbage collected, or unregister()ed?)"
        )
    return qw


# ---- the custom op -------------------------------------------------------------------------------


def _kernel_ready(x: torch.Tensor, k: int) -> bool:
    """Whether jitmarlin can read x's rows in place (compiled graphs may hand us any strides)."""
    try:
        api._rows(tuple(x.shape), x.stride(), k)
    except InputError:
        return False
    return x.data_ptr() % 16 == 0


# No `from __future__ import annotations` in this file: custom_op infers the operator schema from
# these annotations, and older torch releases do not resolve string annotations.
@torch.library.custom_op("jitmarlin::linear", mutates_args=())
def _linear_op(x: torch.Tensor, handle: int, n: int, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """x (..., K) fp16/bf16 CUDA -> (..., N) = x @ W.T (+ bias), W = the weight under `handle`.

    `n` (= W's out_features) is only used by the fake implementation; it must match the weight.
    jitmarlin's own errors (InputError, CaptureError, ...) propagate unchanged.
    """
    qw = _lookup(handle)
    if n != qw.out_features:
        raise InputError(f"n = {n} but the weight under handle {handle} has out_features = {qw.out_features}")
    if x.is_cuda and not _kernel_ready(x, qw.in_features):
        x = x.contiguous()
    if bias is not None:
        bias = bias.contiguous()
    return api.linear(x, qw, bias)


@_linear_op.register_fake
def _linear_fake(x: torch.Tensor, handle: int, n: int, bias: Optional[torch.Tensor]) -> torch.Tensor:
    # Shape/dtype/device only; the real op returns a fresh contiguous tensor, as new_empty does.
    return x.new_empty((*x.shape[:-1], n))


# ---- the module ----------------------------------------------------------------------------------


class MarlinLinear(nn.Module):
    """A drop-in for nn.Linear with a jitmarlin-quantized weight: y = x @ W.T (+ bias).

    x: (..., in_features) float16/bfloat16 on a CUDA device -> (..., out_features), same dtype.
    The QuantizedWeight stays on the host and jitmarlin uploads it lazily on first use on each
    device, so `.to(device)`/`.cuda()` only move the bias (a buffer). The bias keeps the dtype it
    was given; forward casts it to x's dtype when they differ. The state_dict holds the bias only.
    """

    def __init__(self, qweight: QuantizedWeight, bias: Optional[torch.Tensor] = None):
        super().__init__()
        if not isinstance(qweight, QuantizedWeight):
            raise InputError(f"qweight must be a jitmarlin.QuantizedWeight, got {type(qweight).__name__}")
        if bias is not None and tuple(bias.shape) != (qweight.out_features,):
            raise InputError(f"bias must have shape ({qweight.out_features},), got {tuple(bias.shape)}")
        self.qweight = qweight
        self.in_features = qweight.in_features
        self.out_features = qweight.out_features
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._handle = register(qweight, owner=self)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, qtype: str = "uint4b8", group_size: int = 128, scale_dtype: Optional[str] = None
    ) -> "MarlinLinear":
        """Quantize `linear.weight` (round to nearest, jitmarlin.quantize) into a MarlinLinear.

        scale_dtype: "float16" or "bfloat16"; default: the linear's dtype if it is one of those,
        else float16. The bias is copied as it is (dtype and device of the linear).
        """
        w = linear.weight.detach()
        if scale_dtype is None:
            scale_dtype = "bfloat16" if w.dtype == torch.bfloat16 else "float16"
        qw = quantize(w, qtype, group_size, scale_dtype=scale_dtype)
        return cls(qw, linear.bias)

    @classmethod
    def from_quantized(cls, qw: QuantizedWeight, bias: Optional[torch.Tensor] = None) -> "MarlinLinear":
        """Wrap an already quantized weight (a converter's output, say); bias: (out_features,)."""
        return cls(qw, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias
        if bias is not None and bias.dtype != x.dtype:
            bias = bias.to(x.dtype)
        return torch.ops.jitmarlin.linear(x, self._handle, self.out_features, bias)

    def extra_repr(self) -> str:
        qw = self.qweight
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"qtype={qw.qtype}, group_size={qw.group_size}, bias={self.bias is not None}"
        )

    def __setstate__(self, state):
        # deepcopy/unpickle make a new module whose handle would still be the original's, and
        # that registration dies with the original: give the copy its own.
        super().__setstate__(state)
        self._handle = register(self.qweight, owner=self)

    def __deepcopy__(self, memo):
        # The QuantizedWeight is never modified, so copies share it, and with it its device
        # copies and launchers (CuPy objects that cannot be deep-copied).
        memo[id(self.qweight)] = self.qweight
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__dict__, memo))
        return new


# ---- mixture of experts --------------------------------------------------------------------------

_moe_weights: Dict[int, tuple] = {}


def register_moe(w13: MoEWeight, w2: MoEWeight, owner: object = None) -> int:
    """Make the expert weights (w13, w2) reachable from `torch.ops.jitmarlin.moe`; an int handle,
    with `register`'s lifetime rules (MarlinMoE passes itself as owner)."""
    for name, w in (("w13", w13), ("w2", w2)):
        if not isinstance(w, MoEWeight):
            raise InputError(f"{name} must be a jitmarlin MoEWeight, got {type(w).__name__}")
    handle = next(_next_handle)
    _moe_weights[handle] = (w13, w2)
    if owner is not None:
        weakref.finalize(owner, _moe_weights.pop, handle, None)
    return handle


@torch.library.custom_op("jitmarlin::moe", mutates_args=())
def _moe_op(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    handle: int,
    activation: str,
    expert_map: Optional[torch.Tensor],
    apply_router_weight_on_input: bool,
) -> torch.Tensor:
    """x (T, hidden) fp16/bf16 CUDA -> (T, hidden): the routed experts under `handle`
    (jitmarlin.moe)."""
    pair = _moe_weights.get(handle)
    if pair is None:
        raise InputError(f"no MoE weights are registered under handle {handle}")
    return moe_api.moe(
        x.contiguous(),
        pair[0],
        pair[1],
        topk_weights,
        topk_ids,
        activation=activation,
        expert_map=expert_map,
        apply_router_weight_on_input=apply_router_weight_on_input,
    )


@_moe_op.register_fake
def _moe_fake(x, topk_weights, topk_ids, handle, activation, expert_map, apply_router_weight_on_input):
    return x.new_empty(x.shape)


class MarlinMoE(nn.Module):
    """The routed experts of a MoE layer with jitmarlin-quantized weights, taking a router's
    output: forward(x, topk_weights, topk_ids) -> (..., hidden), x (..., hidden) fp16/bf16 CUDA,
    topk_weights / topk_ids (tokens, k). Runs under torch.compile(fullgraph=True) and in CUDA
    graphs whose routing changes between replays (jitmarlin.moe). expert_map: optional (global
    experts,) int tensor for expert parallelism (a buffer: `.to(device)` moves it)."""

    def __init__(
        self,
        w13: MoEWeight,
        w2: MoEWeight,
        activation: str = "silu",
        expert_map: Optional[torch.Tensor] = None,
        apply_router_weight_on_input: bool = False,
    ):
        super().__init__()
        moe_api._check_weights(w13, w2, activation)
        self.w13, self.w2 = w13, w2
        self.activation = activation
        self.apply_router_weight_on_input = bool(apply_router_weight_on_input)
        self.register_buffer("expert_map", None if expert_map is None else expert_map.detach().to(torch.int32))
        self._handle = register_moe(w13, w2, owner=self)

    def forward(self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.jitmarlin.moe(
            x.reshape(-1, shape[-1]),
            topk_weights,
            topk_ids,
            self._handle,
            self.activation,
            self.expert_map,
            self.apply_router_weight_on_input,
        )
        return y.reshape(shape)

    def extra_repr(self) -> str:
        return (
            f"experts={self.w13.num_experts}, hidden={self.w13.in_features}, "
            f"intermediate={self.w13.intermediate}, qtype={self.w13.qtype}, activation={self.activation}"
        )

    def __setstate__(self, state):
        super().__setstate__(state)
        self._handle = register_moe(self.w13, self.w2, owner=self)

    def __deepcopy__(self, memo):
        memo[id(self.w13)], memo[id(self.w2)] = self.w13, self.w2
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__dict__, memo))
        return new


class MoEBlock(nn.Module):
    """A transformers sparse-MoE block with jitmarlin experts: the model's own router, then
    `experts(x, topk_weights float32, topk_ids int32)` (a MarlinMoE, or any callable of that form).

    router: transformers 5's top-k router module (forward(x) -> (logits, top-k weights, top-k
    ids): Qwen3-MoE, Mixtral, gpt-oss) or transformers 4's nn.Linear gate, after which this block
    takes the softmax, the top `top_k` and, with norm_topk_prob, renormalises (as those 4.x
    blocks did). It is registered under `router_name` ("gate", or gpt-oss's "router"), so the
    checkpoint's router tensors keep their names. returns: what forward returns besides the
    hidden states, as the replaced block did: None (transformers 5 Qwen3-MoE / Mixtral),
    "logits" (4.x blocks: (hidden, router logits)) or "scores" (gpt-oss: (hidden, top-k weights)).
    """

    def __init__(
        self,
        router: nn.Module,
        experts,
        top_k: int,
        norm_topk_prob: bool = True,
        returns: Optional[str] = None,
        router_name: str = "gate",
    ):
        super().__init__()
        if returns not in (None, "logits", "scores"):
            raise InputError(f"returns must be None, 'logits' or 'scores', got {returns!r}")
        if not isinstance(router_name, str) or not router_name.isidentifier() or router_name == "experts":
            raise InputError(f"router_name must be an attribute name other than 'experts', got {router_name!r}")
        self.router_name = router_name
        self.add_module(router_name, router)
        self.experts = experts
        self.top_k, self.norm_topk_prob, self.returns = int(top_k), bool(norm_topk_prob), returns

    def forward(self, hidden_states: torch.Tensor):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        routed = getattr(self, self.router_name)(x)
        if isinstance(routed, tuple):  # transformers 5: (logits, top-k weights, top-k ids)
            logits, weights, ids = routed
        else:
            logits = routed
            weights, ids = torch.topk(torch.softmax(logits, dim=-1, dtype=torch.float), self.top_k, dim=-1)
            if self.norm_topk_prob:
                weights = weights / weights.sum(dim=-1, keepdim=True)
        y = self.experts(x, weights.float(), ids.to(torch.int32)).reshape(shape)
        if self.returns is None:
            return y
        return (y, logits) if self.returns == "logits" else (y, weights)


# ---- whole models --------------------------------------------------------------------------------


@dataclass
class Selection:
    """Which nn.Linear layers of a model quantize_model converts (qualified names), and which it
    leaves alone, with the reason."""

    convert: List[str] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)


def _unsupported(linear: nn.Linear, group_size: int) -> Optional[str]:
    """Why the kernel cannot take this layer's shape, or None if it can."""
    n, k = linear.out_features, linear.in_features
    if n % 8 or k % 8:  # other sizes are padded to the kernel's tiles
        return f"shape (out={n}, in={k}): both must be multiples of 8"
    if group_size != -1 and k % group_size:
        return f"in_features={k} is not a multiple of group_size={group_size}"
    return None


def select_linears(model: nn.Module, group_size: int = 128, skip: Sequence[str] = ("lm_head",)) -> Selection:
    """Decide, without changing anything, which layers quantize_model would convert.

    Only modules of type exactly nn.Linear are considered: subclasses may use their weight
    elsewhere (nn.MultiheadAttention reads its out_proj's weight directly).
    skip: fnmatch patterns matched against the qualified name, e.g. "lm_head", "*.gate".
    """
    sel = Selection()
    # remove_duplicate=False: a layer reachable under two names is converted under both.
    for name, mod in model.named_modules(remove_duplicate=False):
        if type(mod) is not nn.Linear:
            continue
        if not name:
            sel.skipped[name] = "the model itself is an nn.Linear: use MarlinLinear.from_linear"
            continue
        pattern = next((p for p in skip if fnmatch.fnmatchcase(name, p)), None)
        reason = f"matches skip pattern {pattern!r}" if pattern else _unsupported(mod, group_size)
        if reason:
            sel.skipped[name] = reason
        else:
            sel.convert.append(name)
    return sel


def _set_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


def quantize_model(
    model: nn.Module,
    qtype: str = "uint4b8",
    group_size: int = 128,
    skip: Sequence[str] = ("lm_head",),
    scale_dtype: Optional[str] = None,
) -> nn.Module:
    """Replace, in place, every supported nn.Linear of `model` by a MarlinLinear; return `model`.

    A layer is left as it is when its qualified name matches a `skip` pattern (fnmatch) or the
    kernel cannot take its shape (out/in_features not multiples of 8, in_features not a multiple
    of group_size). `select_linears` returns the same decision; each one is logged (logger
    "jitmarlin.torch": one line per skipped layer, a summary at INFO level).
    """
    sel = select_linears(model, group_size, skip)
    done: Dict[int, MarlinLinear] = {}  # id(nn.Linear) -> its replacement: shared layers stay shared
    for name in sel.convert:
        linear = model.get_submodule(name)
        new = done.get(id(linear))
        if new is None:
            new = done[id(linear)] = MarlinLinear.from_linear(linear, qtype, group_size, scale_dtype)
        _set_submodule(model, name, new)
    for name, reason in sel.skipped.items():
        log.info("quantize_model: kept %s as nn.Linear (%s)", name, reason)
    log.info("quantize_model: converted %d linear layers to MarlinLinear, kept %d", len(sel.convert), len(sel.skipped))
    return model


# ---- fused projections -----------------------------------------------------------------------------

FUSE_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _Last:
    """What a FusedLinear hands its parts: its last input and the slices of its output."""

    def __init__(self):
        self.x = None
        self.parts = None


class FusedLinear(nn.Module):
    """Sibling projections of one input as one GEMM (`inner`, a MarlinLinear or nn.Linear whose
    outputs are theirs one after another, `sizes` features each). Called in place of the first
    projection, it returns the first slice and keeps the others for its FusedPart siblings."""

    def __init__(self, inner: nn.Module, sizes: Sequence[int]):
        super().__init__()
        self.inner = inner
        self.sizes = [int(n) for n in sizes]
        self._last = _Last()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.inner(x).split(self.sizes, dim=-1)
        self._last.x, self._last.parts = x, parts
        return parts[0]

    def part(self, index: int, x: torch.Tensor) -> torch.Tensor:
        last = self._last
        if last.x is x:  # the same input the head just saw: its slice
            out = last.parts[index]
            if index == len(self.sizes) - 1:
                last.x = last.parts = None  # do not hold activations past the group
            return out
        return self.inner(x).split(self.sizes, dim=-1)[index]  # called out of order: compute

    def extra_repr(self) -> str:
        return f"sizes={self.sizes}"


class FusedPart(nn.Module):
    """Projection `index` of a FusedLinear group: the head's output slice for the same input."""

    def __init__(self, head: FusedLinear, index: int):
        super().__init__()
        self._head = (head,)  # a tuple: not a submodule (no second copy in state_dict)
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._head[0].part(self.index, x)

    def extra_repr(self) -> str:
        return f"index={self.index}"


def _fused(mods: List[nn.Module]) -> Optional[nn.Module]:
    """One module computing all of `mods` (all MarlinLinear, or all exactly nn.Linear), or None."""
    biases = [m.bias for m in mods]
    if any(b is None for b in biases) != all(b is None for b in biases):
        return None
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
    if all(isinstance(m, MarlinLinear) for m in mods):
        try:
            qw = QuantizedWeight.concat([m.qweight for m in mods])
        except InputError as e:
            log.info("fuse_projections: kept apart (%s)", e)
            return None
        return MarlinLinear(qw, bias)
    if (
        all(type(m) is nn.Linear for m in mods)
        and len({(m.in_features, m.weight.dtype, m.weight.device) for m in mods}) == 1
    ):
        w = mods[0].weight
        new = nn.Linear(
            w.shape[1], sum(m.out_features for m in mods), bias=bias is not None, device=w.device, dtype=w.dtype
        )
        with torch.no_grad():
            new.weight.copy_(torch.cat([m.weight.detach() for m in mods]))
            if bias is not None:
                new.bias.copy_(bias)
        return new
    return None


def fuse_projections(model: nn.Module, groups: Sequence[Sequence[str]] = FUSE_GROUPS) -> List[str]:
    """Give sibling projections of one input one GEMM, in place, as serving engines do (q/k/v,
    gate/up): wherever a module's children named in a group are all MarlinLinear (or all exactly
    nn.Linear, meta tensors included) of one input size and format, the first becomes a FusedLinear
    over QuantizedWeight.concat (or torch.cat) of their weights and the others FusedPart slices of
    its output. Models that call the first before the others on the same tensor (Llama, Qwen2/3,
    Mistral: q before k and v, gate before up) run one GEMM; a part called first or on another
    input runs the GEMM itself, so an unexpected order costs speed, never correctness. Groups that
    cannot share a GEMM (mixed formats, act-order permutations or nvfp4 global scales that differ)
    are left apart and logged. state_dict keys of fused layers change (`q_proj.inner.*`).
    Returns the qualified names of the modules whose projections were fused."""
    done = []
    for name, mod in list(model.named_modules()):
        for group in groups:
            mods = [getattr(mod, g, None) for g in group]
            if any(not isinstance(m, nn.Module) for m in mods):
                continue
            inner = _fused(mods)
            if inner is None:
                continue
            head = FusedLinear(inner, [m.out_features for m in mods])
            setattr(mod, group[0], head)
            for i, g in enumerate(group[1:], 1):
                setattr(mod, g, FusedPart(head, i))
            done.append(f"{name}.{'+'.join(group)}" if name else "+".join(group))
    log.info("fuse_projections: %d groups fused", len(done))
    return done
