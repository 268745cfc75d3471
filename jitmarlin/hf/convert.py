"""A quantized module's checkpoint tensors -> QuantizedWeight; a MoE layer's experts -> MoEExperts
(the stacked (w13, w2) pair jitmarlin.moe takes). NumPy only: no torch.

Which tensors make a quantized module (`layout`), per method:
  gptq                  qweight, scales [, qzeros, g_idx]
  awq                   qweight, qzeros, scales
  compressed-tensors    weight_packed, weight_scale, weight_shape [, weight_zero_point, weight_g_idx]
    nvfp4-pack-quantized  weight_packed uint8 (N, K/2), weight_scale float8_e4m3fn (N, K/16),
                          weight_global_scale float32 (1,) [, weight_shape, input_global_scale]
                          w = e2m1 * weight_scale / weight_global_scale (compressed-tensors
                          stores the reciprocal of ModelOpt's weight_scale_2; vLLM inverts it
                          the same way)
  modelopt (NVFP4)      weight uint8 (N, K/2), weight_scale float8_e4m3fn (N, K/16),
                          weight_scale_2 float32 scalar [, input_scale]
                          w = e2m1 * weight_scale * weight_scale_2
  mxfp4 (gpt-oss)       one module per MoE layer, `<block>.experts`: gate_up_proj_blocks,
                          gate_up_proj_scales, down_proj_blocks, down_proj_scales [, gate_up_proj_bias,
                          down_proj_bias] (jitmarlin.weights.formats.moe_from_gpt_oss)
Parts listed in IGNORED (the activation scales of W4A4 checkpoints) are gathered with their
module and dropped: jitmarlin's kernels are weight-only.

Experts: a quantized module named `<block>.experts.<e>.<proj>`, proj gate_proj / up_proj /
down_proj (Qwen-MoE, DeepSeek style) or w1 / w3 / w2 (Mixtral: w1 gate, w3 up, w2 down), is one
expert's linear. `group_experts` checks that every block has experts 0..E-1, each with its three
projections, before any tensor is read; `ExpertStacker` converts each expert as its tensors
arrive and stacks the block once it is complete (moe_from_experts; moe_from_nvfp4 for NVFP4,
which puts an expert's gate and up on one global scale, exactly where the ratio folds into the
block scales, else rounding each folded block scale once to fp16).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.weights import halves
from jitmarlin.weights.formats import (
    from_awq,
    from_compressed_tensors,
    from_gptq,
    from_nvfp4,
    moe_from_experts,
    moe_from_gpt_oss,
    moe_from_nvfp4,
)
from jitmarlin.weights.moe import MoEWeight
from jitmarlin.weights.quant import E4M3, QuantizedWeight

from .config import QuantScheme

__all__ = ["MoEExperts", "RawBits", "layout", "convert", "group_experts", "ExpertStacker"]

IGNORED = ("input_scale", "input_global_scale")
# method -> (suffix that marks a quantized module, required parts, optional parts)
_PARTS = {
    "gptq": ("qweight", ("qweight", "scales"), ("qzeros", "g_idx")),
    "awq": ("qweight", ("qweight", "qzeros", "scales"), ()),
    "compressed-tensors": (
        "weight_packed",
        ("weight_packed", "weight_scale", "weight_shape"),
        ("weight_zero_point", "weight_g_idx"),
    ),
    "nvfp4-pack-quantized": (
        "weight_packed",
        ("weight_packed", "weight_scale", "weight_global_scale"),
        ("weight_shape", "input_global_scale"),
    ),
    "modelopt": ("weight_scale", ("weight", "weight_scale", "weight_scale_2"), ("input_scale",)),
    "mxfp4": (
        "gate_up_proj_blocks",
        ("gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"),
        ("gate_up_proj_bias", "down_proj_bias"),
    ),
}
_SCALE_PART = {"gptq": "scales", "awq": "scales", "compressed-tensors": "weight_scale"}
# expert projection names -> role (0 gate, 1 up, 2 down), one convention per block
CONVENTIONS = ({"gate_proj": 0, "up_proj": 1, "down_proj": 2}, {"w1": 0, "w3": 1, "w2": 2})
_EXPERT = re.compile(r"(?P<block>.+)\.experts\.(?P<e>0|[1-9][0-9]{0,5})\.(?P<proj>[^.]+)")
MAX_EXPERTS = 4096


class RawBits(np.ndarray):
    """The raw bit patterns of a tensor whose dtype NumPy lacks: uint16 for bfloat16, uint8 for
    float8_e4m3fn / float8_e5m2; `.stored_dtype` names the real dtype. Arithmetic on it is
    arithmetic on bit patterns: call `values()` (exact float32) or reinterpret the bits, e.g.
    torch.from_numpy(a.view(np.ndarray).view(np.int16)).view(torch.bfloat16)."""

    stored_dtype: str | None

    def __array_finalize__(self, obj):
        self.stored_dtype = getattr(obj, "stored_dtype", None)

    def values(self) -> np.ndarray:
        """Exact float32 values of the stored numbers."""
        b = self.view(np.ndarray)
        if self.stored_dtype == "bfloat16":
            return halves.from_bits(b, "bfloat16")
        if self.stored_dtype == "float8_e4m3fn":
            return E4M3[b.astype(np.int64)].astype(np.float32)
        if self.stored_dtype == "float8_e5m2":  # e5m2 is the high byte of a float16
            return (b.astype(np.uint16) << 8).view(np.float16).astype(np.float32)
        raise InputError(f"RawBits with unknown stored_dtype {self.stored_dtype!r}")


class MoEExperts(NamedTuple):
    """The routed experts of one MoE layer, stacked: w13 (gate and up, gated MoEWeight) and w2
    (down), as jitmarlin.moe and jitmarlin.torch.MarlinMoE take them."""

    w13: MoEWeight
    w2: MoEWeight


def layout(scheme: QuantScheme) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(marker, required parts, optional parts) of a quantized module under `scheme`."""
    if scheme.method == "compressed-tensors" and scheme.qtype == "nvfp4":
        return _PARTS["nvfp4-pack-quantized"]
    return _PARTS[scheme.method]


