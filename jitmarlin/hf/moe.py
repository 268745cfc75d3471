"""jitmarlin.hf.load's mixture-of-experts side: which transformers blocks are sparse-MoE layers,
how checkpoint names map onto them, and the replacement of a block by jitmarlin.torch.MoEBlock
(the model's own router, then a MarlinMoE holding the checkpoint's stacked experts).

Importing this module needs neither torch nor transformers (jitmarlin.torch is imported when a
block is replaced).

Blocks (transformers 5 module structure; the checkpoint side is read by jitmarlin.hf.convert):
  Qwen3MoeSparseMoeBlock  router `gate` (top-k softmax, renormalised when norm_topk_prob);
                          experts `experts.E.{gate,up,down}_proj`; num_experts,
                          moe_intermediate_size; activation config.hidden_act
  MixtralSparseMoeBlock   the model's `mlp`, the checkpoint's `block_sparse_moe` (transformers 5
                          renames it on load; so does this loader); router `gate`; experts
                          `experts.E.w1 / w3 / w2` (gate, up, down); num_local_experts,
                          intermediate_size; config.hidden_act
  GptOssMLP               router `router` (top-k of the logits, then softmax); experts stored
                          stacked (`experts.gate_up_proj_blocks`, ...), MXFP4; activation
                          swigluoai (alpha 1.702, limit 7: config.swiglu_alpha / swiglu_limit
                          must be those), biases; forward returns (hidden, top-k weights)
transformers 4 builds Qwen3-MoE and Mixtral blocks with a plain nn.Linear router and returns
(hidden, router logits): MoEBlock reproduces that (softmax, top-k, renormalise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jitmarlin.errors import InputError

from .convert import MoEExperts, expert_of

__all__ = ["MOE_BLOCKS", "Renamer", "moe_blocks", "replace_block", "refuse_plain_expert"]


@dataclass(frozen=True)
class _Arch:
    router: str  # attribute of the router module
    experts_field: str  # config field: number of experts
    inter_field: str  # config field: each expert's intermediate size
    gpt_oss: bool = False  # swigluoai, biases, returns (hidden, scores)
    norm_field: str | None = None  # config field of norm_topk_prob (None: always renormalise)


MOE_BLOCKS = {
    "Qwen3MoeSparseMoeBlock": _Arch("gate", "num_experts", "moe_intermediate_size", norm_field="norm_topk_prob"),
    "MixtralSparseMoeBlock": _Arch("gate", "num_local_experts", "intermediate_size"),
    "GptOssMLP": _Arch("router", "num_local_experts", "intermediate_size", gpt_oss=True),
}
# checkpoint name part -> transformers 5 module name part, applied where the model lacks the former
_RENAMES = ((".block_sparse_moe.", ".mlp."),)
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu"}  # config.hidden_act -> jitmarlin.moe's


def moe_blocks(model) -> dict:
    """{qualified name: module} of the model's sparse-MoE blocks that jitmarlin can replace."""
    return {n: m for n, m in model.named_modules() if type(m).__name__ in MOE_BLOCKS}


class Renamer:
    """Checkpoint tensor / module names -> the model's (Mixtral's block_sparse_moe -> mlp on
    transformers 5, which renames it the same way when it loads a checkpoint)."""

    def __init__(self, model):
        parts = {p for n, _ in model.named_modules() for p in n.split(".")}
        self.rules = tuple((a, b) for a, b in _RENAMES if a.strip(".") not in parts)

    def __call__(self, name: str) -> str:
        for a, b in self.rules:
            name = name.replace(a, b)
        return name


def _int_field(config, name: str, lo: int, hi: int | None = None) -> int:
    v = getattr(config, name, None)
    if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise InputError(f"config.json: {name} must be an int {bound}, got {type(v).__name__} {v!r}"[:300])
    return v


