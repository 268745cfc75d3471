"""GPTQ checkpoints (AutoGPTQ / GPTQModel "gptq" and "gptq_v2" formats)."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.weights.quant import QuantizedWeight

from ._common import finish_grouped, floats, ints, unpack_words, words


def from_gptq(
    qweight,
    qzeros,
    scales,
    g_idx=None,
    bits: int = 4,
    sym: bool = True,
    checkpoint_format: str = "gptq",
    *,
    group_size: int | None = None,
    scale_dtype: str | None = None,
) -> QuantizedWeight:
    """Convert one GPTQ linear layer (AutoGPTQ / GPTQModel / Optimum checkpoint tensors).

    Source layout (K = in_features, N = out_features, p = 32 / bits codes per int32):
      qweight  int32 (K / p, N): packed along K, low bits first (code of input row p*r + i
               in bits [bits*i, bits*(i+1)) of word r);
      qzeros   int32 (G, N / p): packed along N, low bits first;
      scales   float16 (G, N);
      g_idx    int32 (K,): group of each input row. arange(K) // group_size (or absent) is
               plain grouping; any other assignment with group_size rows per group is
               act-order (desc_act) and is kept as a column permutation.
    Dequantisation:  w[n, k] = (q[k, n] - z[g_idx[k], n]) * scales[g_idx[k], n],
      with z = stored zero + 1 for checkpoint_format "gptq" (v1 stores zero - 1), and
      z = stored zero for "gptq_v2".
    sym=True  -> uint4b8 / uint8b128 (z = 2^(bits-1) implied; qzeros, if given, must hold that
                 symmetric value: stored 7 / 127 for v1, 8 / 128 for v2).
    sym=False -> uint4 / uint8 with the integer zero points.
    group_size: G == 1 means per-channel (-1); otherwise it is taken from g_idx (the rows of
    group 0) or K / G; pass it for a checkpoint with a partial last group and no g_idx.
    Group sizes that are multiples of a kernel group size (256, 1024, ...) are split into
    groups of 128 (64, 32, 16) with repeated scales: exact. Scales are stored as fp16 (or as
    bf16 when they arrive as bf16, or as `scale_dtype`).
    """
    if bits in (2, 3):
        raise UnsupportedError(f"{bits}-bit GPTQ has no kernel quant type (4- and 8-bit only)")
    if bits not in (4, 8):
        raise InputError(f"bits must be 4 or 8, got {bits}")
    if checkpoint_format not in ("gptq", "gptq_v2"):
        raise InputError(f"checkpoint_format must be 'gptq' or 'gptq_v2', got {checkpoint_format!r}")
    per = 32 // bits
    qw = words(qweight, "qweight")
    k, n = qw.shape[0] * per, qw.shape[1]
    s = floats(scales, "scales")
    if s.ndim != 2 or s.shape[1] != n:
        raise InputError(
            f"scales must be (groups, out_features={n}) to match qweight {tuple(qw.shape)}, got {tuple(s.shape)}"
        )
    g = s.shape[0]
    codes = unpack_words(qw, bits, axis=0).T  # (N, K)

    z = None
    if qzeros is not None:
        qz = words(qzeros, "qzeros")
        if qz.shape != (g, n // per) or n % per:
            raise InputError(
                f"qzeros must be (groups={g}, out_features*bits/32={n * bits / 32:g}) int32, got {tuple(qz.shape)}"
            )
        z = unpack_words(qz, bits, axis=1)  # (G, N), as stored
        if checkpoint_format == "gptq":
            z = z + 1
    half = 1 << (bits - 1)
    if sym:
        if z is not None and np.any(z != half):
            raise InputError(
                f"sym=True but qzeros do not hold the symmetric zero point {half} "
                f"(stored {half - 1 if checkpoint_format == 'gptq' else half}); "
                "pass sym=False for an asymmetric checkpoint, or check checkpoint_format"
            )
        qtype, zeros = ("uint4b8" if bits == 4 else "uint8b128"), None
    else:
        if z is None:
            raise InputError("sym=False needs qzeros")
        qtype, zeros = ("uint4" if bits == 4 else "uint8"), z

    gi_raw = None if g_idx is None else ints(g_idx, "g_idx").reshape(-1)
    return finish_grouped(qtype, codes, s, zeros, k, g, group_size, gi_raw, scale_dtype, scales, "scales")