# ---- one module ----------------------------------------------------------------------------------


def _arg(a, module: str, part: str):
    """A tensor for a converter: bfloat16 bits -> exact float32 values; float8 refused."""
    if isinstance(a, RawBits):
        if a.stored_dtype != "bfloat16":
            raise InputError(f"{module}.{part}: dtype {a.stored_dtype} is not valid here")
        return a.values()
    return a


def _fp8_arg(a, module: str, part: str):
    """float8_e4m3fn scales as their bytes (uint8); bfloat16 as float32 values (then checked to be
    e4m3 numbers by the converter); e5m2 refused."""
    if isinstance(a, RawBits):
        if a.stored_dtype == "float8_e4m3fn":
            return a.view(np.ndarray)
        return _arg(a, module, part)
    return a


def _global(a, module: str, part: str) -> float:
    g = np.asarray(_arg(a, module, part))
    if g.dtype.kind != "f" or g.size != 1:
        raise InputError(
            f"{module}.{part} must be one floating-point number (a per-tensor scale), got {g.dtype} of shape {g.shape}"
        )
    v = float(g.reshape(-1)[0])
    if not np.isfinite(v) or v <= 0:
        raise InputError(f"{module}.{part} = {v!r}: a per-tensor scale must be finite and positive")
    return v


def nvfp4_spec(scheme: QuantScheme, module: str, p: dict) -> tuple:
    """(weight bytes, weight_scale, weight_scale_2 float64 (1,)) of an NVFP4 module, as from_nvfp4
    takes them (compressed-tensors' weight_global_scale inverted)."""
    if scheme.method == "modelopt":
        return (
            _arg(p["weight"], module, "weight"),
            _fp8_arg(p["weight_scale"], module, "weight_scale"),
            np.array([_global(p["weight_scale_2"], module, "weight_scale_2")]),
        )
    w = _arg(p["weight_packed"], module, "weight_packed")
    if "weight_shape" in p:
        shp = np.asarray(p["weight_shape"]).reshape(-1)
        rows, half = (np.shape(w) + (0, 0))[:2]
        if shp.dtype.kind not in "iu" or shp.shape != (2,) or [int(shp[0]), int(shp[1])] != [int(rows), 2 * int(half)]:
            raise InputError(
                f"{module}.weight_shape = {shp.tolist()[:4]} does not match weight_packed of shape "
                f"{tuple(np.shape(w))} (two fp4 codes a byte: [rows, 2 * bytes per row])"
            )
    return (
        w,
        _fp8_arg(p["weight_scale"], module, "weight_scale"),
        np.array([1.0 / _global(p["weight_global_scale"], module, "weight_global_scale")]),
    )


def convert(scheme: QuantScheme, module: str, parts: dict) -> QuantizedWeight:
    """One quantized linear's tensors (RawBits as read) -> QuantizedWeight; InputError naming the
    module for anything the converter refuses."""
    p = {k: v for k, v in parts.items() if k not in IGNORED}
    try:
        if scheme.qtype == "nvfp4":
            return from_nvfp4(*nvfp4_spec(scheme, module, p))
        s = p[_SCALE_PART[scheme.method]]
        sdt = "bfloat16" if isinstance(s, RawBits) and s.stored_dtype == "bfloat16" else None
        p = {k: _arg(v, module, k) for k, v in p.items()}
        if scheme.method == "gptq":
            if not scheme.sym and "qzeros" not in p:
                raise InputError("asymmetric GPTQ (sym=false) needs qzeros")
            qw = from_gptq(
                p["qweight"],
                p.get("qzeros"),
                p["scales"],
                p.get("g_idx"),
                bits=scheme.bits,
                sym=scheme.sym,
                checkpoint_format=scheme.checkpoint_format,
                group_size=scheme.group_size,
                scale_dtype=sdt,
            )
        elif scheme.method == "awq":
            qw = from_awq(p["qweight"], p["qzeros"], p["scales"], group_size=scheme.group_size, scale_dtype=sdt)
        elif scheme.method == "compressed-tensors":
            qw = from_compressed_tensors(
                p["weight_packed"],
                p["weight_scale"],
                p["weight_shape"],
                p.get("weight_zero_point"),
                p.get("weight_g_idx"),
                num_bits=scheme.bits,
                group_size=scheme.group_size,
                scale_dtype=sdt,
            )
            if scheme.sym and qw.offsets is not None:
                raise InputError("the config says symmetric but weight_zero_point holds non-zero zero points")
        else:
            raise InputError(f"method {scheme.method!r} stores no single quantized linears")
    except (InputError, UnsupportedError) as e:
        raise type(e)(f"{module} ({scheme.method}): {e}") from None
    return qw


