"""NVIDIA ModelOpt NVFP4 checkpoints (quant_algo "NVFP4")."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.jit.arrays import is_torch
from jitmarlin.weights.quant import QuantizedWeight, from_codes

from ._common import dtype_name, e4m3_values, floats, host, pick_scale_dtype


def fp4_bytes(a, name: str) -> np.ndarray:
    """Packed e2m1 pairs as uint8 (torch uint8 or float4_e2m1fn_x2, NumPy / CuPy uint8)."""
    if is_torch(a) and dtype_name(a) not in ("uint8", "int8"):
        if not dtype_name(a).startswith("float4"):
            raise InputError(f"{name} must be uint8 (two e2m1 codes per byte), got {dtype_name(a)}")
    h = host(a, name)
    if h.dtype not in (np.uint8, np.int8):
        raise InputError(f"{name} must be uint8 (two e2m1 codes per byte), got {h.dtype}")
    return h.view(np.uint8)


def unpack_fp4(b: np.ndarray) -> np.ndarray:
    """(..., m) bytes -> (..., 2m) e2m1 codes, element 2i in the low nibble of byte i."""
    return np.stack([b & 0xF, b >> 4], axis=-1).reshape(*b.shape[:-1], 2 * b.shape[-1]).astype(np.int64)


def from_nvfp4(weight, weight_scale, weight_scale_2, *, scale_dtype: str | None = None) -> QuantizedWeight:
    """Convert one ModelOpt NVFP4 linear layer.

    Source layout (N = out_features, K = in_features):
      weight         uint8 (N, K / 2): two e2m1 codes per byte, element 2i in the low nibble
                     and 2i + 1 in the high nibble of byte i (torch float4_e2m1fn_x2 accepted);
      weight_scale   float8_e4m3fn (N, K / 16), one scale per 16 inputs, linear (unswizzled)
                     layout; a torch float8_e4m3fn tensor or its bytes as uint8;
      weight_scale_2 float32 scalar: the per-tensor (global) scale.
    Dequantisation:  w[n, k] = e2m1(q[n, k]) * weight_scale[n, k // 16] * weight_scale_2.
    -> nvfp4: scales as their e4m3 values (exact in fp16 and bf16), global_scale =
    weight_scale_2. For fused layers (q/k/v) whose shards carry different weight_scale_2,
    convert each shard separately.
    """
    w = fp4_bytes(weight, "weight")
    if w.ndim != 2:
        raise InputError(f"weight must be 2-D (out_features, in_features / 2), got {tuple(w.shape)}")
    n, k = w.shape[0], 2 * w.shape[1]
    s = e4m3_values(weight_scale, "weight_scale")
    if s.shape != (n, k // 16) or k % 16:
        raise InputError(
            f"weight_scale must be (out_features={n}, in_features/16={k / 16:g}) for weight "
            f"{tuple(w.shape)}, got {tuple(s.shape)}"
        )
    gs2 = floats(weight_scale_2, "weight_scale_2").reshape(-1)
    if gs2.size != 1:
        raise InputError(
            f"weight_scale_2 must be one float32 (per-tensor scale), got {gs2.size} values: "
            "convert each shard of a fused layer separately"
        )
    sdt = pick_scale_dtype(scale_dtype, None)
    return from_codes("nvfp4", unpack_fp4(w), s.T, 16, global_scale=float(gs2[0]), scale_dtype=sdt)
