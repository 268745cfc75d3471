"""float16 / bfloat16 bit patterns on the host (NumPy has no bfloat16; patterns are uint16)."""

from __future__ import annotations

import numpy as np


def to_bits(x, dtype: str) -> np.ndarray:
    """Round float values to `dtype` ('float16' or 'bfloat16'); return uint16 bit patterns."""
    a = np.asarray(x, dtype=np.float32)
    if dtype == "float16":
        return a.astype(np.float16).view(np.uint16)
    if dtype == "bfloat16":
        u = a.view(np.uint32).astype(np.uint64)
        nan = np.isnan(a)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
        r[nan] = 0x7FC0
        return r
    raise ValueError(f"not a half dtype: {dtype}")


def from_bits(bits, dtype: str) -> np.ndarray:
    """uint16 bit patterns of `dtype` -> float32 values (exact)."""
    b = np.asarray(bits, dtype=np.uint16)
    if dtype == "float16":
        return b.view(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return (b.astype(np.uint32) << 16).view(np.float32)
    raise ValueError(f"not a half dtype: {dtype}")


def round_to(x, dtype: str) -> np.ndarray:
    """Values of `x` rounded to `dtype`, as float32."""
    return from_bits(to_bits(x, dtype), dtype)
