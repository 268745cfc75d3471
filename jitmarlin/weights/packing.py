"""The weight layout the kernel reads ("marlin-v1"), packed and unpacked with NumPy.

B = W.T (K x N) is cut into 16 x 64 blocks (k16 x n64). Within a block, lane L of a warp
(g = L // 4, t = L % 4) holds four 32-bit words; word j carries the mma B-fragments of the n8
sub-tiles 2j and 2j+1 for column g of each: values

    v0..v3 = B[2t, c0], B[2t+1, c0], B[2t+8, c0], B[2t+9, c0]      c0 = 8 * (2j) + g
    v4..v7 = the same rows for column c1 = 8 * (2j+1) + g

Nibble p of the word holds v[NIBBLE_VALUE[p]] = v0 v2 v4 v6 v1 v3 v5 v7: then a mask of
0x000f000f picks (v0, v1) into the two 16-bit halves (fragment register 0 of sub-tile 2j),
0x00f000f0 picks (v2, v3) (register 1), and the same after a shift by 8 gives sub-tile 2j+1.

Packed array: int32, shape (K/16, 2N); row kb is the N/64 blocks of k16 row kb, each 32 lanes x
4 words, so one k16 row of a tile is a contiguous run and each lane's words are one 16-byte load.

8-bit codes ("marlin-v1-8bit") give each n8 sub-tile a word of its own: word w of a lane holds
the four codes of sub-tile w (column 8w + g) in fragment order, bytes B[2t], B[2t+1], B[2t+8],
B[2t+9]. A lane's 8 words are two 16-byte chunks; chunk c (sub-tiles 4c..4c+3) of all 32 lanes
comes first, then chunk c + 1, so each warp load is 512 contiguous bytes. Packed shape
(K/16, 4N) int32.

Grouped scales (G, N) are permuted inside each 64 columns so that lane g finds the scales of
columns 8s + g (s = 0..7) in one 16-byte load: position 8g + s holds column 8s + g. Per-channel
scales stay in natural order (they are applied in the epilogue to columns 2t, 2t+1).
"""

from __future__ import annotations

import numpy as np

LAYOUT = "marlin-v1"

# nibble position of value i (inverse of NIBBLE_VALUE = [0, 2, 4, 6, 1, 3, 5, 7])
VALUE_NIBBLE = np.array([0, 4, 1, 5, 2, 6, 3, 7])
NIBBLE_VALUE = np.argsort(VALUE_NIBBLE)


