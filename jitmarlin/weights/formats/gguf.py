"""GGUF / GGML block-quantized tensors (llama.cpp)."""

from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.arrays import is_torch
from jitmarlin.weights.quant import E4M3, QuantizedWeight, from_codes

from ._common import check_fits, dtype_name, host, pick_scale_dtype

# ggml_type enum (ggml.h / gguf-py GGMLQuantizationType)
GGML_TYPES = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q5_0": 6,
    "Q5_1": 7,
    "Q8_0": 8,
    "Q8_1": 9,
    "Q2_K": 10,
    "Q3_K": 11,
    "Q4_K": 12,
    "Q5_K": 13,
    "Q6_K": 14,
    "Q8_K": 15,
    "IQ2_XXS": 16,
    "IQ2_XS": 17,
    "IQ3_XXS": 18,
    "IQ1_S": 19,
    "IQ4_NL": 20,
    "IQ3_S": 21,
    "IQ2_S": 22,
    "IQ4_XS": 23,
    "I8": 24,
    "I16": 25,
    "I32": 26,
    "I64": 27,
    "F64": 28,
    "IQ1_M": 29,
    "BF16": 30,
    "TQ1_0": 34,
    "TQ2_0": 35,
    "MXFP4": 39,
    "NVFP4": 40,
    "Q1_0": 41,
}
GGML_NAMES = {v: k for k, v in GGML_TYPES.items()}

# (elements per block, bytes per block) of the types converted here
BLOCKS = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q2_K": (256, 84),
    "Q3_K": (256, 110),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "MXFP4": (32, 17),
    "NVFP4": (64, 36),
}
SUPPORTED = tuple(BLOCKS)


class GGUFTypeError(InputError, UnsupportedError):
    """A GGUF tensor type from_gguf cannot take (an InputError, and an UnsupportedError as
    before, so either except clause catches it)."""


def _type_name(ggml_type) -> str:
    if isinstance(ggml_type, str):
        name = ggml_type.strip().upper()
        if name.startswith("GGML_TYPE_"):
            name = name[len("GGML_TYPE_") :]
        if name not in GGML_TYPES:
            raise InputError(f"unknown ggml type {ggml_type!r}; known: {', '.join(GGML_TYPES)}")
        return name
    try:
        v = int(ggml_type)  # int or gguf.GGMLQuantizationType
    except (TypeError, ValueError):
        raise InputError(f"ggml_type must be a type name or its integer enum, got {ggml_type!r}") from None
    if v not in GGML_NAMES:
        raise InputError(f"unknown ggml type enum {v}")
    return GGML_NAMES[v]


def _raw_bytes(raw) -> np.ndarray:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=np.uint8)
    if is_torch(raw) and dtype_name(raw) != "uint8":
        import torch

        raw = raw.detach().cpu().contiguous().view(torch.uint8)
    h = host(raw, "raw")
    return np.ascontiguousarray(h).reshape(-1).view(np.uint8)


def _f16(b: np.ndarray) -> np.ndarray:
    """(..., 2) little-endian bytes -> float64."""
    return np.ascontiguousarray(b).view("<f2")[..., 0].astype(np.float64)


