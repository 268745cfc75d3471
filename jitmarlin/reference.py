"""The NumPy oracle: dequantize, then matmul in float64; and the one output checker every
kernel-output test uses (tests and tools import this module, production code never does)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.jit.arrays import to_host
from jitmarlin.weights import halves
from jitmarlin.weights.moe import MoEWeight, dequantize_moe, logical_bias
from jitmarlin.weights.quant import QuantizedWeight, dequantize


def linear_reference(x, qw: QuantizedWeight, bias=None, act: str | None = None) -> np.ndarray:
    """x (..., K) @ dequantize(qw).T (+ bias) in float64. Returns float64 (..., N)."""
    xh = np.asarray(to_host(x), dtype=np.float64)
    w = dequantize(qw, act).astype(np.float64)
    out = xh @ w.T
    if bias is not None:
        out = out + np.asarray(to_host(bias), dtype=np.float64)
    return out


MOE_ACTIVATIONS = ("silu", "gelu", "swigluoai")
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-z) -> inf for very negative z: sigmoid 0
        return 1.0 / (1.0 + np.exp(-z))


def _activate(gate: np.ndarray, up: np.ndarray, activation: str) -> np.ndarray:
    """vLLM's gated activations on the gate and up halves of x @ w13.T, in float64."""
    if activation == "silu":
        return gate * _sigmoid(gate) * up
    if activation == "gelu":  # exact (erf) gelu, not the tanh approximation
        return 0.5 * gate * (1.0 + _erf(gate / math.sqrt(2.0))) * up
    if activation == "swigluoai":  # gpt-oss: clamped, alpha 1.702, up shifted by 1
        gate = np.minimum(gate, 7.0)
        up = np.clip(up, -7.0, 7.0)
        return (up + 1.0) * gate * _sigmoid(1.702 * gate)
    raise InputError(f"activation must be one of {MOE_ACTIVATIONS}, got {activation!r}")


def moe_reference(
    x,
    w13: MoEWeight,
    w2: MoEWeight,
    topk_weights,
    topk_ids,
    *,
    activation: str = "silu",
    expert_map=None,
    apply_router_weight_on_input: bool = False,
    act: str | None = None,
    round_intermediate: bool = True,
) -> np.ndarray:
    """vLLM's fused_experts in float64: returns (T, hidden).

    x (T, hidden); topk_ids (T, k) global expert ids; topk_weights (T, k). expert_map: optional
    (num_global_experts,) global -> local expert index, -1 for experts not on this rank (their
    pairs add nothing). For each token t and slot j with local expert e:
        h = x[t] @ W13[e].T + b13[e]        (x[t] * topk_weights[t, j] if apply_router_weight_on_input)
        a = activation(h[:I], h[I:])        rounded to `act` through float32 if round_intermediate
                                            (the kernels keep the intermediate in the activation
                                            dtype, as vLLM does, rounding an fp32 value)
        out[t] += topk_weights[t, j] * (a @ W2[e].T + b2[e])    (no factor if applied on input)
    W13, W2: dequantize_moe(., act) in logical order (as linear_reference: float32 weights). act
    defaults to x's dtype when that is float16/bfloat16, else w13's scale dtype.
    """
    if activation not in MOE_ACTIVATIONS:
        raise InputError(f"moe_reference: activation must be one of {MOE_ACTIVATIONS}, got {activation!r}")
    if act is None:
        name = str(getattr(x, "dtype", "")).replace("torch.", "")
        act = name if name in ("float16", "bfloat16") else w13.scale_dtype
    xh = np.asarray(to_host(x), dtype=np.float64)
    ids = np.asarray(to_host(topk_ids))
    wts = np.asarray(to_host(topk_weights), dtype=np.float64)
    if not w13.gated or w2.gated:
        raise InputError("moe_reference: w13 must be a gated MoEWeight and w2 a plain one")
    inter, hidden = w13.intermediate, w13.in_features
    if xh.ndim != 2 or xh.shape[1] != hidden:
        raise InputError(f"moe_reference: x must be (T, {hidden}), got {xh.shape}")
    if (w2.num_experts, w2.out_features, w2.in_features) != (w13.num_experts, hidden, inter):
        raise InputError(f"moe_reference: w2 must be ({w13.num_experts}, {hidden}, {inter}), got {w2.shape}")
    if ids.dtype.kind not in "iu" or ids.ndim != 2 or ids.shape[0] != xh.shape[0] or wts.shape != ids.shape:
        raise InputError(
            f"moe_reference: topk_ids (integer) and topk_weights must both be (T={xh.shape[0]}, k), "
            f"got {ids.dtype} {ids.shape} and {wts.shape}"
        )
    # jitmarlin.moe's contract: a pair whose id lies outside the map (or, without one, outside the
    # experts), or whose map entry is -1 or out of range, adds nothing
    ids = ids.astype(np.int64)
    if expert_map is not None:
        emap = np.asarray(to_host(expert_map)).astype(np.int64).reshape(-1)
        inside = (ids >= 0) & (ids < emap.size)
        ids = np.where(inside, emap[np.clip(ids, 0, max(emap.size - 1, 0))], -1)
    ids = np.where((ids >= 0) & (ids < w13.num_experts), ids, -1)
    W13 = dequantize_moe(w13, act).astype(np.float64)
    W2 = dequantize_moe(w2, act).astype(np.float64)
    b13, b2 = logical_bias(w13), logical_bias(w2)
    out = np.zeros((xh.shape[0], hidden))
    for e in range(w13.num_experts):  # every (token, slot) pair routed to expert e at once
        t, j = np.nonzero(ids == e)
        if not t.size:
            continue
        inp = xh[t] * wts[t, j, None] if apply_router_weight_on_input else xh[t]
        h = inp @ W13[e].T + (0.0 if b13 is None else b13[e])
        a = _activate(h[:, :inter], h[:, inter:], activation)
        if round_intermediate:
            a = halves.round_to(a, act).astype(np.float64)
        y = a @ W2[e].T + (0.0 if b2 is None else b2[e])
        np.add.at(out, t, y if apply_router_weight_on_input else y * wts[t, j, None])
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

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}
REL_TOL = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5}
ATOL_U = 6.0
RTOL_U = 1.5
# A MoE block chains two GEMMs: the down GEMM sums the up GEMM's rounding terms (its dequantised
# weights, and an intermediate rounded to the activation dtype, whose last bit flips where the fp32
# and float64 values straddle a rounding point) on top of its own. Measured on an H100: up to 6.6u
# rms in bf16 (fp8 weights, T = 4096); the bound for MoE outputs is 1.5x the dense one.
ATOL_U_MOE = 9.0