def _activation(config, arch: _Arch) -> str:
    if arch.gpt_oss:
        for name, want in (("swiglu_alpha", 1.702), ("swiglu_limit", 7.0)):
            v = getattr(config, name, want)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isclose(v, want, rel_tol=1e-6):
                raise InputError(
                    f"config.json: {name} = {v!r}: jitmarlin's swigluoai activation is gpt-oss's "
                    f"(alpha 1.702, limit 7.0)"
                )
        return "swigluoai"
    act = getattr(config, "hidden_act", None)
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        raise InputError(
            f"config.json: hidden_act = {act!r}: jitmarlin's MoE kernels gate with "
            f"{', '.join(sorted(_ACTIVATIONS))} only"
        )
    return _ACTIVATIONS[act]


def refuse_plain_expert(name: str, blocks: dict) -> None:
    """InputError for an unquantized expert tensor (`<block>.experts.<e>.<proj>.weight`) of a
    block jitmarlin replaces: its experts must all be quantized."""
    hit = expert_of(name.rpartition(".")[0])
    if hit is not None and hit[0] in blocks:
        raise InputError(
            f"{name}: this MoE layer's experts are stored unquantized; jitmarlin.hf.load runs "
            "quantized experts only (every expert of the layer in the checkpoint's scheme)"
        )


def replace_block(model, name: str, experts: MoEExperts):
    """Replace the sparse-MoE block `name` (a model name) by MoEBlock(its router, MarlinMoE(experts));
    the new module. InputError when the block is not one jitmarlin knows or the stacked experts do
    not match the config (expert count, hidden and intermediate sizes)."""
    import torch

    from jitmarlin.torch import MarlinMoE, MoEBlock

    try:
        mod = model.get_submodule(name)
    except AttributeError:
        mod = None
    arch = MOE_BLOCKS.get(type(mod).__name__)
    if arch is None:
        kind = "no such module" if mod is None else f"a {type(mod).__name__}"
        raise InputError(
            f"the checkpoint holds MoE experts for {name!r} but the {type(model).__name__} "
            f"architecture has {kind} there (jitmarlin.hf.load replaces "
            f"{', '.join(MOE_BLOCKS)})"
        )
    cfg = model.config
    w13, w2 = experts
    count = _int_field(cfg, arch.experts_field, 1)
    hidden = _int_field(cfg, "hidden_size", 1)
    inter = _int_field(cfg, arch.inter_field, 1)
    top_k = _int_field(cfg, "num_experts_per_tok", 1, count)
    got = (w13.num_experts, w13.intermediate, w13.in_features)
    if got != (count, inter, hidden) or w2.shape != (count, hidden, inter):
        raise InputError(
            f"{name}.experts: the checkpoint's experts are (experts, intermediate, hidden) = {got} "
            f"(down {w2.shape}) but config.json says ({arch.experts_field}={count}, "
            f"{arch.inter_field}={inter}, hidden_size={hidden})"
        )
    if (w13.qtype, w13.group_size) != (w2.qtype, w2.group_size):
        raise InputError(
            f"{name}.experts: gate/up are {w13.qtype} group {w13.group_size} but down is {w2.qtype} "
            f"group {w2.group_size}; jitmarlin.moe needs one quant type and group size"
        )
    norm = True
    if arch.norm_field is not None:
        norm = getattr(cfg, arch.norm_field, False)
        if not isinstance(norm, bool):
            raise InputError(f"config.json: {arch.norm_field} must be a bool, got {norm!r}"[:200])
    router = getattr(mod, arch.router, None)
    if not isinstance(router, torch.nn.Module):
        raise InputError(f"{name}: the {type(mod).__name__} has no router module {arch.router!r}")
    linear_router = type(router) is torch.nn.Linear  # transformers 4
    if arch.gpt_oss and linear_router:
        raise InputError(
            f"{name}: this transformers' gpt-oss router is an nn.Linear; jitmarlin.hf.load needs "
            "transformers >= 5 for gpt-oss"
        )
    returns = "scores" if arch.gpt_oss else ("logits" if linear_router else None)
    new = MoEBlock(router, MarlinMoE(w13, w2, _activation(cfg, arch)), top_k, norm, returns, arch.router)
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)
    return new
