"""QuantizedWeight, the constructor every format goes through (from_codes), the reference
round-to-nearest quantizer, and the exact dequantizer.

Every weight is w = decode(q) * s + m (times a global scale for nvfp4), with
  decode(q) = q - 8 (4-bit integers), q - 128 (8-bit integers), the e4m3 value, or the e2m1 value;
  s the scale of the weight's group and column; m the offset of zero-point types (0 otherwise).
A zero point z enters as m = (bias - z) * s, so (q - z) * s = decode(q) * s + m for integer and
float zero points alike. `dequantize` reads the packed layout back: it is what the kernel
computes with, and the oracle every converter and kernel test is checked against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.arrays import to_host
from jitmarlin.weights import halves, kernel_form, packing
from jitmarlin.weights.qtypes import TILE, check_group, check_shape, get_qtype, kernel_dims
from jitmarlin.weights.shard import concat_fields, shard_fields

# ---- value decoders (host) -----------------------------------------------------------------------


def _e4m3_table() -> np.ndarray:
    v = np.arange(256)
    sign = np.where(v & 0x80, -1.0, 1.0)
    e, m = (v >> 3) & 0xF, v & 0x7
    mag = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e - 7))
    mag = np.where((v & 0x7F) == 0x7F, np.nan, mag)  # e4m3fn: S.1111.111 is NaN, no infinities
    return (sign * mag).astype(np.float64)


E4M3 = _e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def decode(codes: np.ndarray, qtype: str) -> np.ndarray:
    """decode(q) as float64: the value a code stands for before scale and offset."""
    q = get_qtype(qtype)
    c = np.asarray(codes)
    if q.kind == "int":
        return c.astype(np.float64) - (8 if q.bits == 4 else 128)
    if qtype == "float8_e4m3fn":
        return E4M3[c.astype(np.int64)]
    return E2M1[c.astype(np.int64) & 0xF]


def implicit_bias(qtype: str) -> int:
    q = get_qtype(qtype)
    return (8 if q.bits == 4 else 128) if q.kind == "int" else 0


# ---- the weight ----------------------------------------------------------------------------------


class _CheckedWeight:
    """What QuantizedWeight and MoEWeight share: dims defaulting to the kernel's, every invariant
    checked at construction (`_check`), and again before upload when a field in `_CHECKED` changed
    since (a class that caches uploads per weight, `_CLEAR_ON_CHANGE`, also drops them then); the
    scale (and offset) bit patterns a kernel of `act` activations uses."""

    _CHECKED: frozenset = frozenset()
    _CLEAR_ON_CHANGE = False

    def __post_init__(self):
        if _is_int(self.n) and _is_int(self.k):
            self.out_features = self.out_features or self.n
            self.in_features = self.in_features or self.k
        self.validate()

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if name in self._CHECKED and self.__dict__.get("_checked"):
            object.__setattr__(self, "_checked", False)
            if self._CLEAR_ON_CHANGE:
                self._device.clear()

    def validate(self) -> None:
        """Check every invariant of the layout (see the class docstring); InputError naming the
        first that fails. Runs at construction and again before upload when a field was changed."""
        self._check()
        object.__setattr__(self, "_checked", True)

    def scales_for(self, act: str) -> np.ndarray:
        """Scale bit patterns the kernel uses with `act` activations (rounded if dtypes differ)."""
        return _half_for(self.scales, self.scale_dtype, act, "scales")

    def offsets_for(self, act: str):
        return None if self.offsets is None else _half_for(self.offsets, self.scale_dtype, act, "offsets")


@dataclass(eq=False)
class QuantizedWeight(_CheckedWeight):
    """A weight of shape (out_features, in_features) in the kernel's layout.

    n, k: the kernel's dimensions (out/in features padded to multiples of 64, and k to whole
    groups). packed: int32 (k/16, 2n) for 4-bit codes, (k/16, 4n) for 8-bit (jitmarlin.packing;
    kernels of float codes read the words rearranged and the scales times a power of two:
    weights.kernel_form).
    scales: uint16 bit patterns of `scale_dtype`: (k/group_size, n) permuted for grouped
    quantization and for per-channel zero-point types, (n,) in natural order for symmetric
    per-channel. offsets: like scales, for zero-point types (w = decode(q) * s + m), else None.
    global_scale: fp32 factor applied to every output (nvfp4). perm: int32 (in_features,) for
    act-order checkpoints: the kernel computes x[..., perm] @ W[:, perm].T.
    Device copies are made on first use on a device and kept (`to_device`); a CuPy `packed`
    is used as is, except for float types (nvfp4, mxfp4, fp8), whose kernel form is a copy.
    """

    qtype: str
    group_size: int
    n: int
    k: int
    packed: np.ndarray
    scales: np.ndarray
    scale_dtype: str = "float16"
    offsets: np.ndarray | None = None
    global_scale: float = 1.0
    perm: np.ndarray | None = None
    out_features: int = 0
    in_features: int = 0
    layout: str = packing.LAYOUT
    _device: dict = field(default_factory=dict, repr=False)
    _launchers: dict = field(default_factory=dict, repr=False)
    _gather: dict = field(default_factory=dict, repr=False)  # act-order buffers (ops/linear.py)

    def _check(self) -> None:
        _validate(self)

    @property
    def shape(self) -> tuple[int, int]:
        """(out_features, in_features), as torch.nn.Linear's weight."""
        return (self.out_features, self.in_features)

    @property
    def bits(self) -> int:
        return get_qtype(self.qtype).bits

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales.nbytes + (0 if self.offsets is None else self.offsets.nbytes)

    def shard(self, dim: int, rank: int, world: int) -> "QuantizedWeight":
        """Rank `rank`'s part of this weight split over `world` GPUs: dim=0 (column-parallel) a
        contiguous block of out_features/world output rows; dim=1 (row-parallel) the checkpoint-order
        input columns [rank, rank + 1) * in_features/world, whose outputs over all ranks sum to the
        full output. dequantize(shard) is exactly that slice of dequantize(self). A new host-side
        weight; InputError for a bad rank/world/dim, a split that is not a multiple of 8 features per
        rank, or a row split that cuts a quantization group (act-order groups included)."""
        return QuantizedWeight(**shard_fields(self, dim, rank, world))

    @staticmethod
    def concat(weights) -> "QuantizedWeight":
        """One weight computing `weights`' outputs one after another (fused q/k/v or gate/up of one
        input): out_features is their sum; dequantize(result) is exactly theirs stacked. A new
        host-side weight; InputError unless all share qtype, group_size, in_features, scale_dtype,
        global_scale and act-order permutation."""
        return QuantizedWeight(**concat_fields(weights))

    def kernel_global_scale(self, act: str) -> float:
        """The fp32 factor a kernel of `act` activations applies to its sums: global_scale, times
        the power of two weights.kernel_form moves out of a float decode (nvfp4, mxfp4, fp8).
        Worked out once per act (to_device does it too), so it reads no array under capture."""
        key = ("global_scale", act)
        g = self._device.get(key)
        if g is None:
            factor = kernel_form.kernel_factor(self.qtype, self.scales_for(act), act)
            g = self._device[key] = float(kernel_form.scaled_factors(np.float32(self.global_scale), factor))
        return g

    def to_device(self, device: int, act: str):
        """CuPy copies (packed, scales, offsets or None, perm or None) on GPU `device` in the
        kernel's form for `act` (weights.kernel_form: act's scale dtype, float codes rearranged),
        made once and cached. The kernel's global scale is kernel_global_scale(act)."""
        key = (device, act)
        d = self._device.get(key)
        if d is None:
            if not self.__dict__.get("_checked"):
                self.validate()
            self.kernel_global_scale(act)  # (refuses a global scale the fold would overflow)
            import cupy as cp

            from jitmarlin.jit.launch import private_stream

            s = private_stream(device)
            with cp.cuda.Device(device), s:

                def up(a):
                    return None if a is None else cp.ascontiguousarray(cp.asarray(a))

                # uploaded first: a float type's words are rearranged on the GPU
                packed, scales, _ = kernel_form.kernel_form(self.qtype, up(self.packed), self.scales_for(act), act)
                d = (
                    packed,
                    up(scales),
                    up(self.offsets_for(act)),
                    up(None if self.perm is None else self.perm.astype(np.int64)),
                )
            s.synchronize()
            self._device[key] = d
        return d