# The largest |out - ref| / bound seen per (family, dtype) in this process: the margin of the
# element-wise bound (tests/conftest.py prints it, and writes it to JITMARLIN_MARGINS_JSON).
MARGINS: dict[tuple[str, str], dict] = {}


@dataclass(frozen=True)
class CheckResult:
    rel: float  # ||out - ref|| / ||ref||
    ratio: float  # max over elements of |out - ref| / bound (<= 1 passes)
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


def element_bounds(ref: np.ndarray, act: str, *, atol_u: float = ATOL_U, rtol_u: float = RTOL_U) -> np.ndarray:
    """The per-element bound for `ref` (float64, (..., N)) in activation dtype `act`."""
    u = UNIT_ROUNDOFF[act]
    r2 = ref.reshape(-1, ref.shape[-1]) if ref.ndim else ref.reshape(1, 1)
    row = np.sqrt(np.mean(r2 * r2, axis=1, keepdims=True))
    # a row of zeros (x row all zero) keeps a floor far below any real error's scale
    floor = 1e-6 * max(float(np.sqrt(np.mean(r2 * r2))), 1e-30)
    bound = atol_u * u * np.maximum(row, floor) + rtol_u * u * np.abs(r2)
    return bound.reshape(ref.shape)


def check_output(
    out,
    ref,
    act: str,
    *,
    what: str = "",
    seed=None,
    family: str | None = None,
    spec=None,
    rel_tol: float | None = None,
    atol_u: float = ATOL_U,
    rtol_u: float = RTOL_U,
    record: bool = True,
) -> CheckResult:
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
    margin = (
        MARGINS.setdefault(
            (family or (family_of(spec) if spec is not None else "unlabelled"), act),
            {"ratio": 0.0, "rel": 0.0, "checks": 0},
        )
        if record
        else {}
    )
    bad = ~np.isfinite(o2) & np.isfinite(r2)
    if bad.any():
        margin["ratio"] = float("inf")
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(
            f"{tag}: {int(bad.sum())} non-finite (unwritten?) output elements, "
            f"first at row {i}, column {j}: expected {r2[i, j]:.6g}, got {o2[i, j]}"
        )
    bound = element_bounds(r2, act, atol_u=atol_u, rtol_u=rtol_u)
    err = np.abs(o2 - r2)
    ratios = err / bound
    i, j = (int(v) for v in np.unravel_index(int(np.argmax(ratios)), ratios.shape))
    res = CheckResult(
        rel=float(np.linalg.norm(o2 - r2) / max(np.linalg.norm(r2), 1e-30)),
        ratio=float(ratios[i, j]),
        row=i,
        col=j,
        expected=float(r2[i, j]),
        got=float(o2[i, j]),
        bound=float(bound[i, j]),
    )
    if record:
        margin["ratio"], margin["rel"] = max(margin["ratio"], res.ratio), max(margin["rel"], res.rel)
        margin["checks"] += 1
    limit = REL_TOL[act] if rel_tol is None else rel_tol
    if res.ratio > 1.0 or res.rel > limit:
        raise AssertionError(
            f"{tag}: worst element row {i}, column {j}: expected {res.expected:.6g}, got {res.got:.6g} "
            f"(|diff| {abs(res.got - res.expected):.3g}, bound {res.bound:.3g}, "
            f"{res.ratio:.2f}x the bound); relative error {res.rel:.3e} (limit {limit:.0e})"
        )
    return res
