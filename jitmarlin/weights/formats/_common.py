"""Shared plumbing of the checkpoint converters: host copies of NumPy / CuPy / torch tensors
(float8 and bfloat16 included), bit unpacking, scale-dtype choice and group-size mapping."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.arrays import is_torch, to_host
from jitmarlin.weights import halves
from jitmarlin.weights.quant import E4M3

# group sizes from_codes takes for integer types, largest first
KERNEL_GROUPS = (128, 64, 32, 16)


def dtype_name(a) -> str:
    """'float16', 'bfloat16', 'float8_e4m3fn', 'int32', ... for NumPy, CuPy or torch arrays."""
    dt = getattr(a, "dtype", None)
    if dt is None:
        return np.asarray(a).dtype.name
    return str(dt).replace("torch.", "")


def host(a, name: str) -> np.ndarray:
    """`a` as a NumPy array on the host. bfloat16 becomes float32; float8 / packed-fp4 torch
    tensors become their raw bytes (uint8)."""
    if a is None:
        raise InputError(f"{name} is required")
    if is_torch(a):
        dt = dtype_name(a)
        if dt.startswith("float8") or dt.startswith("float4"):
            import torch

            return a.detach().cpu().contiguous().view(torch.uint8).numpy()
    out = np.asarray(to_host(a))
    if out.dtype.name == "bfloat16":  # ml_dtypes arrays (safetensors numpy)
        out = out.astype(np.float32)
    elif out.dtype.name.startswith("float8") or out.dtype.name.startswith("float4"):
        out = np.ascontiguousarray(out).view(np.uint8)
    return out


def ints(a, name: str, ndim: int | None = None) -> np.ndarray:
    """An integer array (any integer dtype), as int64."""
    h = host(a, name)
    if h.dtype.kind not in "iub":
        raise InputError(f"{name} must be an integer tensor (int32 / uint8), got {dtype_name(a)}")
    if ndim is not None and h.ndim != ndim:
        raise InputError(f"{name} must be {ndim}-D, got shape {tuple(h.shape)}")
    return h.astype(np.int64)


def floats(a, name: str) -> np.ndarray:
    """A float (or integer) array as float64."""
    h = host(a, name)
    if h.dtype.kind not in "fiu":
        raise InputError(f"{name} must be a float tensor, got {dtype_name(a)}")
    if dtype_name(a).startswith("float8") or dtype_name(a).startswith("float4"):
        raise InputError(f"{name} must be a float16 / bfloat16 / float32 tensor, got {dtype_name(a)}")
    out = h.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise InputError(f"{name} contains NaN or Inf")
    return out


def words(a, name: str, ndim: int = 2) -> np.ndarray:
    """int32 words (stored as int32 or uint32) -> uint32, bit pattern kept."""
    w = ints(a, name, ndim)
    if w.size and (w.min() < -(1 << 31) or w.max() >= (1 << 32)):
        raise InputError(f"{name} values do not fit 32 bits")
    return (w & 0xFFFFFFFF).astype(np.uint32)


def unpack_words(w: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """uint32 words -> codes, low bits first, the 32/bits codes of a word laid out consecutively
    along `axis` (0: packed rows, 1: packed columns). Returns int64."""
    per = 32 // bits
    mask = (1 << bits) - 1
    parts = [((w >> np.uint32(bits * i)) & np.uint32(mask)).astype(np.int64) for i in range(per)]
    st = np.stack(parts, axis=axis + 1)  # (..., word, i, ...)
    shape = list(w.shape)
    shape[axis] *= per
    return st.reshape(shape)


def e4m3_values(a, name: str) -> np.ndarray:
    """float8_e4m3fn scales given as raw bytes (uint8), a torch float8_e4m3fn tensor or float
    values that are e4m3 numbers -> float64 values."""
    dt = dtype_name(a)
    if dt.startswith("float8") and dt != "float8_e4m3fn":
        raise InputError(f"{name} must be float8_e4m3fn, got {dt}")
    h = host(a, name)
    if h.dtype == np.uint8:
        if np.any((h & 0x7F) == 0x7F):
            raise InputError(f"{name} contains e4m3 NaN bytes (0x7f / 0xff)")
        return E4M3[h.astype(np.int64)]
    if h.dtype.kind != "f":
        raise InputError(f"{name} must be float8_e4m3fn (or its bytes as uint8), got {dt}")
    v = h.astype(np.float64)
    finite = E4M3[np.isfinite(E4M3)]
    if not np.all(np.isin(v, finite)):
        raise InputError(f"{name} holds values that are not float8_e4m3fn numbers")
    return v


def pick_scale_dtype(requested, scales_src, default: str = "float16") -> str:
    """The scale dtype: `requested`, else bfloat16 when the checkpoint's scales are bfloat16,
    else `default`."""
    if requested is not None:
        if requested not in ("float16", "bfloat16"):
            raise InputError(f"scale_dtype must be float16 or bfloat16, got {requested}")
        return requested
    if scales_src is not None and dtype_name(scales_src) == "bfloat16":
        return "bfloat16"
    return default


def check_fits(values: np.ndarray, scale_dtype: str, what: str) -> None:
    """Raise if finite non-zero `values` overflow or flush to zero in `scale_dtype`."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        back = halves.from_bits(halves.to_bits(v, scale_dtype), scale_dtype)
    bad = (~np.isfinite(back)) | ((v != 0) & (back == 0))
    if np.any(bad):
        other = "bfloat16" if scale_dtype == "float16" else "float16"
        raise InputError(f"{what} do not fit {scale_dtype} (e.g. {v[bad].flat[0]:g}); pass scale_dtype={other!r}")


