"""Stacked mixture-of-experts weights (MoEWeight): E experts of one shape, each in the layout a
QuantizedWeight has, stacked along a leading expert axis so one kernel launch can index any expert.

Gated (w13) weights hold each expert's gate (w1) and up (w3) projections, I rows each, as one
kernel weight of 2I output channels interleaved in blocks of 8: logical gate row j is kernel row
(j // 8) * 16 + j % 8 and logical up row j is kernel row (j // 8) * 16 + 8 + j % 8. A lane of the
fused kernel's epilogue then holds an 8-column gate block next to the matching up block and can
apply the activation without exchanging registers. Everything host-side that speaks of rows in
*logical* order (quantize_moe's input, dequantize_moe's output, logical_bias) uses vLLM's w13
order instead: rows [:I] gate, [I:] up.

Re-arranging experts never rounds a value again: codes and scale bit patterns are moved, not
recomputed, so dequantize of a stacked expert is bit for bit the dequantize of its parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.jit.arrays import to_host
from jitmarlin.weights import kernel_form, packing
from jitmarlin.weights.qtypes import TILE, check_group, get_qtype, kernel_dims
from jitmarlin.weights.quant import (
    QuantizedWeight,
    _check_array,
    _CheckedWeight,
    _host_array,
    _is_int,
    dequantize,
    quantize,
)

ACT_ORDER_REFUSED = "MoE experts with act-order (g_idx) are not supported"


def gate_up_rows(intermediate: int) -> np.ndarray:
    """Kernel row of each logical w13 row: int64 (2I,), gate rows 0..I-1 then up rows 0..I-1."""
    j = np.arange(intermediate)
    base = (j // 8) * 16 + j % 8
    return np.concatenate([base, base + 8])


@dataclass(eq=False)
class MoEWeight(_CheckedWeight):
    """E experts' weights of shape (out_features, in_features) each, stacked in the kernel's layout.

    n, k: each expert's kernel dims (QuantizedWeight's). packed: int32 (E, k/16, n*bits/2).
    scales: uint16 bit patterns of `scale_dtype`, (E, G, n) where a QuantizedWeight's are 2-D
    (grouped, or per-channel zero points; permuted) and (E, n) where they are 1-D (symmetric
    per-channel). offsets: like scales, zero-point types only. global_scales: float32 (E,), each
    expert's fp32 output factor (nvfp4); None means 1.0. bias: float32 (E, n) in the kernel's
    column order (interleaved when gated), zeros in padding; None for no bias. gated: a w13
    weight, out_features = 2I rows per expert interleaved in blocks of 8 (module docstring).
    Device copies are made on first use on a device and kept (`to_device`); a CuPy `packed`
    is used as is, except for float types (nvfp4, mxfp4, fp8), whose kernel form is a copy.
    """

    qtype: str
    group_size: int
    num_experts: int
    n: int
    k: int
    packed: np.ndarray
    scales: np.ndarray
    scale_dtype: str = "float16"
    offsets: np.ndarray | None = None
    global_scales: np.ndarray | None = None
    bias: np.ndarray | None = None
    gated: bool = False
    out_features: int = 0
    in_features: int = 0
    # not an init field: dataclasses.replace gives the new weight a cache of its own
    _device: dict = field(default_factory=dict, init=False, repr=False)

    _CLEAR_ON_CHANGE = True  # a changed field also drops the device copies of the old arrays

    def _check(self) -> None:
        _validate(self)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(num_experts, out_features, in_features), as vLLM's w13 / w2 tensors."""
        return (self.num_experts, self.out_features, self.in_features)

    @property
    def intermediate(self) -> int:
        """I: the gate (and up) rows per expert of a gated weight (out_features // 2)."""
        if not self.gated:
            raise InputError("MoEWeight.intermediate is defined for gated (w13) weights only")
        return self.out_features // 2

    @property
    def bits(self) -> int:
        return get_qtype(self.qtype).bits

    @property
    def nbytes(self) -> int:
        return sum(
            a.nbytes for a in (self.packed, self.scales, self.offsets, self.global_scales, self.bias) if a is not None
        )

    def expert(self, e: int) -> QuantizedWeight:
        """Expert `e` as a QuantizedWeight in the kernel's row order (a gated expert's 2I rows stay
        interleaved), on views of the stacked arrays."""
        if not _is_int(e) or not 0 <= e < self.num_experts:
            raise InputError(f"MoEWeight.expert: e must be an int in [0, {self.num_experts}), got {e!r}")
        return QuantizedWeight(
            self.qtype,
            self.group_size,
            self.n,
            self.k,
            self.packed[e],
            self.scales[e],
            self.scale_dtype,
            None if self.offsets is None else self.offsets[e],
            1.0 if self.global_scales is None else float(self.global_scales[e]),
            None,
            self.out_features,
            self.in_features,
        )

    def to_device(self, device: int, act: str):
        """CuPy copies (packed, scales, offsets or None, global_scales float32 (E,), bias float32 or
        None) on GPU `device`, in `act`'s scale dtype, made once and cached. global_scales is
        always present (ones where None) so the kernel reads one per expert unconditionally."""
        key = (device, act)
        d = self._device.get(key)
        if d is None:
            if not self.__dict__.get("_checked"):
                self.validate()
            import cupy as cp

            from jitmarlin.jit.launch import private_stream

            gs = np.ones(self.num_experts, np.float32) if self.global_scales is None else self.global_scales
            s = private_stream(device)
            with cp.cuda.Device(device), s:

                def up(a):
                    return None if a is None else cp.ascontiguousarray(cp.asarray(a))

                # uploaded first: a float type's words are rearranged on the GPU
                packed, scales, factor = kernel_form.kernel_form(self.qtype, up(self.packed), self.scales_for(act), act)
                gs = kernel_form.scaled_factors(gs, factor)
                d = (packed, up(scales), up(self.offsets_for(act)), up(gs), up(self.bias))
            s.synchronize()
            self._device[key] = d
        return d

    @classmethod
    def stack(cls, experts: Sequence[QuantizedWeight], *, bias=None) -> "MoEWeight":
        """Stack E QuantizedWeights of one qtype, group size, scale dtype and shape (no act-order).
        bias: optional (E, out_features) real array (NumPy, CuPy or torch), stored float32."""
        experts = list(experts)
        _check_same([(f"expert {i}", w) for i, w in enumerate(experts)], "MoEWeight.stack")
        return _stack(experts, _kernel_bias(bias, experts[0], len(experts), "bias"), gated=False)

    @classmethod
    def stack_gate_up(
        cls, gates: Sequence[QuantizedWeight], ups: Sequence[QuantizedWeight], *, gate_bias=None, up_bias=None
    ) -> "MoEWeight":
        """A gated (w13) MoEWeight from each expert's gate and up projections, (I, K) each, rows
        interleaved in blocks of 8 (module docstring). I must be a multiple of 8, and gate and up
        of one expert must share their global_scale (one fp32 factor per expert in the kernel).
        gate_bias, up_bias: optional (E, I) real arrays; a missing one counts as zeros."""
        gates, ups = list(gates), list(ups)
        if len(gates) != len(ups):
            raise InputError(f"MoEWeight.stack_gate_up: {len(gates)} gates but {len(ups)} ups")
        _check_same(
            [(f"gates[{i}]", w) for i, w in enumerate(gates)] + [(f"ups[{i}]", w) for i, w in enumerate(ups)],
            "MoEWeight.stack_gate_up",
        )
        inter = int(gates[0].out_features)
        _check_intermediate(inter, "MoEWeight.stack_gate_up")
        for e, (g, u) in enumerate(zip(gates, ups)):
            if g.global_scale != u.global_scale:
                raise InputError(
                    f"MoEWeight.stack_gate_up: expert {e}'s gate and up have different global_scale "
                    f"({g.global_scale!r} vs {u.global_scale!r}); the fused kernel applies one per "
                    "expert: quantize w13 as one tensor (quantize_moe(..., gated=True))"
                )
        fused = [_fuse(_logical(g), _logical(u), g) for g, u in zip(gates, ups)]
        bias = None
        if gate_bias is not None or up_bias is not None:
            e_count = len(gates)
            parts = [
                np.zeros((e_count, inter)) if b is None else _bias_rows(b, e_count, inter, name)
                for b, name in ((gate_bias, "gate_bias"), (up_bias, "up_bias"))
            ]
            bias = _interleaved_bias(np.concatenate(parts, axis=1), fused[0].n)
        return _stack(fused, bias, gated=True)


