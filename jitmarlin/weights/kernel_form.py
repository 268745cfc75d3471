"""What a kernel reads of a weight for one activation dtype, derived from its stored form.

Stored weights (QuantizedWeight, MoEWeight) keep the canonical layout (packing.py), which every
converter, shard, concat and the dequantize oracle use. Kernels of float codes (nvfp4, mxfp4,
float8_e4m3fn) read two things differently, both for a shorter decode
(templates/dequant/fp4_*.cuh, fp8_*.cuh):

- Bits: each packed word's bits are rearranged for the activation dtype (KERNEL_BITS), so that
  the decode only masks, shifts and moves whole bytes (prmt) into place: a code's bits land
  where a half wants them, its exponent in the exponent field's low bits.
  - fp4, fp16: v0..v3 (packing.py's values of a word) one a byte at bits 1-3 (m, e0, e1) and 7
    (sign), v4..v7 at bits 4-6 and 0 of the same bytes.
  - fp4, bf16: a code spans a bf16's two bytes (m, e0 at bits 6-7 of the low byte; e1, sign at
    bits 0 and 7 of the high byte); v0..v3 keep m, e0 at bits 6-7 of byte i and e1 at bit 1,
    their sign at bit 0 of byte i + 1 (mod 4); v4..v7 the same at bits 2-3, 5 and 4.
  - fp8: each byte keeps its code, with the bits in a bf16's or fp16's order: one mask gives the
    high bytes, a shift and a mask the low bytes.
- Powers of two: a code decoded that way is its value times 2^-DECODE_EXP (fp4: 2^-14 in fp16,
  2^-126 in bf16; e4m3: 2^-8, 2^-120), exact, subnormals included. The scale rows carry 2^a of
  it, a the largest (up to DECODE_EXP) that keeps every scale finite, and the fp32 global scale
  the rest, 2^(DECODE_EXP - a). Both multiplies are exact (powers of two of finite halves). With
  e4m3 (nvfp4) or power-of-two (mxfp4) scales the product a kernel forms, decode * scale, stays
  exact in the half type: e.g. nvfp4 in fp16, scales <= 448 give a = 7 and products k * j *
  2^-17 (k: 2 * the e2m1 value, j: 2^9 * the e4m3 value, together at most 6 significant bits).
  fp8 scales up to 255 (fp16) take all of it (a = DECODE_EXP, factor 1): the products are those
  of the stored form.

Integer types read their stored form unchanged (factor 1).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.jit.arrays import to_host
from jitmarlin.weights import packing

FP4_QTYPES = ("nvfp4", "mxfp4")
FLOAT_QTYPES = FP4_QTYPES + ("float8_e4m3fn",)
ACTS = ("float16", "bfloat16")
# a float code decodes to value * 2^-DECODE_EXP[(bits, act)]
DECODE_EXP = {(4, "float16"): 14, (4, "bfloat16"): 126, (8, "float16"): 8, (8, "bfloat16"): 120}
_HALF_MAX = {"float16": 65504.0, "bfloat16": float(np.float32(3.3895313892515355e38))}


def _fp4_bits(act: str) -> np.ndarray:
    """[value v of a word][m, e0, e1, sign]: the code bit's position in the kernel's word."""
    pos = np.zeros((8, 4), dtype=np.int64)
    for i in range(4):
        if act == "float16":
            pos[i] = (8 * i + 1, 8 * i + 2, 8 * i + 3, 8 * i + 7)
            pos[4 + i] = (8 * i + 4, 8 * i + 5, 8 * i + 6, 8 * i)
        else:
            nxt = 8 * ((i + 1) % 4)  # the sign sits in the next byte (the decode rotates it back)
            pos[i] = (8 * i + 6, 8 * i + 7, 8 * i + 1, nxt)
            pos[4 + i] = (8 * i + 2, 8 * i + 3, 8 * i + 5, nxt + 4)
    return pos


# e4m3 bit c (0-2: m0..m2, 3-6: e0..e3, 7: sign) -> its bit in the kernel's byte
_FP8_BYTE = {"float16": (6, 0, 1, 2, 3, 4, 5, 7), "bfloat16": (3, 4, 5, 6, 0, 1, 2, 7)}


def _dest(bits: int, act: str) -> np.ndarray:
    """Canonical bit (0..31) -> kernel bit of a packed word."""
    dest = np.zeros(32, dtype=np.int64)
    if bits == 4:
        pos = _fp4_bits(act)
        for v in range(8):
            dest[4 * int(packing.VALUE_NIBBLE[v]) : 4 * int(packing.VALUE_NIBBLE[v]) + 4] = pos[v]
    else:
        for i in range(4):
            dest[8 * i : 8 * i + 8] = 8 * i + np.array(_FP8_BYTE[act])
    return dest


KERNEL_BITS = {(bits, act): _dest(bits, act) for bits in (4, 8) for act in ACTS}


@functools.lru_cache(maxsize=None)
def _word_tables(bits: int, act: str) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): uint32 tables of 65536 entries mapping a canonical word's low (high) 16 bits
    to their bits in the kernel's word."""
    dest = KERNEL_BITS[(bits, act)].astype(np.uint64)
    x = np.arange(1 << 16, dtype=np.uint64)[:, None]
    b = (x >> np.arange(16, dtype=np.uint64)) & 1
    lo = (b << dest[:16]).sum(axis=1, dtype=np.uint64).astype(np.uint32)
    hi = (b << dest[16:]).sum(axis=1, dtype=np.uint64).astype(np.uint32)
    return lo, hi


