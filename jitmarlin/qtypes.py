"""Quant types (vLLM's spelling) and activation dtypes, as frozen values."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError


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


def get_qtype(name: str) -> QuantType:
    try:
        return QTYPES[name]
    except KeyError:
        raise InputError(
            f"unknown quant type {name!r}; known: {', '.join(QTYPES)}"
        ) from None


def normalize_act(dtype) -> str:
    """Map a dtype-like (numpy/cupy/torch dtype or string) to 'float16' or 'bfloat16'."""
    s = str(dtype).replace("torch.", "")
    if s in ("float16", "half", "f16", "<f2"):
        return "float16"
    if s in ("bfloat16", "bf16"):
        return "bfloat16"
    raise InputError(
        f"activation dtype must be float16 or bfloat16, got {dtype}"
    )