MoEWeight._CHECKED = frozenset(
    (
        "qtype",
        "group_size",
        "num_experts",
        "n",
        "k",
        "packed",
        "scales",
        "scale_dtype",
        "offsets",
        "global_scales",
        "bias",
        "gated",
        "out_features",
        "in_features",
    )
)


# ---- validation ----------------------------------------------------------------------------------


def _c_contiguous(a) -> bool:
    flags = getattr(a, "flags", None)  # NumPy and CuPy
    if flags is not None:
        return bool(flags.c_contiguous)
    is_c = getattr(a, "is_contiguous", None)  # torch
    return bool(is_c()) if callable(is_c) else True


def _check(a, what: str, dtype, shape: tuple) -> None:
    _check_array(a, what, dtype, shape, "MoEWeight")
    if not _c_contiguous(a):
        raise InputError(f"MoEWeight.{what} must be C-contiguous (the kernel indexes experts by a fixed stride)")


def _check_intermediate(inter: int, where: str) -> None:
    if inter % 8:
        raise InputError(
            f"{where}: the intermediate size I={inter} must be a multiple of 8 (gate and up rows "
            "are interleaved in blocks of 8)"
        )


def _validate(w: MoEWeight) -> None:
    """The stacked arrays' dtypes, exact shapes and contiguity; the per-expert dims through
    QuantizedWeight's own checks on expert 0's view (every expert shares them). Device arrays
    are checked by shape and dtype; only the small global_scales and bias are read for finiteness."""
    if not _is_int(w.num_experts) or w.num_experts < 1:
        raise InputError(f"MoEWeight.num_experts must be an int >= 1, got {w.num_experts!r}")
    qt = get_qtype(w.qtype)
    gs = check_group(w.qtype, w.group_size)
    for name in ("n", "k"):
        v = getattr(w, name)
        if not _is_int(v) or v <= 0 or v % TILE:
            raise InputError(
                f"MoEWeight.{name} (each expert's padded dim) must be a positive multiple of {TILE}, got {v!r}"
            )
    e, n, k = int(w.num_experts), int(w.n), int(w.k)
    for name, v, top in (("out_features", w.out_features, n), ("in_features", w.in_features, k)):
        if not _is_int(v) or not 0 < v <= top:
            raise InputError(f"MoEWeight.{name} must be in 1..{'n' if top == n else 'k'}={top}, got {v!r}")
    if not isinstance(w.gated, (bool, np.bool_)):
        raise InputError(f"MoEWeight.gated must be a bool, got {w.gated!r}")
    if w.gated:
        if w.out_features % 2:
            raise InputError(f"MoEWeight: a gated weight has 2*I rows per expert, got out_features={w.out_features}")
        _check_intermediate(w.out_features // 2, "MoEWeight (gated)")
    _check(w.packed, "packed", np.int32, (e, k // 16, n * qt.bits // 2))
    sshape = (e, n) if gs == -1 and not qt.zero_points else (e, 1 if gs == -1 else k // gs, n)
    _check(w.scales, "scales", np.uint16, sshape)
    if qt.zero_points != (w.offsets is not None):
        raise InputError(
            f"MoEWeight: {w.qtype} "
            + (
                "has zero points: offsets are required"
                if qt.zero_points
                else "has no zero points: offsets must be None"
            )
        )
    if w.offsets is not None:
        _check(w.offsets, "offsets", np.uint16, sshape)
    for what, shape in (("global_scales", (e,)), ("bias", (e, n))):
        a = getattr(w, what)
        if a is not None:
            _check(a, what, np.float32, shape)
            if not np.all(np.isfinite(np.asarray(to_host(a)))):
                raise InputError(f"MoEWeight.{what} contain NaN or Inf")
    try:
        w.expert(0)
    except InputError as err:
        raise InputError(f"MoEWeight (each expert): {err}") from None


def _check_same(items: list[tuple[str, QuantizedWeight]], where: str) -> None:
    """Every (name, weight) a valid QuantizedWeight without act-order, with the first's fields."""
    if not items:
        raise InputError(f"{where}: no experts given")
    for name, w in items:
        if not isinstance(w, QuantizedWeight):
            raise InputError(f"{where}: {name} must be a QuantizedWeight, got {type(w).__name__}")
        if not w.__dict__.get("_checked"):
            w.validate()
        if w.perm is not None:
            raise InputError(f"{where}: {name}: {ACT_ORDER_REFUSED}")
    name0, w0 = items[0]
    for name, w in items[1:]:
        for f in ("qtype", "group_size", "scale_dtype", "out_features", "in_features", "n", "k", "layout"):
            if getattr(w, f) != getattr(w0, f):
                raise InputError(
                    f"{where}: {name} differs from {name0} in {f}: {getattr(w, f)!r} vs {getattr(w0, f)!r}"
                )


# ---- building --------------------------------------------------------------------------------------


def _natural(qw: QuantizedWeight) -> bool:
    """Symmetric per-channel: scales (n,) in natural order (every other layout is (G, n) permuted)."""
    return qw.group_size == -1 and qw.offsets is None


def _logical(qw: QuantizedWeight):
    """(codes (out, in) uint8, scale bits, offset bits or None) of qw's rows and data groups, the
    scales in natural column order: (G0, out), or (out,) for symmetric per-channel."""
    n, k0, n0 = int(qw.n), int(qw.in_features), int(qw.out_features)
    codes = packing.unpack(np.asarray(to_host(qw.packed)), n, int(qw.k), qw.bits)[:n0, :k0]
    g0 = 1 if qw.group_size == -1 else -(-k0 // qw.group_size)

    def bits(a):
        if a is None:
            return None
        h = np.asarray(to_host(a))
        return h[:n0].copy() if _natural(qw) else packing.unpermute_scales(h.reshape(-1, n))[:g0, :n0]

    return codes, bits(qw.scales), bits(qw.offsets)


def _assemble(codes, s, m, like: QuantizedWeight, global_scale: float) -> QuantizedWeight:
    """A QuantizedWeight of `like`'s kind from logical codes (n0, k0) and natural-order bit patterns,
    padded and packed exactly as from_codes packs them (no value is rounded)."""
    n0, k0 = codes.shape
    n, k = kernel_dims(n0, k0, like.group_size)
    codes = np.pad(codes, ((0, n - n0), (0, k - k0)))
    if _natural(like):
        sc, off = np.pad(s, (0, n - n0)), None
    else:
        g = 1 if like.group_size == -1 else k // like.group_size

        def grid(a):
            return np.ascontiguousarray(packing.permute_scales(np.pad(a, ((0, g - a.shape[0]), (0, n - n0)))))

        sc, off = grid(s), None if m is None else grid(m)
    return QuantizedWeight(
        like.qtype,
        like.group_size,
        n,
        k,
        packing.pack(codes, like.bits),
        sc,
        like.scale_dtype,
        off,
        global_scale,
        None,
        n0,
        k0,
    )


def _fuse(gate, up, like: QuantizedWeight) -> QuantizedWeight:
    """One expert's interleaved w13 from the _logical parts of its gate and up (I rows each)."""
    rows = gate[0].shape[0]
    order = np.argsort(gate_up_rows(rows))  # kernel row r holds logical row order[r]
    codes = np.concatenate([gate[0], up[0]])[order]
    s = np.concatenate([gate[1], up[1]], axis=-1)[..., order]
    m = None if gate[2] is None else np.concatenate([gate[2], up[2]], axis=-1)[..., order]
    return _assemble(codes, s, m, like, like.global_scale)


def _stack(experts: list[QuantizedWeight], bias, *, gated: bool) -> MoEWeight:
    w0 = experts[0]

    def stacked(name):
        if getattr(w0, name) is None:
            return None
        return np.ascontiguousarray(np.stack([np.asarray(to_host(getattr(w, name))) for w in experts]))

    gscale = np.array([w.global_scale for w in experts], dtype=np.float32)
    return MoEWeight(
        w0.qtype,
        w0.group_size,
        len(experts),
        w0.n,
        w0.k,
        stacked("packed"),
        stacked("scales"),
        w0.scale_dtype,
        stacked("offsets"),
        None if np.all(gscale == 1) else gscale,
        bias,
        gated,
        w0.out_features,
        w0.in_features,
    )


def _bias_rows(bias, num_experts: int, rows: int, what: str) -> np.ndarray:
    b = _host_array(bias, what, "fiu").astype(np.float64)
    if b.shape != (num_experts, rows):
        raise InputError(f"{what} must have shape ({num_experts}, {rows}) (experts, rows), got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise InputError(f"{what} contains NaN or Inf")
    return b


def _kernel_bias(bias, like: QuantizedWeight, num_experts: int, what: str):
    if bias is None:
        return None
    b = _bias_rows(bias, num_experts, int(like.out_features), what)
    return np.ascontiguousarray(np.pad(b, ((0, 0), (0, int(like.n) - b.shape[1]))).astype(np.float32))


def _interleaved_bias(logical: np.ndarray, n: int) -> np.ndarray:
    """(E, 2I) logical w13 bias -> float32 (E, n) in kernel order, zeros in padding."""
    out = np.zeros((logical.shape[0], n), dtype=np.float32)
    out[:, gate_up_rows(logical.shape[1] // 2)] = logical
    return out


# ---- quantize / dequantize -------------------------------------------------------------------------


def quantize_moe(
    w,
    qtype: str = "uint4b8",
    group_size: int | None = None,
    *,
    gated: bool = False,
    bias=None,
    scale_dtype: str = "float16",
) -> MoEWeight:
    """Round-to-nearest quantization (jitmarlin.quantize, expert by expert) of w (E, N, K) (NumPy,
    CuPy or torch; any real dtype). gated: w is vLLM's w13, (E, 2I, K) with rows [:I] the gate
    (w1) and [I:] the up projection (w3); each expert's w13 is quantized as one tensor (so
    nvfp4's global scale is shared by gate and up; every other qtype's scales are per row, the
    same as quantizing the halves apart), then its rows are interleaved. bias: optional (E, N)
    in w's row order."""
    h = _host_array(w, "w", "fiu")
    if h.ndim != 3:
        raise InputError(f"quantize_moe: w must be 3-D (experts, out_features, in_features), got shape {h.shape}")
    e_count, rows = h.shape[:2]
    if gated:  # before quantizing: its shape message would not say why
        if rows % 2:
            raise InputError(f"quantize_moe(gated=True): w13 must have 2*I rows per expert, got {rows}")
        _check_intermediate(rows // 2, "quantize_moe(gated=True)")
    experts = [quantize(h[e], qtype, group_size, scale_dtype=scale_dtype) for e in range(e_count)]
    if not gated:
        return _stack(experts, _kernel_bias(bias, experts[0], e_count, "bias"), gated=False)
    inter = rows // 2
    fused = []
    for qw in experts:
        c, s, m = _logical(qw)
        half = (slice(None, inter), slice(inter, None))
        gate, up = ((c[r], s[..., r], None if m is None else m[..., r]) for r in half)
        fused.append(_fuse(gate, up, qw))
    kb = None if bias is None else _interleaved_bias(_bias_rows(bias, e_count, rows, "bias"), fused[0].n)
    return _stack(fused, kb, gated=True)


def _logical_rows(mw: MoEWeight) -> np.ndarray | slice:
    """Index of the kernel rows in logical order (a plain slice unless gated)."""
    return gate_up_rows(mw.out_features // 2) if mw.gated else slice(None)


def dequantize_moe(mw: MoEWeight, act: str | None = None, *, dtype=np.float32) -> np.ndarray:
    """Exact host-side inverse of the stacked layout: (E, out_features, in_features) in logical row
    order (gated: rows [:I] gate, [I:] up), global scales applied, padding removed. act, dtype: as
    jitmarlin.dequantize (float64 gives the values before the last rounding)."""
    if not mw.__dict__.get("_checked"):
        mw.validate()
    rows = _logical_rows(mw)
    return np.stack([dequantize(mw.expert(e), act, dtype=np.float64)[rows] for e in range(mw.num_experts)]).astype(
        dtype
    )


def logical_bias(mw: MoEWeight) -> np.ndarray | None:
    """float64 (E, out_features) bias in dequantize_moe's row order, or None."""
    if mw.bias is None:
        return None
    b = np.asarray(to_host(mw.bias), dtype=np.float64)
    return b[:, _logical_rows(mw)] if mw.gated else b[:, : mw.out_features]
