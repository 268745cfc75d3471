"""Tensor-parallel shards of a QuantizedWeight (QuantizedWeight.shard).

dim=0 (column-parallel): rank r keeps output rows [r N/world, (r+1) N/world); its output is that
block of the full output. dim=1 (row-parallel): rank r keeps the checkpoint-order input columns
[r K/world, (r+1) K/world); fed the matching block of x, the ranks' outputs sum to the full output.

The shard is built from the unpacked codes, the unpermuted scale and offset bit patterns, and
re-packed: no value is rounded again, so dequantize(shard) is bit for bit the slice of
dequantize(full). Act-order weights store their columns sorted by group (stored column j is
checkpoint column perm[j], in group j // group_size): a row-parallel shard gathers the stored
columns whose checkpoint column lies in its block, keeps their sorted order, and gets the local
permutation perm[j] - r K/world. That is exact only where every group the shard touches lies
wholly inside it (the layout has one scale row per group_size consecutive stored columns), so a
split that cuts a group is refused, as it is for plain grouped weights.
"""

from __future__ import annotations

import operator

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.jit.arrays import to_host
from jitmarlin.weights import packing
from jitmarlin.weights.qtypes import get_qtype, kernel_dims, shape_problem


def _int(v, what: str) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise InputError(f"shard: {what} must be an int, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise InputError(f"shard: {what} must be an int, got {type(v).__name__} {v!r}") from None


def _split(total: int, world: int, name: str, how: str, other: tuple[int, int]) -> int:
    """total / world, refused unless it divides evenly into whole multiples of 8 features."""
    if total % world:
        raise InputError(f"shard {how}: {name}={total} does not divide over world={world}")
    part = total // world
    n, k = (part, other[1]) if name == "out_features" else (other[0], part)
    why = shape_problem(n, k)
    if why:
        raise InputError(f"shard {how}: {name}={total} over world={world} gives {part} per rank: {why}")
    return part


def _check_groups(order: np.ndarray, k1: int, gs: int, act_order: bool) -> None:
    """Refuse a row split (blocks of k1 checkpoint columns) that puts one group's columns on two
    ranks. order: the checkpoint column of each stored column (perm, or 0..K-1)."""
    k0 = order.size
    ranks = order // k1
    starts = np.arange(0, k0, gs)
    lo, hi = np.minimum.reduceat(ranks, starts), np.maximum.reduceat(ranks, starts)
    cut = np.flatnonzero(lo != hi)
    if not cut.size:
        return
    g = int(cut[0])
    if not act_order:
        raise InputError(
            f"shard row-parallel (dim=1): in_features per rank ({k1}) must be a multiple of "
            f"group_size ({gs}); this split cuts quantization group {g} (columns "
            f"{g * gs}..{min(k0, (g + 1) * gs) - 1}) between ranks {int(lo[g])} and {int(hi[g])}"
        )
    raise InputError(
        f"shard row-parallel (dim=1): act-order group {g} has columns on ranks {int(lo[g])}..{int(hi[g])} "
        f"({len(cut)} of {len(starts)} groups are cut by blocks of {k1} input columns). The packed layout "
        f"keeps one scale row per {gs} consecutive sorted columns, so a group cannot be split exactly; "
        "shard this layer column-parallel (dim=0), pick a world whose blocks hold whole groups, or use "
        "a checkpoint without act-order"
    )


def _pad(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.pad(a, [(0, t - s) for s, t in zip(a.shape, shape)])


def _host_parts(qw):
    """(codes (n, k) in stored order, scales, offsets or None, natural) of `qw` on the host; scales
    and offsets unpermuted to (groups, n), or (n,) in natural order for symmetric per-channel."""
    n, k = int(qw.n), int(qw.k)
    codes = packing.unpack(np.asarray(to_host(qw.packed)), n, k, get_qtype(qw.qtype).bits)
    natural = qw.group_size == -1 and qw.offsets is None

    def host(a):
        if a is None:
            return None
        h = np.asarray(to_host(a))
        return h.copy() if natural else packing.unpermute_scales(h.reshape(-1, n))

    return codes, host(qw.scales), host(qw.offsets), natural


def shard_fields(qw, dim, rank, world) -> dict:
    """The QuantizedWeight fields of rank `rank` of `world` split along `dim` (see the module
    docstring); InputError for a split the layout cannot hold exactly."""
    dim, rank, world = _int(dim, "dim"), _int(rank, "rank"), _int(world, "world")
    if dim not in (0, 1):
        raise InputError(
            f"shard: dim must be 0 (column-parallel, split out_features) or 1 "
            f"(row-parallel, split in_features), got {dim}"
        )
    if world < 1:
        raise InputError(f"shard: world must be >= 1, got {world}")
    if not 0 <= rank < world:
        raise InputError(f"shard: rank must be in [0, world={world}), got {rank}")
    qw.validate()
    bits, gs = get_qtype(qw.qtype).bits, int(qw.group_size)
    n0, k0 = int(qw.out_features), int(qw.in_features)
    codes, s, m, natural = _host_parts(qw)
    g0 = 1 if gs == -1 else -(-k0 // gs)  # groups with data
    if not natural:
        s, m = s[:g0], None if m is None else m[:g0]
    perm = None if qw.perm is None else np.asarray(to_host(qw.perm)).astype(np.int64)

    if dim == 0:
        n1 = _split(n0, world, "out_features", "column-parallel (dim=0)", (n0, k0))
        k1, rows = k0, slice(rank * n1, (rank + 1) * n1)
        codes = codes[rows, :k0]
        s, m = s[..., rows], None if m is None else m[:, rows]
    else:
        k1 = _split(k0, world, "in_features", "row-parallel (dim=1)", (n0, k0))
        lo = rank * k1
        if gs > 0:
            _check_groups(np.arange(k0) if perm is None else perm, k1, gs, perm is not None)
        if perm is None:
            cols = np.arange(lo, lo + k1)
        else:  # stored columns whose checkpoint column is in the block
            cols = np.flatnonzero((perm >= lo) & (perm < lo + k1))
            perm = perm[cols] - lo
            if np.array_equal(perm, np.arange(k1)):
                perm = None
        codes = codes[:n0, cols]
        s, m = s[..., :n0], None if m is None else m[:, :n0]
        if gs > 0:  # whole groups, in stored (sorted) order
            groups = np.unique(cols // gs)
            s, m = s[groups], None if m is None else m[groups]
        n1 = n0

    n1p, k1p = kernel_dims(n1, k1, gs)
    codes = _pad(codes, (n1p, k1p))
    if natural:
        sc, off = _pad(s, (n1p,)), None
    else:
        g1p = 1 if gs == -1 else k1p // gs
        sc = packing.permute_scales(_pad(s, (g1p, n1p)))
        off = None if m is None else packing.permute_scales(_pad(m, (g1p, n1p)))
    return dict(
        qtype=qw.qtype,
        group_size=gs,
        n=n1p,
        k=k1p,
        packed=packing.pack(codes, bits),
        scales=np.ascontiguousarray(sc),
        scale_dtype=qw.scale_dtype,
        offsets=None if off is None else np.ascontiguousarray(off),
        global_scale=qw.global_scale,
        perm=None if perm is None else perm.astype(np.int32),
        out_features=n1,
        in_features=k1,
    )


def concat_fields(weights) -> dict:
    """The QuantizedWeight fields of `weights` stacked along the output: out_features is their sum
    and the output of the result is theirs one after another (fused q/k/v or gate/up projections of
    one input). Codes and scale bit patterns are unpacked and re-packed, never rounded again, so
    dequantize(result) is exactly the dequantized parts stacked. InputError unless every part has
    the same qtype, group_size, in_features, scale_dtype, global_scale and act-order perm."""
    ws = list(weights)
    if not ws:
        raise InputError("concat: no weights given")
    first = ws[0]
    for i, w in enumerate(ws):
        w.validate()
        for f in ("qtype", "group_size", "in_features", "scale_dtype", "k"):
            if getattr(w, f) != getattr(first, f):
                raise InputError(
                    f"concat: weight {i} has {f}={getattr(w, f)!r}, weight 0 {getattr(first, f)!r}; "
                    "only weights of one input and one format can share a GEMM"
                )
        if float(w.global_scale) != float(first.global_scale):
            raise InputError(
                f"concat: weight {i} has global_scale {float(w.global_scale)!r}, weight 0 "
                f"{float(first.global_scale)!r}; the kernel applies one global scale per GEMM"
            )
        if (w.offsets is None) != (first.offsets is None):
            has = "has" if w.offsets is not None else "lacks"
            raise InputError(f"concat: weight {i} {has} zero points and weight 0 does not")
        p0 = None if first.perm is None else np.asarray(to_host(first.perm))
        pi = None if w.perm is None else np.asarray(to_host(w.perm))
        if (p0 is None) != (pi is None) or (p0 is not None and not np.array_equal(p0, pi)):
            raise InputError(
                f"concat: weight {i} has another act-order permutation than weight 0; one GEMM gathers x in one order"
            )
    bits, gs, k = get_qtype(first.qtype).bits, int(first.group_size), int(first.k)
    natural = gs == -1 and first.offsets is None
    codes, sc, off = [], [], []
    for w in ws:
        n0 = int(w.out_features)
        c, scale, offset, _ = _host_parts(w)
        codes.append(c[:n0])
        sc.append(scale[..., :n0])
        if offset is not None:
            off.append(offset[..., :n0])
    n1 = sum(int(w.out_features) for w in ws)
    n1p, _ = kernel_dims(n1, int(first.in_features), gs)
    codes = _pad(np.concatenate(codes), (n1p, k))
    if natural:
        scales, offsets = _pad(np.concatenate(sc), (n1p,)), None
    else:
        scales = packing.permute_scales(_pad(np.concatenate(sc, axis=1), (sc[0].shape[0], n1p)))
        offsets = None if not off else packing.permute_scales(_pad(np.concatenate(off, axis=1), (off[0].shape[0], n1p)))
    return dict(
        qtype=first.qtype,
        group_size=gs,
        n=n1p,
        k=k,
        packed=packing.pack(codes, bits),
        scales=np.ascontiguousarray(scales),
        scale_dtype=first.scale_dtype,
        offsets=None if offsets is None else np.ascontiguousarray(offsets),
        global_scale=first.global_scale,
        perm=None if p0 is None else p0.astype(np.int32),
        out_features=n1,
        in_features=int(first.in_features),
    )
