"""HQQ checkpoints (mobiusml/hqq HQQLinear: W_q plus its meta dict)."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.arrays import is_torch
from jitmarlin.weights.quant import QuantizedWeight, from_codes

from ._common import check_fits, dtype_name, floats, host, pick_scale_dtype, regroup


def _bytes(w_q) -> np.ndarray:
    """W_q as uint8 (HQQ may store it viewed as the compute dtype: view_as_float)."""
    if is_torch(w_q) and dtype_name(w_q) != "uint8":
        import torch

        w_q = w_q.detach().cpu().contiguous().view(torch.uint8)
    h = host(w_q, "W_q")
    if h.dtype != np.uint8:
        if h.dtype.kind not in "fiu":
            raise InputError(f"W_q must be uint8, got {h.dtype}")
        h = np.ascontiguousarray(h).view(np.uint8)
    return h


def from_hqq(
    W_q,
    scale=None,
    zero=None,
    meta=None,
    *,  # noqa: N803 (HQQ's own name)
    scale_dtype: str | None = None,
) -> QuantizedWeight:
    """Convert one HQQ-quantized linear weight (HQQLinear.W_q and HQQLinear.meta).

    meta: 'shape' (N, K), 'nbits' (4 or 8), 'group_size' (int, or None for one group per
    row), 'axis' (only 1: groups along K), optionally 'packing', 'view_as_float'.
    scale / zero default to meta['scale'] / meta['zero'] (dequantize them first if the
    checkpoint quantized them: meta['quant_scale'] / meta['quant_zero']).
    Source layout with axis=1 (R = N * K / group_size groups, row r = n * (K / group_size) + g):
      the weight W (N, K) is viewed as (R, group_size), quantized to codes Q (R, group_size);
      "4bit_u8" packs rows: W_q uint8 (R / 2, group_size), W_q = (Q[:R/2] << 4) | Q[R/2:]
      (first half of the rows in the high nibble); "8bit_u8" stores Q as it is;
      scale, zero: float (R, 1) (float zero points).
    Dequantisation:  W = ((Q - zero) * scale).reshape(N, K).
    -> uint4 / uint8 with float zero points (each offset (bias - zero) * scale is rounded to
    the scale dtype: within half an ulp). axis=0 (groups strided across rows) has no mapping
    onto per-output-column scales and raises UnsupportedError.
    """
    if meta is None:
        raise InputError("meta (the HQQ meta dict) is required")
    try:
        n, k = (int(v) for v in meta["shape"])
        nbits = meta["nbits"]
        axis = int(meta.get("axis", 1))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"meta must hold 'shape' (N, K), 'nbits' and 'axis': {e}") from None
    gs = meta.get("group_size")
    if axis != 1:
        raise UnsupportedError(
            "HQQ axis=0 groups run across output rows (W.reshape(group_size, -1)); "
            "only axis=1 (groups along in_features) maps onto the kernel's scales"
        )
    if nbits not in (4, 8):
        raise UnsupportedError(f"HQQ nbits={nbits} has no kernel quant type (4 and 8 only)")
    packing = meta.get("packing", "4bit_u8" if nbits == 4 else "8bit_u8")
    want_packing = "4bit_u8" if nbits == 4 else "8bit_u8"
    if packing != want_packing:
        raise UnsupportedError(f"HQQ packing {packing!r} is not supported for nbits={nbits} (want {want_packing!r})")
    if meta.get("quant_scale") and scale is None or meta.get("quant_zero") and zero is None:
        raise UnsupportedError(
            "meta holds quantized scale / zero (quant_scale / quant_zero): dequantize them and pass scale= and zero="
        )
    scale = meta.get("scale") if scale is None else scale
    zero = meta.get("zero") if zero is None else zero
    if gs is None:
        gs = k
    gs = int(gs)
    if gs <= 0 or k % gs:
        raise UnsupportedError(f"HQQ group_size={gs} does not divide in_features={k}: groups would straddle rows")
    g = k // gs
    rows = n * g

    wq = _bytes(W_q)
    if nbits == 4:
        if wq.size * 2 != n * k or rows % 2:
            raise InputError(
                f"W_q must hold N*K/2 = {n * k // 2} bytes ({rows // 2} x {gs}) for shape "
                f"{(n, k)}, group_size {gs}, got {tuple(wq.shape)}"
            )
        wq = wq.reshape(rows // 2, gs)
        q = np.concatenate([wq >> 4, wq & 0xF], axis=0)  # (R, gs)
    else:
        if wq.size != n * k:
            raise InputError(f"W_q must hold N*K = {n * k} bytes for shape {(n, k)}, got {tuple(wq.shape)}")
        q = wq.reshape(rows, gs)
    codes = q.reshape(n, k).astype(np.int64)

    s = floats(scale, "scale")
    z = floats(zero, "zero")
    for name, a in (("scale", s), ("zero", z)):
        if a.size not in (1, rows):
            raise InputError(f"{name} must have N*K/group_size = {rows} entries ({rows}, 1), got {tuple(a.shape)}")
    s = np.broadcast_to(s.reshape(-1), (rows,)).reshape(n, g).T  # (G, N)
    z = np.broadcast_to(z.reshape(-1), (rows,)).reshape(n, g).T
    sdt = pick_scale_dtype(scale_dtype, scale)
    check_fits(s, sdt, "scale")
    gsz = -1 if g == 1 else gs
    gsz, s, (z,), _ = regroup(gsz, k, s, [z], None)
    return from_codes("uint4" if nbits == 4 else "uint8", codes, s, gsz, zeros=z, scale_dtype=sdt)
