"""Quant types (vLLM's spelling) and activation dtypes, as frozen values."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from jitmarlin.errors import InputError


@dataclass(frozen=True)
class QuantType:
    """A weight number format.

    name: vLLM's name for it. bits: storage bits per weight. kind: "int" or "float".
    bias: the implicit offset of symmetric integer types (stored q, weight = (q - bias) * scale),
    None where the type carries explicit zero points or is a float format.
    fixed_group: formats whose scale group is part of the format (nvfp4: 16, mxfp4: 32).
    """

    name: str
    bits: int
    kind: str
    bias: int | None = None
    zero_points: bool = False
    fixed_group: int | None = None


QTYPES: dict[str, QuantType] = {
    q.name: q
    for q in (
        QuantType("uint4b8", 4, "int", bias=8),
        QuantType("uint4", 4, "int", zero_points=True),
        QuantType("uint8b128", 8, "int", bias=128),
        QuantType("uint8", 8, "int", zero_points=True),
        QuantType("float8_e4m3fn", 8, "float"),
        QuantType("nvfp4", 4, "float", fixed_group=16),
        QuantType("mxfp4", 4, "float", fixed_group=32),
    )
}

# Activation dtypes: name -> (short tag used in kernel names, element bytes).
ACT_DTYPES = {"float16": "f16", "bfloat16": "bf16"}

GROUP_SIZES = (-1, 32, 64, 128)

# The one shape rule (linear, quantize, from_codes, inspect and prewarm all apply it): a layer's
# out_features and in_features must be positive multiples of FEATURE_MULTIPLE, so each row of x
# and of the output is a whole number of 16-byte (8 half) vectors. The weight itself is padded
# to the kernel's dims (kernel_dims: multiples of TILE, K also to whole groups), and the
# planner only ever sees those padded dims.
FEATURE_MULTIPLE = 8
TILE = 64


def shape_problem(out_features, in_features) -> str | None:
    """Why a layer of (out_features, in_features) cannot be quantized or run (None if it can)."""
    if all(_is_int(v) and v > 0 and v % FEATURE_MULTIPLE == 0 for v in (out_features, in_features)):
        return None
    return (
        f"out_features (N) and in_features (K) must be positive multiples of {FEATURE_MULTIPLE} "
        f"(16-byte rows), got N={out_features} K={in_features}"
    )


def check_shape(out_features, in_features) -> None:
    """Raise InputError with shape_problem's message."""
    why = shape_problem(out_features, in_features)
    if why:
        raise InputError(why)


def kernel_dims(out_features: int, in_features: int, group_size: int) -> tuple[int, int]:
    """(n, k) the kernel runs for a layer: N padded to a multiple of TILE, K to a multiple of
    TILE and of group_size (-1: per channel). The padding never reaches the output."""
    n = -(-out_features // TILE) * TILE
    step = TILE if group_size <= 0 else math.lcm(TILE, group_size)
    return n, -(-in_features // step) * step


def _is_int(v) -> bool:
    """An int or NumPy integer (not a bool, float or string)."""
    if isinstance(v, bool):
        return False
    try:
        operator.index(v)
    except TypeError:
        return False
    return True


def check_group(qtype: str, group_size) -> int:
    """`group_size` as an int after checking it is one `qtype` takes: GROUP_SIZES (or 16) for
    integer and fp8 types, exactly the format's group for nvfp4 (16) and mxfp4 (32)."""
    q = get_qtype(qtype)
    if not _is_int(group_size):  # ints and NumPy integers; never "128" or 128.0
        raise InputError(
            f"group_size must be an int (one of {GROUP_SIZES}, or 16), got {type(group_size).__name__} {group_size!r}"
        )
    g = operator.index(group_size)
    if q.fixed_group:
        if g != q.fixed_group:
            raise InputError(f"{qtype} uses groups of {q.fixed_group} (part of the format), got group_size={g}")
        return g
    if g not in GROUP_SIZES + (16,):
        raise InputError(f"group_size must be one of {GROUP_SIZES} (or 16), got {g}")
    return g


def get_qtype(name: str) -> QuantType:
    try:
        return QTYPES[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown quant type {name!r}; known: {', '.join(QTYPES)}") from None


def normalize_act(dtype) -> str:
    """Map a dtype-like (numpy/cupy/torch dtype or string) to 'float16' or 'bfloat16'."""
    s = str(dtype).replace("torch.", "")
    if s in ("float16", "half", "f16", "<f2"):
        return "float16"
    if s in ("bfloat16", "bf16"):
        return "bfloat16"
    raise InputError(f"activation dtype must be float16 or bfloat16, got {dtype}")
