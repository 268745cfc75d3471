"""The NumPy oracle: dequantize, then matmul in float64; and the one output checker every
kernel-output test uses (tests and tools import this module, production code never does)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jitmarlin.jit.arrays import to_host
from jitmarlin.weights.quant import QuantizedWeight, dequantize


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


# ---- the checker ---------------------------------------------------------------------------------
#
# A correct kernel differs from the float64 oracle by roundings of the activation dtype (unit
# roundoff u): the output's own rounding (at most u * |out|), and, where a kernel rounds each
# dequantised weight (q - z) * s to fp16/bf16, a sum over K of those roundings: about
# 0.45 u * rms(row) a standard deviation for random data (measured on the CPU emulator; kernels
# that scale sums instead show none). Every element must satisfy
#     |out - ref| <= ATOL_U * u * rms(ref row) + RTOL_U * u * |ref|
# ATOL_U = 6 is ~13 such deviations: a correct kernel passes on 1e8-element outputs even with
# columns whose scales are twice the row's average, while an output off by 2.5% of its row's
# scale in bf16 (0.3% in fp16) fails: a dropped bias element, a wrong scale row, a stale partial
# sum. Non-finite outputs (buffers start NaN) fail as unwritten. The whole-matrix figure
# (||out - ref|| / ||ref|| <= 2e-3 fp16, 1e-2 bf16) is kept beside it.

UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}
REL_TOL = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5}
ATOL_U = 6.0
RTOL_U = 1.5

# The largest |out - ref| / bound seen per (family, dtype) in this process: the margin of the
# element-wise bound (tests/conftest.py prints it, and writes it to JITMARLIN_MARGINS_JSON).
MARGINS: dict[tuple[str, str], dict] = {}


@dataclass(frozen=True)
class CheckResult:
    rel: float          # ||out - ref|| / ||ref||
    ratio: float        # max over elements of |out - ref| / bound (<= 1 passes)
    row: int
    col: int
    expected: float
    got: float
    bound: float


def family_of(spec) -> str:
    """A kernel family name for margin reports: 'mma.sync-sm80', 'wgmma', 'gemv', 'dequant'..."""
    kind = type(spec).__name__
    path = getattr(spec, "path", "")
    if kind == "GemvSpec":
        return "gemv"
    if kind == "DequantSpec":
        return "dequant+cublas"
    if kind == "KernelSpec" and path == "sm90":
        return "wgmma"
    return f"mma.sync-{path}" if path else kind


def fails_check(out, ref, act: str, **kw) -> bool:
    """True where check_output would fail (for planted-bug tests: nothing is recorded)."""
    try:
        check_output(out, ref, act, record=False, **kw)
    except AssertionError:
        return True
    return False


def _host64(a) -> np.ndarray:
    return np.asarray(to_host(a), dtype=np.float64)


def element_bounds(ref: np.ndarray, act: str, *, atol_u: float = ATOL_U,
                   rtol_u: float = RTOL_U) -> np.ndarray:
    """The per-element bound for `ref` (float64, (..., N)) in activation dtype `act`."""
    u = UNIT_ROUNDOFF[act]
    r2 = ref.reshape(-1, ref.shape[-1]) if ref.ndim else ref.reshape(1, 1)
    row = np.sqrt(np.mean(r2 * r2, axis=1, keepdims=True))
    # a row of zeros (x row all zero) keeps a floor far below any real error's scale
    floor = 1e-6 * max(float(np.sqrt(np.mean(r2 * r2))), 1e-30)
    bound = atol_u * u * np.maximum(row, floor) + rtol_u * u * np.abs(r2)
    return bound.reshape(ref.shape)


def check_output(out, ref, act: str, *, what: str = "", seed=None, family: str | None = None,
                 spec=None, rel_tol: float | None = None, atol_u: float = ATOL_U,
                 rtol_u: float = RTOL_U, record: bool = True) -> CheckResult:
    """Assert that kernel output `out` (any array type, (..., N)) matches the float64 oracle `ref`:
    every element finite and within the element-wise bound, and the whole-matrix relative error
    within REL_TOL[act]. Raises AssertionError naming the worst element (row, column, expected,
    got), `what` and `seed`. Records the margin under `family` (or the family of `spec`) unless
    `record` is False (planted-bug runs)."""
    o = _host64(out)
    r = np.asarray(ref, dtype=np.float64)
    tag = " ".join(s for s in (what, getattr(spec, "name", ""), "" if seed is None else f"seed {seed}") if s)
    if o.shape != r.shape:
        raise AssertionError(f"{tag}: output shape {o.shape}, expected {r.shape}")
    o2 = o.reshape(-1, o.shape[-1]) if o.ndim else o.reshape(1, 1)
    r2 = r.reshape(o2.shape)
    margin = (MARGINS.setdefault((family or (family_of(spec) if spec is not None else "unlabelled"), act),
                                 {"ratio": 0.0, "rel": 0.0, "checks": 0}) if record else {})
    bad = ~np.isfinite(o2) & np.isfinite(r2)
    if bad.any():
        margin["ratio"] = float("inf")
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(f"{tag}: {int(bad.sum())} non-finite (unwritten?) output elements, "
                             f"first at row {i}, column {j}: expected {r2[i, j]:.6g}, got {o2[i, j]}")
    bound = element_bounds(r2, act, atol_u=atol_u, rtol_u=rtol_u)
    err = np.abs(o2 - r2)
    ratios = err / bound
    i, j = (int(v) for v in np.unravel_index(int(np.argmax(ratios)), ratios.shape))
    res = CheckResult(rel=float(np.linalg.norm(o2 - r2) / max(np.linalg.norm(r2), 1e-30)),
                      ratio=float(ratios[i, j]), row=i, col=j, expected=float(r2[i, j]),
                      got=float(o2[i, j]), bound=float(bound[i, j]))
    if record:
        margin["ratio"], margin["rel"] = max(margin["ratio"], res.ratio), max(margin["rel"], res.rel)
        margin["checks"] += 1
    limit = REL_TOL[act] if rel_tol is None else rel_tol
    if res.ratio > 1.0 or res.rel > limit:
        raise AssertionError(
            f"{tag}: worst element row {i}, column {j}: expected {res.expected:.6g}, got {res.got:.6g} "
            f"(|diff| {abs(res.got - res.expected):.3g}, bound {res.bound:.3g}, "
            f"{res.ratio:.2f}x the bound); relative error {res.rel:.3e} (limit {limit:.0e})")
    return res
