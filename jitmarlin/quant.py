"""QuantizedWeight, the reference round-to-nearest quantizer, and the exact dequantizer.

`dequantize` is the oracle every converter and kernel test is checked against: it reads the
packed layout back, so it is exactly what the kernel computes with.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import halves, packing
from .arrays import to_host
from .errors import InputError, UnsupportedError
from .qtypes import GROUP_SIZES, get_qtype

QUANTIZE_QTYPES = ("uint4b8",)


@dataclass(eq=False)
class QuantizedWeight:
    """A weight of shape (n, k) = (out_features, in_features) in the kernel's layout.

    packed: int32 (k/16, 2n), layout `layout` (see jitmarlin.packing).
    scales: uint16 bit patterns of `scale_dtype`; (k/group_size, n) permuted for grouped
    quantization, (n,) in natural order for group_size -1.
    Device copies are made on first use on a device and kept (`to_device`).
    """

    qtype: str
    group_size: int
    n: int
    k: int
    packed: np.ndarray
    scales: np.ndarray
    scale_dtype: str = "float16"
    layout: str = packing.LAYOUT
    _device: dict = field(default_factory=dict, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales.nbytes

    def scales_for(self, act: str) -> np.ndarray:
        """Scale bit patterns the kernel uses with `act` activations (rounded if dtypes differ)."""
        if act == self.scale_dtype:
            return self.scales
        return halves.to_bits(halves.from_bits(self.scales, self.scale_dtype), act)

    def to_device(self, device: int, act: str):
        """CuPy copies (packed, scales in `act`) on GPU `device`, made once and cached."""
        key = (device, act)
        d = self._device.get(key)
        if d is None:
            import cupy as cp

            from .launch import private_stream

            s = private_stream(device)
            with cp.cuda.Device(device), s:
                packed = cp.ascontiguousarray(cp.asarray(self.packed))
                scales = cp.ascontiguousarray(cp.asarray(self.scales_for(act)))
            s.synchronize()
            d = (packed, scales)
            self._device[key] = d
        return d


def quantize(weight, qtype: str = "uint4b8", group_size: int = 128, *,
             scale_dtype: str = "float16") -> QuantizedWeight:
    """Round-to-nearest quantization of `weight` (n, k) (NumPy, CuPy or torch; any float dtype).

    uint4b8: symmetric, scale = max|w| / 7.5 per group of `group_size` along k (-1: one group per
    output channel), q = clip(round(w / scale) + 8, 0, 15). Scales are stored as `scale_dtype`.
    """
    q_t = get_qtype(qtype)
    if qtype not in QUANTIZE_QTYPES:
        raise UnsupportedError(f"quantize() implements {', '.join(QUANTIZE_QTYPES)}; got {qtype}")
    if group_size not in GROUP_SIZES:
        raise InputError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")
    if scale_dtype not in ("float16", "bfloat16"):
        raise InputError(f"scale_dtype must be float16 or bfloat16, got {scale_dtype}")
    w = np.asarray(to_host(weight), dtype=np.float64)
    if w.ndim != 2:
        raise InputError(f"weight must be 2-D (out_features, in_features), got shape {w.shape}")
    n, k = w.shape
    if n % 64 or k % 64:
        raise InputError(f"weight shape {w.shape}: out_features and in_features must be multiples of 64")
    gs = k if group_size == -1 else group_size
    if k % gs:
        raise InputError(f"in_features={k} is not a multiple of group_size={group_size}")
    if not np.all(np.isfinite(w)):
        raise InputError("weight contains NaN or Inf")
    g = w.reshape(n, k // gs, gs)
    absmax = np.abs(g).max(axis=2)                        # (n, G)
    scale = absmax / (2 ** (q_t.bits - 1) - 0.5)
    scale[scale == 0] = 1.0
    sbits = halves.to_bits(scale, scale_dtype)
    s = halves.from_bits(sbits, scale_dtype).astype(np.float64)
    s[s == 0] = np.finfo(np.float16).tiny                 # never divide by an underflowed scale
    q = np.clip(np.rint(g / s[:, :, None]) + q_t.bias, 0, 2 ** q_t.bits - 1).astype(np.uint8)
    q = q.reshape(n, k)
    packed = packing.pack_int4(q)
    sb = sbits.T.copy()                                    # (G, n)
    scales = packing.permute_scales(sb) if group_size != -1 else sb.reshape(n)
    return QuantizedWeight(qtype, group_size, n, k, packed, scales, scale_dtype)


def dequantize(qw: QuantizedWeight, act: str | None = None) -> np.ndarray:
    """Exact host-side inverse of the packed layout: float32 (n, k) weights.

    act: the activation dtype whose scale rounding to apply (default: the stored scale dtype).
    """
    q_t = get_qtype(qw.qtype)
    if q_t.bits != 4 or q_t.bias is None:
        raise UnsupportedError(f"dequantize() does not know {qw.qtype} yet")
    q = packing.unpack_int4(qw.packed, qw.n, qw.k).astype(np.float32) - q_t.bias
    sbits = qw.scales_for(act or qw.scale_dtype)
    if qw.group_size == -1:
        s = halves.from_bits(sbits, act or qw.scale_dtype)[:, None]
        return q * s
    s = halves.from_bits(packing.unpermute_scales(sbits), act or qw.scale_dtype)   # (G, n)
    s = np.repeat(s.T, qw.group_size, axis=1)                                          # (n, k)
    return q * s