_CHUNK = 1 << 24  # words a pass: bounds the temporaries (about 5 words each) on a GPU


def kernel_words(packed, bits: int, act: str):
    """Canonical packed words of float codes (int32, NumPy or CuPy) -> the kernel's words for
    `act`, a new array of the same shape, dtype and array module (two table lookups a word)."""
    xp = packing._xp(packed)
    lo, hi = (xp.asarray(t) for t in _word_tables(bits, act))
    w = xp.ascontiguousarray(packed).view(xp.uint32).reshape(-1)
    out = xp.empty_like(w)
    for i in range(0, w.size, _CHUNK):
        c = w[i : i + _CHUNK]
        out[i : i + _CHUNK] = lo[c & 0xFFFF] | hi[c >> 16]
    return out.view(xp.int32).reshape(packed.shape)


def canonical_words(words, bits: int, act: str) -> np.ndarray:
    """Inverse of kernel_words (host NumPy): tests and inspection."""
    w = np.asarray(words).view(np.uint32)
    out = np.zeros_like(w)
    for c, k in enumerate(KERNEL_BITS[(bits, act)]):
        out |= ((w >> np.uint32(k)) & np.uint32(1)) << np.uint32(c)
    return out.view(np.int32)


def _values(bits, act: str, xp):
    b = xp.asarray(bits).view(xp.uint16)
    if act == "float16":
        return b.view(xp.float16).astype(xp.float32)
    return (b.astype(xp.uint32) << 16).view(xp.float32)


def _bits(vals, act: str, xp):
    if act == "float16":
        return vals.astype(xp.float16).view(xp.uint16)
    return (vals.view(xp.uint32) >> 16).astype(xp.uint16)  # exact: callers pass bf16 values


def fold_exponent(scale_bits, act: str, bits: int = 4) -> int:
    """a: the power of two the `act` scale rows of a weight of `bits`-bit float codes take of
    the decode's 2^DECODE_EXP, the largest that keeps the largest scale finite."""
    xp = packing._xp(scale_bits)
    v = xp.abs(_values(scale_bits, act, xp))
    top = float(xp.max(xp.where(xp.isfinite(v), v, 0))) if v.size else 0.0
    b = DECODE_EXP[(bits, act)]
    if top == 0.0:
        return b
    a = max(0, min(b, math.floor(math.log2(_HALF_MAX[act] / top))))
    while a > 0 and top * 2.0**a > _HALF_MAX[act]:  # (a log2 rounded up at a power of two)
        a -= 1
    return a


def scaled_bits(bits, act: str, a: int):
    """`act` bit patterns times 2^a (exact: the caller's a keeps them finite)."""
    if a == 0 or bits is None:
        return bits
    xp = packing._xp(bits)
    return _bits(_values(bits, act, xp) * np.float32(2.0**a), act, xp)


def scaled_factors(factors, factor: float) -> np.ndarray:
    """fp32 global scale(s) times `factor` (a power of two), as float32 on the host; InputError
    where one leaves the fp32 range (scales near the half type's top with a tiny global scale)."""
    out = np.asarray(to_host(factors), np.float64) * factor
    if not np.all(np.abs(out) <= np.finfo(np.float32).max):  # (NaN fails too)
        raise InputError(
            f"global scale times 2^{math.log2(factor):g} (the float decode's power of two the scales "
            "could not take) overflows float32: rescale the scales and global scale"
        )
    return out.astype(np.float32)


def _bits_of(qtype: str) -> int:
    return 4 if qtype in FP4_QTYPES else 8


def kernel_factor(qtype: str, scale_bits, act: str) -> float:
    """The power of two a kernel of `act` applies on top of the global scale(s) (1 unless a
    float type)."""
    if qtype not in FLOAT_QTYPES:
        return 1.0
    bits = _bits_of(qtype)
    return 2.0 ** (DECODE_EXP[(bits, act)] - fold_exponent(scale_bits, act, bits))


def kernel_form(qtype: str, packed, scale_bits, act: str):
    """(packed, scale bits, factor): what a kernel of `act` activations reads for a weight whose
    canonical packed words and `act` scale bits are given, and the fp32 factor its outputs take
    on top of the weight's global scale(s). Arrays keep their module (NumPy or CuPy)."""
    if qtype not in FLOAT_QTYPES:
        return packed, scale_bits, 1.0
    bits = _bits_of(qtype)
    a = fold_exponent(scale_bits, act, bits)
    words = kernel_words(packed, bits, act)
    return words, scaled_bits(scale_bits, act, a), 2.0 ** (DECODE_EXP[(bits, act)] - a)
