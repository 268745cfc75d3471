"""compressed-tensors "pack-quantized" checkpoints (llm-compressor; vLLM's compressed_tensors
WNA16 scheme)."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.weights.quant import QuantizedWeight

from ._common import finish_grouped, floats, ints, unpack_words, words


def from_compressed_tensors(
    weight_packed,
    weight_scale,
    weight_shape,
    weight_zero_point=None,
    weight_g_idx=None,
    num_bits: int = 4,
    *,
    group_size: int | None = None,
    scale_dtype: str | None = None,
) -> QuantizedWeight:
    """Convert one compressed-tensors "pack-quantized" linear layer (int4 / int8 weights).

    Source layout (N, K = weight_shape, p = 32 / num_bits):
      weight_packed     int32 (N, ceil(K / p)): packed along K, low bits first (code of column
                        p*c + i in bits [num_bits*i, num_bits*(i+1)) of word c), zero-padded at
                        the end of each row; every code is stored unsigned, u = q + 2^(bits-1),
                        q the signed quantized value in [-2^(bits-1), 2^(bits-1));
      weight_scale      (N, G) (transposed relative to GPTQ), float16 / bfloat16 / float32;
                        (N, 1) for the channel strategy, one element for the tensor strategy;
      weight_zero_point asymmetric schemes only, in either form:
                        packed: int32 (ceil(N / p), G), packed along N, low bits first, stored
                                unsigned like the weights (compressed-tensors >= 0.9);
                        plain:  (N, G) signed integers in [-2^(bits-1), 2^(bits-1)) (earlier
                                releases, and the tensor strategy);
      weight_g_idx      int32 (K,): act-order group of each column (all -1: not set).
    Dequantisation:  w[n, k] = (q[n, k] - zp[n, g]) * weight_scale[n, g],  g = g_idx[k] (or
      k // group_size); in stored (unsigned) terms (u - (zp + 2^(bits-1))) * scale.
    Symmetric (no zero point, or all zero points 0) -> uint4b8 / uint8b128; asymmetric ->
    uint4 / uint8.
    Scales keep their dtype where it is bf16 (else fp16), unless `scale_dtype` says otherwise.
    """
    if num_bits not in (4, 8):
        if num_bits in (2, 3):
            raise UnsupportedError(f"{num_bits}-bit weights have no kernel quant type (4- and 8-bit only)")
        raise InputError(f"num_bits must be 4 or 8, got {num_bits}")
    per = 32 // num_bits
    half = 1 << (num_bits - 1)
    shp = ints(weight_shape, "weight_shape").reshape(-1)
    if shp.shape != (2,):
        raise InputError(f"weight_shape must be [out_features, in_features], got {shp.tolist()}")
    n, k = int(shp[0]), int(shp[1])
    wp = words(weight_packed, "weight_packed")
    if wp.shape != (n, -(-k // per)):
        raise InputError(
            f"weight_packed must be int32 (out_features={n}, ceil(in_features/{per})="
            f"{-(-k // per)}) for weight_shape {[n, k]} and num_bits={num_bits}, "
            f"got {tuple(wp.shape)}"
        )
    codes = unpack_words(wp, num_bits, axis=1)[:, :k]  # (N, K), unsigned

    s = floats(weight_scale, "weight_scale")
    if s.size == 1:  # tensor strategy
        s = np.full((n, 1), s.reshape(-1)[0])
    elif s.ndim == 1 and s.shape[0] == n:
        s = s[:, None]
    if s.ndim != 2 or s.shape[0] != n:
        raise InputError(f"weight_scale must be (out_features={n}, groups), got {tuple(s.shape)}")
    g = s.shape[1]
    s = s.T  # (G, N)

    zeros = None
    if weight_zero_point is not None:
        zp = ints(weight_zero_point, "weight_zero_point")
        if zp.size == 1:
            zp = np.full((n, g), zp.reshape(-1)[0])
        if zp.ndim == 1 and g == 1 and zp.shape[0] == n:
            zp = zp[:, None]
        if zp.shape == (n, g):  # plain, signed
            if zp.min() < -half or zp.max() >= half:
                raise InputError(f"weight_zero_point (plain, signed) must lie in [{-half}, {half - 1}]")
            zeros = (zp + half).T
        elif zp.shape == (-(-n // per), g):  # packed along N, unsigned
            zeros = unpack_words(words(zp, "weight_zero_point"), num_bits, axis=0)[:n].T
        else:
            raise InputError(
                f"weight_zero_point must be (out_features={n}, groups={g}) or packed "
                f"int32 ({-(-n // per)}, {g}), got {tuple(zp.shape)}"
            )
    if zeros is not None and np.all(zeros == half):
        zeros = None  # all zero points symmetric: same weights
    qtype = {(4, False): "uint4b8", (4, True): "uint4", (8, False): "uint8b128", (8, True): "uint8"}[
        (num_bits, zeros is not None)
    ]

    gi_raw = None if weight_g_idx is None else ints(weight_g_idx, "weight_g_idx").reshape(-1)
    if gi_raw is not None and np.all(gi_raw == -1):
        gi_raw = None
    return finish_grouped(qtype, codes, s, zeros, k, g, group_size, gi_raw, scale_dtype, weight_scale, "weight_scale")