def _low_high(qs: np.ndarray) -> np.ndarray:
    """(..., m) bytes -> (..., 2m) nibbles: low nibbles are elements 0..m-1, high m..2m-1."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int64)


def _bits(b: np.ndarray, width: int, count: int) -> np.ndarray:
    """(R, c, L) bytes -> (R, c * count * L) fields of `width` bits: element (i, s, l) (in that
    order) is bits width*s .. width*s + width - 1 of byte b[:, i, l]. The K-quants' layout: a
    byte holds fields of elements L apart."""
    sh = (np.arange(count, dtype=np.int64) * width).reshape(1, 1, count, 1)
    fields = (b.astype(np.int64)[:, :, None, :] >> sh) & ((1 << width) - 1)
    return fields.reshape(b.shape[0], -1)


def _q4k_scale_min(sc12: np.ndarray):
    """The 8 six-bit scales and mins of a Q4_K super-block (12 bytes), llama.cpp's
    get_scale_min_k4: j < 4: sc = b[j] & 63, m = b[j+4] & 63; j >= 4: sc = (b[j+4] & 15) |
    (b[j-4] >> 6) << 4, m = (b[j+4] >> 4) | (b[j] >> 6) << 4."""
    b = sc12.astype(np.int64)
    lo, mid, hi = b[:, 0:4], b[:, 4:8], b[:, 8:12]
    sc = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=1)
    mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
    return sc, mn


def _new_types(name: str, flat: np.ndarray):
    """Q5_0, Q5_1 and the K-quants but Q4_K: (R, bytes) blocks -> (qtype, codes (R, B), scales
    (R, B / gs), offsets (R, B / gs) or None, gs), every value exact in float64."""
    r = flat.shape[0]
    if name in ("Q5_0", "Q5_1"):
        at = 2 if name == "Q5_0" else 4
        d = _f16(flat[:, 0:2])[:, None]
        hb = np.unpackbits(flat[:, at : at + 4], axis=1, bitorder="little").astype(np.int64)
        q = _low_high(flat[:, at + 4 : at + 20]) | (hb << 4)  # 0..31
        if name == "Q5_0":  # d (q - 16)
            return "uint8b128", q + 112, d, None, 32
        return "uint8", q + 128, d, _f16(flat[:, 2:4])[:, None], 32  # d q + m
    if name == "Q5_K":
        d, dmin = _f16(flat[:, 0:2])[:, None], _f16(flat[:, 2:4])[:, None]
        sc, mn = _q4k_scale_min(flat[:, 4:16])  # (R, 8)
        hb = _bits(flat[:, 16:48].reshape(r, 1, 32), 1, 8)  # bit j of byte l: 32j + l
        q = _bits(flat[:, 48:176].reshape(r, 4, 32), 4, 2) | (hb << 4)  # nibbles as Q4_K
        return "uint8", q + 128, d * sc, -(dmin * mn), 32
    if name == "Q6_K":
        ql = _bits(flat[:, 0:128].reshape(r, 2, 64), 4, 2)  # 128h + 64t + i
        qh = _bits(flat[:, 128:192].reshape(r, 2, 32), 2, 4)  # 128h + 32s + l
        sc = np.ascontiguousarray(flat[:, 192:208]).view(np.int8).astype(np.int64)
        d = _f16(flat[:, 208:210])[:, None]
        return "uint8b128", (ql | (qh << 4)) + 96, d * sc, None, 16  # d sc (q - 32)
    if name == "Q3_K":
        hb = _bits(flat[:, 0:32].reshape(r, 1, 32), 1, 8)
        q = _bits(flat[:, 32:96].reshape(r, 2, 32), 2, 4) - 4 * (1 - hb)  # -4..3
        lo = _bits(flat[:, 96:104].reshape(r, 1, 8), 4, 2)
        hi = _bits(flat[:, 104:108].reshape(r, 1, 4), 2, 4)
        d = _f16(flat[:, 108:110])[:, None]
        return "uint4b8", q + 8, d * ((lo | (hi << 4)) - 32), None, 16
    # Q2_K
    sc = flat[:, 0:16].astype(np.int64)
    q = _bits(flat[:, 16:80].reshape(r, 2, 32), 2, 4)  # 0..3
    d, dmin = _f16(flat[:, 80:82])[:, None], _f16(flat[:, 82:84])[:, None]
    return "uint4", q + 8, d * (sc & 15), -(dmin * (sc >> 4)), 16


def from_gguf(raw, ggml_type, shape, *, scale_dtype: str | None = None, name: str | None = None) -> QuantizedWeight:
    """Convert one GGUF tensor's block data.

    raw: the tensor's bytes as stored in the .gguf file (bytes, or a uint8 array of any shape,
    e.g. GGUFReader's tensor.data). ggml_type: a name ("Q4_K", "GGML_TYPE_Q4_K") or the enum
    value (an int or gguf.GGMLQuantizationType). shape: (N, K) = (out_features, in_features),
    the torch.nn.Linear shape. GGUF lists dimensions fastest first (ne = [K, N], which is what
    GGUFReader reports as tensor.shape): pass it reversed. The bytes are N rows of K / B
    blocks (B elements per block); K must be a multiple of B. name: the tensor's name, quoted
    in errors.

    Types (d, dmin, m: little-endian fp16; bytes within a block in this order; "nibbles as
    Q4_0": low nibbles are elements 0..15, high nibbles 16..31; "nibbles as Q4_K": byte l of
    32-byte chunk c holds element 64c + l (low) and 64c + 32 + l (high); "crumbs": bits 2s..2s+1
    of byte l of 32-byte half h hold element 128h + 32s + l):
      Q4_0  B=32, 18 B: d, 16 B nibbles as Q4_0; w = d (q - 8)   -> uint4b8, group 32
      Q4_1  B=32, 20 B: d, m, nibbles as Q4_0; w = d q + m       -> uint4, group 32,
            offsets 8 d + m (from_codes' w = (c - 8) s + m)
      Q5_0  B=32, 22 B: d, 4 B high bits (bit j of the little-endian word: element j), 16 B
            nibbles as Q4_0; w = d (q - 16)                       -> uint8b128, codes q + 112, group 32
      Q5_1  B=32, 24 B: d, m, 4 B high bits, 16 B nibbles; w = d q + m
                                                                  -> uint8, codes q + 128, offsets m
      Q8_0  B=32, 34 B: d, 32 int8;  w = d q                      -> uint8b128 (codes q + 128)
      Q2_K  B=256, 84 B: 16 B (scale | min << 4) of 16 sub-blocks of 16, 64 B crumbs, d, dmin;
            w = d sc_j q - dmin m_j                               -> uint4, codes q + 8, group 16,
            scales d sc_j, offsets -dmin m_j
      Q3_K  B=256, 110 B: 32 B high-bit mask (bit j of byte l: element 32j + l), 64 B crumbs,
            12 B of 6-bit scales (low nibbles of bytes 0..7 then their high nibbles, top 2 bits
            from bytes 8..11), d; q = crumb - 4 (mask bit clear) or crumb (set), in -4..3;
            w = d (sc_j - 32) q                                   -> uint4b8, codes q + 8, group 16
      Q4_K  B=256, 144 B: d, dmin, 12 B of 6-bit (scale, min) pairs for 8 sub-blocks of 32
            (llama.cpp get_scale_min_k4), 128 B nibbles as Q4_K;
            w = d sc_j q - dmin m_j                               -> uint4, group 32, scales d sc_j,
            offsets 8 d sc_j - dmin m_j
      Q5_K  B=256, 176 B: d, dmin, 12 B (scale, min) pairs as Q4_K, 32 B high bits (bit j of byte
            l: element 32j + l), 128 B nibbles as Q4_K; w = d sc_j q - dmin m_j
                                                                  -> uint8, codes q + 128, group 32,
            scales d sc_j, offsets -dmin m_j
      Q6_K  B=256, 210 B: 128 B low nibbles (byte i of 64-byte half h: element 128h + i, high
            nibble 128h + 64 + i), 64 B crumbs (the top 2 bits), 16 int8 scales, d;
            w = d sc_j (q - 32)                                   -> uint8b128, codes q + 96, group 16
      MXFP4 B=32, 17 B: e8m0 exponent e, 16 B e2m1 nibbles as Q4_0;
            w = e2m1(q) * 2^(e - 127)                             -> mxfp4 (bf16 scales by default)
      NVFP4 B=64, 36 B: 4 unsigned-e4m3 scales (one per 16), 32 B: bytes 8j..8j+7 hold
            elements 16j..16j+7 (low nibbles) and 16j+8..16j+15 (high);
            w = e2m1(q) * ue4m3                                   -> nvfp4, global scale 1
    The K-quants' sub-blocks become the weight's groups (16 and 32 are kernel group sizes), and
    their codes are kept, widened to 4 bits (Q2_K, Q3_K) or 8 bits (Q5_x, Q6_K), so the only
    error is the rounding of each group's combined scale s = d sc_j and offset o to the scale
    dtype (fp16 unless scale_dtype says; bf16 for MXFP4): with e(x) = |x - round(x)| <=
    u |x| + t (fp16: u = 2^-11, t = 2^-25 for subnormals; bf16: u = 2^-8), each weight is off
    llama.cpp's exact value by at most |c| e(s) + e(o), c the code's offset from the format's
    zero (below), plus the float32 rounding of the result:
      exact:  Q4_0, Q5_0, Q8_0, MXFP4, NVFP4; Q5_1 (d, m are fp16 already; bf16 rounds them)
      Q4_1    e(8 d + m)                                 <= 2^-11 |8 d + m|
      Q2_K    3 e(d sc_j) + e(dmin m_j)                  <= 3 * 2^-11 d sc_j + 2^-11 dmin m_j
      Q3_K    4 e(d (sc_j - 32))                         <= 2^-9 of the step |d (sc_j - 32)|
      Q4_K    8 e(d sc_j) + e(8 d sc_j - dmin m_j)       <= 2^-7 of the step + 2^-11 dmin m_j
      Q5_K    31 e(d sc_j) + e(dmin m_j)                 <= 2^-6 of the step + 2^-11 dmin m_j
      Q6_K    32 e(d sc_j)                               <= 2^-6 of the step |d sc_j|
    (fp16 bounds, + t per rounded value; llama.cpp's fp32 products d sc_j q are exact, its sum
    with the offset rounds once.) d sc_j needs up to 18 significant bits, and no 8-bit code can absorb sc_j
    (|q - 32| sc_j reaches 4096 for Q6_K), so that rounding is the floor for the K-quants.
    Other types (Q8_1, Q8_K, the IQ and TQ types, Q1_0) raise GGUFTypeError (an InputError and
    an UnsupportedError) naming the tensor and its type; F16 / BF16 / F32 / F64 are not quantized.
    """
    tname = _type_name(ggml_type)
    what = f"GGUF tensor {name!r} ({tname})" if name is not None else f"GGUF {tname}"
    if tname not in BLOCKS:
        if tname in ("F32", "F16", "BF16", "F64"):
            raise GGUFTypeError(f"{what} is not quantized: dequantize and use jitmarlin.quantize")
        raise GGUFTypeError(
            f"{what}: type {tname} is not supported: its codes do not map onto "
            f"the kernel types (supported: {', '.join(SUPPORTED)})"
        )
    try:
        n, k = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise InputError(f"{what}: shape must be (out_features, in_features), got {shape!r}") from None
    bs, tsize = BLOCKS[tname]
    if n <= 0 or k <= 0 or k % bs:
        raise InputError(
            f"{what}: in_features ({k}) must be a positive multiple of the "
            f"block size {bs} (shape is (N, K), the reverse of GGUF's ne = [K, N])"
        )
    data = _raw_bytes(raw)
    want = n * (k // bs) * tsize
    if data.size != want:
        raise InputError(
            f"{what} tensor of shape (N={n}, K={k}) takes {want} bytes, got "
            f"{data.size} (shape is (N, K), the reverse of GGUF's ne = [K, N])"
        )
    blk = data.reshape(n, k // bs, tsize)
    sdt = pick_scale_dtype(scale_dtype, None, default="bfloat16" if tname == "MXFP4" else "float16")

    if tname in ("Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q3_K", "Q2_K"):
        qtype, codes, s, off, gs = _new_types(tname, blk.reshape(n * (k // bs), tsize))
        s = s.reshape(n, k // gs)
        check_fits(s, sdt, f"{what} scales")
        if off is not None:
            off = off.reshape(n, k // gs)
            check_fits(off, sdt, f"{what} offsets")
            off = off.T
        return from_codes(qtype, codes.reshape(n, k), s.T, gs, offsets=off, scale_dtype=sdt)

    if tname == "Q4_0":
        d = _f16(blk[..., 0:2])  # (N, K/32)
        codes = _low_high(blk[..., 2:18]).reshape(n, k)
        check_fits(d, sdt, f"{what} scales")
        return from_codes("uint4b8", codes, d.T, 32, scale_dtype=sdt)
    if tname == "Q4_1":
        d, m = _f16(blk[..., 0:2]), _f16(blk[..., 2:4])
        codes = _low_high(blk[..., 4:20]).reshape(n, k)
        check_fits(d, sdt, f"{what} scales")
        return from_codes("uint4", codes, d.T, 32, offsets=(8 * d + m).T, scale_dtype=sdt)
    if tname == "Q8_0":
        d = _f16(blk[..., 0:2])
        q = np.ascontiguousarray(blk[..., 2:34]).view(np.int8).astype(np.int64)
        check_fits(d, sdt, f"{what} scales")
        return from_codes("uint8b128", (q + 128).reshape(n, k), d.T, 32, scale_dtype=sdt)
    if tname == "Q4_K":
        nb = k // 256
        flat = blk.reshape(n * nb, 144)
        d, dmin = _f16(flat[:, 0:2]), _f16(flat[:, 2:4])
        sc, mn = _q4k_scale_min(flat[:, 4:16])  # (n*nb, 8)
        qs = flat[:, 16:144].reshape(n * nb, 4, 32)
        codes = np.stack([qs & 0xF, qs >> 4], axis=2).astype(np.int64)  # (n*nb, 4, 2, 32)
        codes = codes.reshape(n, k)
        s = (d[:, None] * sc).reshape(n, nb * 8)  # exact in float64
        off = (8 * d[:, None] * sc - dmin[:, None] * mn).reshape(n, nb * 8)
        check_fits(s, sdt, f"{what} scales (d * sc)")
        return from_codes("uint4", codes, s.T, 32, offsets=off.T, scale_dtype=sdt)
    if tname == "MXFP4":
        e = blk[..., 0].astype(np.int64)
        if np.any(e == 255):
            raise InputError(f"{what}: scale exponent 255 (2^128) does not fit a 16-bit scale")
        codes = _low_high(blk[..., 1:17]).reshape(n, k)
        s = np.ldexp(1.0, e - 127)
        check_fits(s, sdt, f"{what} scales")
        return from_codes("mxfp4", codes, s.T, 32, scale_dtype=sdt)
    # NVFP4
    sb = blk[..., 0:4].astype(np.int64)  # (N, K/64, 4)
    if np.any(sb >= 0x80):
        raise InputError(f"{what}: block scales are unsigned e4m3: bytes must be below 0x80")
    s = np.where(sb == 0x7F, 0.0, E4M3[sb & 0x7F]).reshape(n, k // 16)
    qs = blk[..., 4:36].reshape(n, k // 64, 4, 8)
    codes = _low_high(qs).reshape(n, k)
    return from_codes("nvfp4", codes, s.T, 16, scale_dtype=sdt)
