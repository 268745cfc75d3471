"""AWQ checkpoints (AutoAWQ "GEMM" version, as loaded by vLLM's awq / awq_marlin)."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.weights.quant import QuantizedWeight, from_codes

from ._common import check_fits, floats, group_size_of, pick_scale_dtype, regroup, unpack_words, words

# AutoAWQ packs the 8 columns 8c..8c+7 of an int32 so that nibble i (bits 4i..4i+3) holds
# column 8c + AWQ_ORDER[i] (WQLinear_GEMM.from_linear's order_map); column 8c + j therefore
# sits in nibble AWQ_REVERSE_ORDER[j] (the argsort of AWQ_ORDER).
AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])
AWQ_REVERSE_ORDER = np.argsort(AWQ_ORDER)  # [0, 4, 1, 5, 2, 6, 3, 7]


def _unpack_awq(w: np.ndarray) -> np.ndarray:
    """uint32 (R, C) -> int64 (R, 8C) codes in column order."""
    raw = unpack_words(w, 4, axis=1)  # nibble order
    r, c8 = raw.shape
    return raw.reshape(r, c8 // 8, 8)[:, :, AWQ_REVERSE_ORDER].reshape(r, c8)


def from_awq(
    qweight, qzeros, scales, *, group_size: int | None = None, scale_dtype: str | None = None
) -> QuantizedWeight:
    """Convert one AutoAWQ GEMM-layout linear layer (4-bit, zero points).

    Source layout (K = in_features, N = out_features, G groups):
      qweight int32 (K, N / 8): packed along N, eight 4-bit codes per int32, interleaved:
              nibble i (bits 4i..4i+3) of word c holds column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i];
      qzeros  int32 (G, N / 8): same packing;
      scales  float16 (G, N).
    Dequantisation:  w[n, k] = (q[k, n] - z[k // group_size, n]) * scales[k // group_size, n].
    -> uint4 with integer zero points. group_size = K / G (-1 for G == 1) unless given.
    """
    qw = words(qweight, "qweight")
    k, n = qw.shape[0], qw.shape[1] * 8
    s = floats(scales, "scales")
    if s.ndim != 2 or s.shape[1] != n:
        raise InputError(
            f"scales must be (groups, out_features={n}) to match qweight "
            f"{tuple(qw.shape)} (K, N/8), got {tuple(s.shape)}"
        )
    g = s.shape[0]
    qz = words(qzeros, "qzeros")
    if qz.shape != (g, n // 8):
        raise InputError(f"qzeros must be (groups={g}, out_features/8={n // 8}) int32, got {tuple(qz.shape)}")
    codes = _unpack_awq(qw).T  # (N, K)
    zeros = _unpack_awq(qz)  # (G, N)
    gs = group_size_of(k, g, group_size)
    sdt = pick_scale_dtype(scale_dtype, scales)
    check_fits(s, sdt, "scales")
    gs, s, (zeros,), _ = regroup(gs, k, s, [zeros], None)
    return from_codes("uint4", codes, s, gs, zeros=zeros, scale_dtype=sdt)