def _fragment_index() -> tuple[np.ndarray, np.ndarray]:
    """(k, n) offsets inside a 16 x 64 block of value i of word j of lane L: arrays (32, 4, 8)."""
    lane = np.arange(32)[:, None, None]
    j = np.arange(4)[None, :, None]
    i = np.arange(8)[None, None, :]
    g, t = lane // 4, lane % 4
    k = 2 * t + np.array([0, 1, 8, 9])[i % 4]
    n = 8 * (2 * j + i // 4) + g
    return np.broadcast_to(k, (32, 4, 8)), np.broadcast_to(n, (32, 4, 8))


_K_IDX, _N_IDX = _fragment_index()


def _fragment_index8() -> tuple[np.ndarray, np.ndarray]:
    """(k, n) offsets inside a 16 x 64 block of byte b of word j of chunk c of lane L: (2, 32, 4, 4)."""
    c = np.arange(2)[:, None, None, None]
    lane = np.arange(32)[None, :, None, None]
    j = np.arange(4)[None, None, :, None]
    b = np.arange(4)[None, None, None, :]
    g, t = lane // 4, lane % 4
    k = 2 * t + np.array([0, 1, 8, 9])[b]
    n = 8 * (4 * c + j) + g
    shape = (2, 32, 4, 4)
    return np.broadcast_to(k, shape), np.broadcast_to(n, shape)


_K_IDX8, _N_IDX8 = _fragment_index8()
# position p (0..63) of the permuted scale row holds column SCALE_COLUMN[p]
SCALE_COLUMN = np.array([8 * (p % 8) + p // 8 for p in range(64)])


def _xp(a):
    """The array module of `a`: NumPy, or CuPy for device arrays (packing runs on either)."""
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy
    return np


def pack_int4(q) -> np.ndarray:
    """q: (N, K) integers in [0, 15] -> packed int32 (K/16, 2N). NumPy in, NumPy out; CuPy in,
    CuPy out."""
    xp = _xp(q)
    q = xp.asarray(q)
    n, k = q.shape
    if n % 64 or k % 16:
        raise ValueError(f"pack_int4 needs N % 64 == 0 and K % 16 == 0, got {q.shape}")
    if int(q.min()) < 0 or int(q.max()) > 15:
        raise ValueError("4-bit values must lie in [0, 15]")
    blocks = q.T.astype(xp.uint32).reshape(k // 16, 16, n // 64, 64).transpose(0, 2, 1, 3)
    vals = blocks[:, :, xp.asarray(_K_IDX), xp.asarray(_N_IDX)]  # (K/16, N/64, 32, 4, 8)
    shifts = xp.asarray((4 * VALUE_NIBBLE).astype(np.uint32))
    words = (vals << shifts).sum(axis=-1, dtype=xp.uint32)
    return words.reshape(k // 16, 2 * n).view(xp.int32)


def pack_int8(q) -> np.ndarray:
    """q: (N, K) integers in [0, 255] -> packed int32 (K/16, 4N). NumPy or CuPy, like pack_int4."""
    xp = _xp(q)
    q = xp.asarray(q)
    n, k = q.shape
    if n % 64 or k % 16:
        raise ValueError(f"pack_int8 needs N % 64 == 0 and K % 16 == 0, got {q.shape}")
    blocks = q.T.astype(xp.uint8).reshape(k // 16, 16, n // 64, 64).transpose(0, 2, 1, 3)
    vals = xp.ascontiguousarray(blocks[:, :, xp.asarray(_K_IDX8), xp.asarray(_N_IDX8)])  # (.., 2, 32, 4, 4)
    return vals.view(xp.uint32).reshape(k // 16, 4 * n).view(xp.int32)


def unpack_int8(packed: np.ndarray, n: int, k: int) -> np.ndarray:
    """Inverse of pack_int8: packed int32 (K/16, 4N) -> (N, K) uint8."""
    vals = np.ascontiguousarray(packed).view(np.uint8).reshape(k // 16, n // 64, 2, 32, 4, 4)
    blocks = np.empty((k // 16, n // 64, 16, 64), dtype=np.uint8)
    blocks[:, :, _K_IDX8, _N_IDX8] = vals
    return blocks.transpose(0, 2, 1, 3).reshape(k, n).T.copy()


def pack(q, bits: int):
    return pack_int4(q) if bits == 4 else pack_int8(q)


def unpack(packed, n: int, k: int, bits: int) -> np.ndarray:
    return unpack_int4(packed, n, k) if bits == 4 else unpack_int8(packed, n, k)


def unpack_int4(packed: np.ndarray, n: int, k: int) -> np.ndarray:
    """Inverse of pack_int4: packed int32 (K/16, 2N) -> (N, K) uint8."""
    words = np.asarray(packed).view(np.uint32).reshape(k // 16, n // 64, 32, 4)
    vals = (words[..., None] >> (4 * VALUE_NIBBLE).astype(np.uint32)) & 0xF  # (.., 32, 4, 8)
    blocks = np.empty((k // 16, n // 64, 16, 64), dtype=np.uint8)
    blocks[:, :, _K_IDX, _N_IDX] = vals
    return blocks.transpose(0, 2, 1, 3).reshape(k, n).T.copy()


def permute_scales(s):
    """Grouped scales (G, N) -> the kernel's per-64-column order (NumPy or CuPy)."""
    xp = _xp(s)
    g, n = s.shape
    return s.reshape(g, n // 64, 64)[:, :, xp.asarray(SCALE_COLUMN)].reshape(g, n)


def unpermute_scales(s: np.ndarray) -> np.ndarray:
    g, n = s.shape
    out = np.empty_like(s).reshape(g, n // 64, 64)
    out[:, :, SCALE_COLUMN] = s.reshape(g, n // 64, 64)
    return out.reshape(g, n)