def convert_gpt_oss(module: str, parts: dict) -> MoEExperts:
    """A gpt-oss `<block>.experts` module's MXFP4 tensors -> MoEExperts (bf16 scales, biases float32)."""
    p = {k: _arg(v, module, k) for k, v in parts.items()}
    try:
        w13, w2 = moe_from_gpt_oss(
            p["gate_up_proj_blocks"],
            p["gate_up_proj_scales"],
            p.get("gate_up_proj_bias"),
            p["down_proj_blocks"],
            p["down_proj_scales"],
            p.get("down_proj_bias"),
        )
    except (InputError, UnsupportedError) as e:
        raise type(e)(f"{module} (mxfp4): {e}") from None
    return MoEExperts(w13, w2)


# ---- experts -------------------------------------------------------------------------------------


@dataclass
class ExpertBlock:
    """The quantized experts of one MoE layer `block` (`<block>.experts.<e>.<proj>` modules)."""

    block: str
    num_experts: int
    roles: dict  # module name -> (expert, role: 0 gate, 1 up, 2 down)
    got: dict = field(default_factory=dict)  # (expert, role) -> converted weight or NVFP4 spec


def expert_of(module: str):
    """(block, expert index, projection) of `<block>.experts.<e>.<proj>`, else None."""
    m = _EXPERT.fullmatch(module)
    return None if m is None else (m["block"], int(m["e"]), m["proj"])


def group_experts(modules) -> dict[str, ExpertBlock]:
    """The quantized modules that are experts, grouped by MoE layer: {block: ExpertBlock}.
    InputError naming the module when a block mixes projection names, or lacks one projection
    of one expert of 0..E-1."""
    found: dict[str, dict] = {}
    for mod in modules:
        hit = expert_of(mod)
        if hit is not None:
            found.setdefault(hit[0], {})[mod] = hit[1:]
    blocks = {}
    for block, members in found.items():
        projs = {p for _, p in members.values()}
        conv = next((c for c in CONVENTIONS if projs <= c.keys()), None)
        if conv is None:
            names = " / ".join(", ".join(c) for c in CONVENTIONS)
            raise InputError(
                f"{block}.experts: expert projections {sorted(projs)[:6]} are not one of the known sets ({names})"
            )
        count = 1 + max(e for e, _ in members.values())
        if count > MAX_EXPERTS:
            raise InputError(f"{block}.experts: expert index {count - 1} exceeds {MAX_EXPERTS - 1}")
        have = {(e, conv[p]) for e, p in members.values()}
        names = {r: p for p, r in conv.items()}
        missing = [f"{block}.experts.{e}.{names[r]}" for e in range(count) for r in range(3) if (e, r) not in have]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise InputError(
                f"{block}.experts: the checkpoint quantizes {count} experts but lacks {len(missing)} "
                f"expert module(s): {shown}"
            )
        blocks[block] = ExpertBlock(block, count, {m: (e, conv[p]) for m, (e, p) in members.items()})
    return blocks


class ExpertStacker:
    """Converts expert modules as their tensors complete and stacks each MoE layer once all of its
    experts are in: add() returns (`<block>.experts`, MoEExperts) then, else None."""

    def __init__(self, blocks: dict[str, ExpertBlock], scheme: QuantScheme):
        self.scheme = scheme
        self.owner = {m: b for b in blocks.values() for m in b.roles}

    def __contains__(self, module: str) -> bool:
        return module in self.owner

    def add(self, module: str, parts: dict):
        b = self.owner[module]
        key = b.roles[module]
        if self.scheme.qtype == "nvfp4":
            p = {k: v for k, v in parts.items() if k not in IGNORED}
            b.got[key] = nvfp4_spec(self.scheme, module, p)
        else:
            b.got[key] = convert(self.scheme, module, parts)
        if len(b.got) < 3 * b.num_experts:
            return None
        lists = [[b.got[(e, r)] for e in range(b.num_experts)] for r in range(3)]
        b.got = {}
        name = b.block + ".experts"
        try:
            if self.scheme.qtype == "nvfp4":
                w13, w2 = moe_from_nvfp4(*lists, round_scales=True)
            else:
                w13, w2 = moe_from_experts(*lists)
        except (InputError, UnsupportedError) as e:
            raise type(e)(f"{name} ({self.scheme.method}): {e}") from None
        return name, MoEExperts(w13, w2)
