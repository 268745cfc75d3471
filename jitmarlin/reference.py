"""The NumPy oracle: dequantize, then matmul in float64."""
from __future__ import annotations

import numpy as np

from .arrays import to_host
from .quant import QuantizedWeight, dequantize


def linear_reference(x, qw: QuantizedWeight, bias=None, act: str | None = None) -> np.ndarray:
    """x (..., K) @ dequantize(qw).T (+ bias) in float64. Returns float64 (..., N)."""
    xh = np.asarray(to_host(x), dtype=np.float64)
    w = dequantize(qw, act).astype(np.float64)
    out = xh @ w.T
    if bias is not None:
        out = out + np.asarray(to_host(bias), dtype=np.float64)
    return out


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| (Frobenius), with NaN/Inf in `out` reported as inf."""
    o = np.asarray(to_host(out), dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(o)):
        return float("inf")
    return float(np.linalg.norm(o - r) / max(np.linalg.norm(r), 1e-30))