QuantizedWeight._CHECKED = frozenset(
    (
        "qtype",
        "group_size",
        "n",
        "k",
        "packed",
        "scales",
        "scale_dtype",
        "offsets",
        "global_scale",
        "perm",
        "out_features",
        "in_features",
        "layout",
    )
)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _dtype(a):
    """NumPy dtype of a NumPy, CuPy or torch array (None if `a` is not an array)."""
    dt = getattr(a, "dtype", None)
    if dt is None or not hasattr(a, "shape"):
        return None
    if isinstance(dt, np.dtype):
        return dt
    try:
        return np.dtype(str(dt).replace("torch.", ""))
    except TypeError:
        return None


def _check_array(a, what: str, dtype, shape: tuple, owner: str = "QuantizedWeight") -> None:
    """InputError unless `a` (owner's field `what`) is a NumPy, CuPy or torch array of `dtype` and
    exactly `shape`."""
    dt = _dtype(a)
    if dt is None:
        raise InputError(f"{owner}.{what} must be an array (NumPy, CuPy or torch), got {type(a).__name__}")
    if dt != np.dtype(dtype):
        raise InputError(f"{owner}.{what} must be {np.dtype(dtype)}, got {dt}")
    if tuple(a.shape) != shape:
        raise InputError(f"{owner}.{what} must have shape {shape}, got {tuple(a.shape)}")