def group_size_of(k: int, g: int, group_size, g_idx=None) -> int:
    """The checkpoint's group size: `group_size` if given; -1 for one group; else the number
    of columns in group 0 of g_idx, or K / G."""
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
            raise InputError(
                f"group_size must be an int (-1: one group), got {type(group_size).__name__} {group_size!r}"
            )
        gs = int(group_size)
        want = 1 if gs == -1 else (-(-k // gs) if gs > 0 else None)
        if want != g:
            raise InputError(f"group_size={gs} gives {want} groups over {k} inputs, but the scales have {g} rows")
        return -1 if g == 1 else gs
    if g == 1:
        return -1
    if g_idx is not None:
        gs = int(np.count_nonzero(g_idx == 0))
        if gs > 0 and -(-k // gs) == g:
            return gs
    if k % g:
        raise InputError(f"cannot infer the group size from {g} groups over {k} inputs; pass group_size=")
    return k // g


def check_g_idx(g_idx, k: int, g: int, gs: int):
    """g_idx -> int64 (K,), or None where it carries no act-order (trivial, all -1, one group)."""
    if g_idx is None:
        return None
    gi = ints(g_idx, "g_idx").reshape(-1)
    if gi.shape != (k,):
        raise InputError(f"g_idx must have in_features={k} entries, got {gi.shape[0]}")
    if np.all(gi == -1):  # compressed-tensors' "not set"
        return None
    if gi.min() < 0 or gi.max() >= g:
        raise InputError(f"g_idx values must lie in [0, {g}) (one per group of scales)")
    if g == 1 or gs == -1 or np.array_equal(gi, np.arange(k) // gs):
        return None
    return gi


def regroup(gs: int, k: int, scales: np.ndarray, extra: list, g_idx):
    """Map a group size the kernel lacks (e.g. 256, 1024, 96) onto the largest kernel group
    size dividing it, repeating each (G, N) row of `scales` and `extra` (zeros / offsets, or
    None); a group of gs columns becomes gs/sub groups of sub columns with the same values.
    Returns (group_size, scales, extra, g_idx)."""
    if gs == -1 or gs in KERNEL_GROUPS:
        return gs, scales, extra, g_idx
    sub = next((c for c in KERNEL_GROUPS if gs % c == 0), None)
    if sub is None:
        raise UnsupportedError(
            f"group size {gs} is not supported: the kernel takes groups of "
            f"{', '.join(map(str, KERNEL_GROUPS))} (or multiples of them) or -1"
        )
    if g_idx is None:
        src = (np.arange(-(-k // sub)) * sub) // gs  # source group of each new group
    else:
        f = gs // sub
        order = np.argsort(g_idx, kind="stable")
        counts = np.bincount(g_idx, minlength=scales.shape[0])
        start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(k, dtype=np.int64)
        rank[order] = np.arange(k) - start[g_idx[order]]
        g_idx = g_idx * f + rank // sub
        src = np.repeat(np.arange(scales.shape[0]), f)
    return sub, scales[src], [None if e is None else e[src] for e in extra], g_idx


def finish_grouped(
    qtype: str,
    codes: np.ndarray,
    s: np.ndarray,
    zeros,
    k: int,
    g: int,
    group_size,
    g_idx_raw,
    scale_dtype,
    scale_src,
    scale_name: str,
):
    """The common tail of the grouped integer formats (GPTQ, compressed-tensors): settle the
    group size (from g_idx, K / G or the override), check act-order and that the scales fit the
    scale dtype, split unsupported group sizes, and build the QuantizedWeight."""
    from jitmarlin.weights.quant import from_codes

    gs = group_size_of(k, g, group_size, g_idx_raw)
    gi = check_g_idx(g_idx_raw, k, g, gs)
    sdt = pick_scale_dtype(scale_dtype, scale_src)
    check_fits(s, sdt, scale_name)
    gs, s, (zeros,), gi = regroup(gs, k, s, [zeros], gi)
    return from_codes(qtype, codes, s, gs, zeros=zeros, g_idx=gi, scale_dtype=sdt)
