"""OCP microscaling MXFP4 weights (gpt-oss "blocks" / "scales" checkpoints)."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.weights.quant import QuantizedWeight, from_codes

from ._common import check_fits, ints, pick_scale_dtype
from .nvfp4 import fp4_bytes, unpack_fp4


def from_mxfp4(blocks, scales, *, scale_dtype: str = "bfloat16") -> QuantizedWeight:
    """Convert one MXFP4 weight (OCP MX v1.0: e2m1 elements, blocks of 32, e8m0 scales), as in
    gpt-oss checkpoints (`*.blocks`, `*.scales`; slice one expert out of the MoE tensors).

    Source layout (N = out_features, K = in_features):
      blocks uint8 (N, K / 32, 16) (or (N, K / 2)): two e2m1 codes per byte, element 2i in the
             low nibble, 2i + 1 in the high nibble of byte i of the block;
      scales uint8 (N, K / 32): e8m0 exponents, scale = 2^(e - 127) (255 is NaN: rejected).
    Dequantisation:  w[n, k] = e2m1(q[n, k]) * 2^(scales[n, k // 32] - 127).
    -> mxfp4 (exact). Scales are stored as bfloat16 by default: float16 holds only
    2^-24 .. 2^15 (scale_dtype="float16" raises for exponents outside that range).
    """
    b = fp4_bytes(blocks, "blocks")
    if b.ndim == 3:
        if b.shape[2] != 16:
            raise InputError(f"blocks must be (out_features, in_features/32, 16), got {tuple(b.shape)}")
        b = b.reshape(b.shape[0], -1)
    if b.ndim != 2:
        raise InputError(f"blocks must be (out_features, in_features/32, 16) uint8, got {tuple(b.shape)}")
    n, k = b.shape[0], 2 * b.shape[1]
    e = ints(scales, "scales")
    if e.shape != (n, k // 32) or k % 32:
        raise InputError(
            f"scales must be uint8 (out_features={n}, in_features/32={k / 32:g}) for blocks "
            f"of {k} inputs, got {tuple(e.shape)}"
        )
    if e.size and (e.min() < 0 or e.max() > 254):
        raise InputError("scales must be e8m0 exponents in [0, 254] (255 is NaN)")
    s = np.ldexp(1.0, e - 127)
    sdt = pick_scale_dtype(scale_dtype, None)
    check_fits(s, sdt, "scales (2^(e - 127))")
    return from_codes("mxfp4", unpack_fp4(b), s.T, 32, scale_dtype=sdt)