def _validate(w: "QuantizedWeight") -> None:
    """Every invariant a kernel relies on: the dims, and each array's dtype and exact shape for
    them, so that no kernel reads past a buffer. O(n) host work (O(k) with a permutation); device
    arrays are checked by shape and dtype only, never copied."""
    qt = get_qtype(w.qtype)
    gs = check_group(w.qtype, w.group_size)
    if w.layout != packing.LAYOUT:
        raise InputError(f"QuantizedWeight.layout must be {packing.LAYOUT!r}, got {w.layout!r}")
    for name in ("n", "k"):
        v = getattr(w, name)
        if not _is_int(v) or v <= 0 or v % TILE:
            raise InputError(
                f"QuantizedWeight.{name} (the kernel's padded dim) must be a positive multiple of {TILE}, got {v!r}"
            )
    n, k = int(w.n), int(w.k)
    for name, v, top in (("out_features", w.out_features, n), ("in_features", w.in_features, k)):
        if not _is_int(v) or not 0 < v <= top:
            raise InputError(f"QuantizedWeight.{name} must be in 1..{'n' if top == n else 'k'}={top}, got {v!r}")
    check_shape(int(w.out_features), int(w.in_features))
    if (n, k) != kernel_dims(int(w.out_features), int(w.in_features), gs):
        raise InputError(
            f"QuantizedWeight (n, k) = ({n}, {k}) is not the padded shape "
            f"{kernel_dims(int(w.out_features), int(w.in_features), gs)} of a "
            f"({w.out_features}, {w.in_features}) weight with group_size={gs}"
        )
    if w.scale_dtype not in ("float16", "bfloat16"):
        raise InputError(f"QuantizedWeight.scale_dtype must be float16 or bfloat16, got {w.scale_dtype!r}")
    _check_array(w.packed, "packed", np.int32, (k // 16, (2 if qt.bits == 4 else 4) * n))
    g = 1 if gs == -1 else k // gs
    sshape = (n,) if gs == -1 and not qt.zero_points else (g, n)
    _check_array(w.scales, "scales", np.uint16, sshape)
    if qt.zero_points and w.offsets is None:
        raise InputError(f"QuantizedWeight: {w.qtype} has zero points: offsets are required")
    if not qt.zero_points and w.offsets is not None:
        raise InputError(f"QuantizedWeight: {w.qtype} has no zero points: offsets must be None")
    if w.offsets is not None:
        _check_array(w.offsets, "offsets", np.uint16, sshape)
    try:
        ok = not isinstance(w.global_scale, (bool, str, bytes)) and math.isfinite(float(w.global_scale))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"QuantizedWeight.global_scale must be a finite number, got {w.global_scale!r}")
    if w.perm is not None:
        _check_perm(w.perm, int(w.in_features))


def _check_perm(perm, k_in: int) -> None:
    dt = _dtype(perm)
    if dt is None or dt.kind not in "iu":
        raise InputError(f"QuantizedWeight.perm must be an integer array, got {dt or type(perm).__name__}")
    if tuple(perm.shape) != (k_in,):
        raise InputError(f"QuantizedWeight.perm must have shape (in_features,) = ({k_in},), got {tuple(perm.shape)}")
    p = np.asarray(to_host(perm)).astype(np.int64)
    if p.size and (p.min() < 0 or p.max() >= k_in or np.bincount(p, minlength=k_in).max() != 1):
        raise InputError(f"QuantizedWeight.perm must be a permutation of range(in_features={k_in})")


def _half_for(bits, have: str, want: str, what: str):
    if want == have:
        return bits
    if type(bits).__module__.split(".")[0] == "cupy":
        raise UnsupportedError(f"{what} are {have} on the device; quantize with scale_dtype={want!r}")
    vals = halves.from_bits(bits, have)
    out = halves.to_bits(vals, want)
    back = halves.from_bits(out, want)
    if np.any(np.isfinite(vals) & ~np.isfinite(back)) or np.any((vals != 0) & (back == 0)):
        raise UnsupportedError(f"{what} stored as {have} do not fit {want}; use {have} activations")
    return out


# ---- construction ------------------------------------------------------------------------------


def _host_array(a, what: str, kinds: str) -> np.ndarray:
    """`a` on the host, refused unless its dtype kind is in `kinds` (no complex, object or
    string arrays: casting would drop an imaginary part or fail obscurely)."""
    if a is None:
        raise InputError(f"{what} is required")
    try:
        h = np.asarray(to_host(a))
    except (TypeError, ValueError) as e:
        raise InputError(f"{what} must be a numeric array: {e}") from None
    if h.dtype.kind not in kinds:
        want = {"iub": "integer", "fiu": "real (float or integer)", "fiub": "real"}.get(kinds, kinds)
        raise InputError(f"{what} must be a {want} array, got dtype {h.dtype}")
    if h.size == 0:
        raise InputError(f"{what} is empty (shape {h.shape})")
    return h


def _fit(values: np.ndarray, scale_dtype: str, what: str) -> np.ndarray:
    """Bit patterns of `values` in `scale_dtype`; InputError where a finite value overflows it."""
    with np.errstate(over="ignore", invalid="ignore"):
        bits = halves.to_bits(values, scale_dtype)
    back = halves.from_bits(bits, scale_dtype)
    bad = np.isfinite(values) & ~np.isfinite(back)
    if np.any(bad):
        big = float(np.abs(values[bad]).max())
        hint = (
            "; pass scale_dtype='bfloat16' (float16 tops out at 65504)"
            if scale_dtype == "float16"
            else "; the weights are too large for any half-precision scale"
        )
        raise InputError(f"{what} overflow {scale_dtype} (largest {big:.4g}){hint}")
    return bits


def from_codes(
    qtype: str,
    codes,
    scales,
    group_size: int,
    *,
    zeros=None,
    offsets=None,
    global_scale: float = 1.0,
    g_idx=None,
    scale_dtype: str = "float16",
) -> QuantizedWeight:
    """Build a QuantizedWeight from unpacked codes. Every converter ends here.

    codes: (N, K) integers, one code per weight (4-bit: 0..15, 8-bit: 0..255).
    scales: (G, N) floats, G = K / group_size (group_size -1: G = 1, or shape (N,)).
    zeros: (G, N) zero points (integer or float) for zero-point types: w = (q - z) * s.
    offsets: instead of zeros, the offset m itself: w = decode(q) * s + m.
    global_scale: multiplies every weight (nvfp4's per-tensor scale).
    g_idx: (K,) group of each input column (GPTQ act-order); columns are sorted by group.
    Pads N and K up to multiples of 64 (and K to whole groups): the padding never reaches the
    output. Scales/offsets are stored as `scale_dtype` (rounded).
    """
    qt = get_qtype(qtype)
    group_size = check_group(qtype, group_size)
    codes = _host_array(codes, "codes", "iub")
    if codes.ndim != 2:
        raise InputError(f"codes must be 2-D (out_features, in_features), got {codes.shape}")
    n0, k0 = codes.shape
    check_shape(n0, k0)
    top = (1 << qt.bits) - 1
    if codes.size and (codes.min() < 0 or codes.max() > top):
        raise InputError(f"{qtype} codes must lie in [0, {top}]")
    if qtype == "float8_e4m3fn" and np.any((codes & 0x7F) == 0x7F):
        raise InputError("float8_e4m3fn codes include NaN (0x7f / 0xff)")
    if scale_dtype not in ("float16", "bfloat16"):
        raise InputError(f"scale_dtype must be float16 or bfloat16, got {scale_dtype}")
    gs = k0 if group_size == -1 else group_size
    g0 = -(-k0 // gs)
    s = _host_array(scales, "scales", "fiu").astype(np.float64)
    if s.size % n0:
        raise InputError(f"scales must have shape ({g0}, {n0}) (groups of {gs} over {k0} inputs), got {s.shape}")
    s = s.reshape(-1, n0)
    if s.shape[0] != g0:
        raise InputError(f"scales must have {g0} rows (groups of {gs} over {k0} inputs), got {s.shape[0]}")
    if not np.all(np.isfinite(s)):
        raise InputError("scales contain NaN or Inf")
    if zeros is not None and offsets is not None:
        raise InputError("give zeros or offsets, not both")
    affine = qt.zero_points
    if affine and zeros is None and offsets is None:
        raise InputError(f"{qtype} needs zero points (zeros=) or offsets (offsets=)")
    if not affine and (zeros is not None or offsets is not None):
        raise InputError(
            f"{qtype} has no zero points; use {'uint4' if qt.bits == 4 else 'uint8'} for asymmetric weights"
        )

    perm = None
    if g_idx is not None:
        gi = np.asarray(to_host(g_idx)).astype(np.int64).reshape(-1)
        if gi.shape != (k0,):
            raise InputError(f"g_idx must have in_features={k0} entries, got {gi.shape}")
        if group_size == -1:
            raise InputError("g_idx (act-order) needs grouped scales")
        if k0 % gs:
            raise InputError(
                f"act-order needs in_features ({k0}) to be a multiple of group_size ({gs}): padding would split a group"
            )
        perm = np.argsort(gi, kind="stable")
        if not np.array_equal(gi[perm], np.repeat(np.arange(g0), gs)):
            raise InputError("g_idx must put exactly group_size input columns in every group")
        codes = codes[:, perm]
        if np.array_equal(perm, np.arange(k0)):
            perm = None  # already in order: no gather needed

    # offsets m (w = decode(q) * s + m) in float64, before rounding to the scale dtype
    s_bits = _fit(s, scale_dtype, "scales")
    s_used = halves.from_bits(s_bits, scale_dtype).astype(np.float64)
    m = None
    if affine:

        def per_group(a, name):  # (g0, n0) finite float64
            v = _host_array(a, name, "fiu").astype(np.float64)
            if v.size != g0 * n0:
                raise InputError(f"{name} must have shape ({g0}, {n0}), got {v.shape}")
            if not np.all(np.isfinite(v)):
                raise InputError(f"{name} contain NaN or Inf")
            return v.reshape(g0, n0)

        if zeros is not None:
            m = (implicit_bias(qtype) - per_group(zeros, "zeros")) * s_used
        else:
            m = per_group(offsets, "offsets")
        _fit(m, scale_dtype, "offsets (zero points times scales)")

    # pad: N to 64, K to 64 and to whole groups (padded inputs are zero in the kernel)
    n, k = kernel_dims(n0, k0, group_size)
    g = 1 if group_size == -1 else k // gs
    if (n, k) != (n0, k0):
        codes = np.pad(codes, ((0, n - n0), (0, k - k0)))
    if (g, n) != s_bits.shape:
        s_bits = np.pad(s_bits, ((0, g - g0), (0, n - n0)))
        if m is not None:
            m = np.pad(m, ((0, g - g0), (0, n - n0)))

    packed = packing.pack(codes.astype(np.uint8), qt.bits)
    if group_size == -1 and not affine:
        sc = s_bits.reshape(n)  # applied to the fp32 sums: natural order
        off = None
    else:
        sc = packing.permute_scales(s_bits)
        off = None if m is None else packing.permute_scales(halves.to_bits(m, scale_dtype))
    if not math.isfinite(float(global_scale)) or not math.isfinite(float(np.float32(global_scale))):
        raise InputError(f"global_scale must be a finite float32, got {global_scale!r}")
    return QuantizedWeight(
        qtype,
        group_size,
        n,
        k,
        packed,
        sc,
        scale_dtype,
        off,
        float(np.float32(global_scale)),
        None if perm is None else perm.astype(np.int32),
        n0,
        k0,
    )


# ---- reference quantizer -------------------------------------------------------------------------


def _nearest(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the nearest finite entry of `table` for each value (ties to the lower index)."""
    finite = np.flatnonzero(np.isfinite(table))
    order = finite[np.argsort(table[finite], kind="stable")]
    t = table[order]
    pos = np.clip(np.searchsorted(t, values), 1, len(t) - 1)
    lo, hi = t[pos - 1], t[pos]
    pick = np.where(np.abs(values - lo) <= np.abs(hi - values), pos - 1, pos)
    return order[pick]


QUANTIZE_QTYPES = ("uint4b8", "uint4", "uint8b128", "uint8", "float8_e4m3fn", "nvfp4", "mxfp4")


def quantize(
    weight, qtype: str = "uint4b8", group_size: int | None = None, *, scale_dtype: str = "float16"
) -> QuantizedWeight:
    """Round-to-nearest quantization of `weight` (out_features, in_features) (NumPy, CuPy or
    torch; any real dtype), one scale per group of `group_size` inputs (-1: per channel; default
    128, or the format's own group for nvfp4 (16) and mxfp4 (32), the only ones they take).
    out_features and in_features must be positive multiples of 8 (qtypes.shape_problem); a last
    partial group is padded with zeros.

    uint4b8 / uint8b128: symmetric, s = max|w| / 7.5 (127.5). uint4 / uint8: asymmetric with an
    integer zero point, s = (max - min) / 15 (255). float8_e4m3fn: s = max|w| / 448, nearest e4m3.
    nvfp4: groups of 16, s = max|w| / 6 rounded to e4m3 under a global scale max|w| / (448 * 6).
    mxfp4: groups of 32, s = a power of two (e8m0) with max|w| / s <= 6.
    Scales that overflow `scale_dtype` (float16: |w| beyond about 4.9e5 for uint4b8) raise
    InputError: pass scale_dtype="bfloat16".
    """
    qt = get_qtype(qtype)
    if group_size is None:
        group_size = qt.fixed_group or 128
    group_size = check_group(qtype, group_size)
    if scale_dtype not in ("float16", "bfloat16"):
        raise InputError(f"scale_dtype must be float16 or bfloat16, got {scale_dtype!r}")
    w = _host_array(weight, "weight", "fiu").astype(np.float64)
    if w.ndim != 2:
        raise InputError(f"weight must be 2-D (out_features, in_features), got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise InputError("weight contains NaN or Inf")
    n, k0 = w.shape
    check_shape(n, k0)
    gs = k0 if group_size == -1 else group_size
    k = -(-k0 // gs) * gs
    if k != k0:  # a last partial group: zero columns change no scale
        w = np.pad(w, ((0, 0), (0, k - k0)))
    grp = w.reshape(n, k // gs, gs)
    amax = np.abs(grp).max(axis=2)  # (n, G)
    global_scale, zeros = 1.0, None
    if qt.kind == "int" and not qt.zero_points:
        s = amax / ((1 << (qt.bits - 1)) - 0.5)
    elif qt.kind == "int":
        lo, hi = np.minimum(grp.min(axis=2), 0), np.maximum(grp.max(axis=2), 0)
        s = (hi - lo) / ((1 << qt.bits) - 1)
    elif qtype == "float8_e4m3fn":
        s = amax / 448
    elif qtype == "nvfp4":
        global_scale = max(float(amax.max()), 1e-30) / (448 * 6)
        s = E4M3[_nearest(amax / 6 / global_scale, E4M3)] * 1.0  # block scales, e4m3 values
    else:  # mxfp4
        s = 2.0 ** np.ceil(np.log2(np.maximum(amax, 1e-30) / 6))
    s = np.where(s == 0, 1.0, s)
    s_used = halves.from_bits(_fit(s, scale_dtype, "scales"), scale_dtype).astype(np.float64)
    s_used = np.where(s_used == 0, np.finfo(np.float16).tiny, s_used)
    eff = s_used[:, :, None] * global_scale  # (n, G, 1)
    if qt.kind == "int":
        top = (1 << qt.bits) - 1
        if qt.zero_points:
            z = np.clip(np.rint(-lo / s_used), 0, top)
            zeros = z.T
            q = np.clip(np.rint(grp / eff) + z[:, :, None], 0, top)
        else:
            q = np.clip(np.rint(grp / eff) + implicit_bias(qtype), 0, top)
    elif qtype == "float8_e4m3fn":
        q = _nearest(np.clip(grp / eff, -448, 448), E4M3)
    else:
        q = _nearest(np.clip(grp / eff, -6, 6), E2M1)
    codes = q.reshape(n, k)[:, :k0].astype(np.uint8)
    return from_codes(qtype, codes, s.T, group_size, zeros=zeros, global_scale=global_scale, scale_dtype=scale_dtype)


# ---- the oracle ----------------------------------------------------------------------------------


def dequantize(qw: QuantizedWeight, act: str | None = None, *, dtype=np.float32) -> np.ndarray:
    """Exact host-side inverse of the packed layout: float32 (out_features, in_features) weights,
    in the caller's column order (act-order permutation undone, padding removed).

    act: the activation dtype whose scale rounding to apply (default: the stored scale dtype).
    dtype: float32, or float64 for the values before that last rounding (exact: decode(q) * s + m
    of half-precision factors, times the fp32 global scale, fits a double).
    """
    act = act or qw.scale_dtype
    n, k = qw.n, qw.k
    codes = packing.unpack(np.asarray(to_host(qw.packed)), n, k, qw.bits)
    vals = decode(codes, qw.qtype)  # (n, k) float64
    sb = np.asarray(to_host(qw.scales_for(act)))
    if qw.group_size == -1 and qw.offsets is None:
        s = halves.from_bits(sb, act).astype(np.float64)[:, None]
        w = vals * s
    else:
        gs = k if qw.group_size == -1 else qw.group_size
        s = halves.from_bits(packing.unpermute_scales(sb.reshape(-1, n)), act).astype(np.float64)
        w = vals * np.repeat(s.T, gs, axis=1)
        if qw.offsets is not None:
            ob = np.asarray(to_host(qw.offsets_for(act)))
            m = halves.from_bits(packing.unpermute_scales(ob.reshape(-1, n)), act).astype(np.float64)
            w = w + np.repeat(m.T, gs, axis=1)
    w = (w * qw.global_scale)[: qw.out_features, : qw.in_features]
    if qw.perm is not None:
        out = np.empty_like(w)
        out[:, qw.perm] = w  # back to checkpoint order
        w = out
    return w.astype(dtype)
