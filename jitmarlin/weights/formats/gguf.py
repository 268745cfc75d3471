"""GGUF / GGML block-quantized tensors (llama.cpp)."""
from __future__ import annotations

import numpy as np

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.arrays import is_torch
from jitmarlin.weights.quant import E4M3, QuantizedWeight, from_codes

from ._common import check_fits, dtype_name, host, pick_scale_dtype

# ggml_type enum (ggml.h / gguf-py GGMLQuantizationType)
GGML_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9,
    "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15, "IQ2_XXS": 16,
    "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22,
    "IQ4_XS": 23, "I8": 24, "I16": 25, "I32": 26, "I64": 27, "F64": 28, "IQ1_M": 29,
    "BF16": 30, "TQ1_0": 34, "TQ2_0": 35, "MXFP4": 39, "NVFP4": 40, "Q1_0": 41,
}
GGML_NAMES = {v: k for k, v in GGML_TYPES.items()}

# (elements per block, bytes per block) of the types converted here
BLOCKS = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q8_0": (32, 34), "Q4_K": (256, 144),
          "MXFP4": (32, 17), "NVFP4": (64, 36)}
SUPPORTED = tuple(BLOCKS)


def _type_name(ggml_type) -> str:
    if isinstance(ggml_type, str):
        name = ggml_type.strip().upper()
        if name.startswith("GGML_TYPE_"):
            name = name[len("GGML_TYPE_"):]
        if name not in GGML_TYPES:
            raise InputError(f"unknown ggml type {ggml_type!r}; known: {', '.join(GGML_TYPES)}")
        return name
    try:
        v = int(ggml_type)                                   # int or gguf.GGMLQuantizationType
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


def _q4k_scale_min(sc12: np.ndarray):
    """The 8 six-bit scales and mins of a Q4_K super-block (12 bytes), llama.cpp's
    get_scale_min_k4: j < 4: sc = b[j] & 63, m = b[j+4] & 63; j >= 4: sc = (b[j+4] & 15) |
    (b[j-4] >> 6) << 4, m = (b[j+4] >> 4) | (b[j] >> 6) << 4."""
    b = sc12.astype(np.int64)
    lo, mid, hi = b[:, 0:4], b[:, 4:8], b[:, 8:12]
    sc = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=1)
    mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
    return sc, mn


def from_gguf(raw, ggml_type, shape, *, scale_dtype: str | None = None) -> QuantizedWeight:
    """Convert one GGUF tensor's block data.

    raw: the tensor's bytes as stored in the .gguf file (bytes, or a uint8 array of any shape,
    e.g. GGUFReader's tensor.data). ggml_type: a name ("Q4_K", "GGML_TYPE_Q4_K") or the enum
    value (an int or gguf.GGMLQuantizationType). shape: (N, K) = (out_features, in_features),
    the torch.nn.Linear shape. GGUF lists dimensions fastest first (ne = [K, N], which is what
    GGUFReader reports as tensor.shape): pass it reversed. The bytes are N rows of K / B
    blocks (B elements per block); K must be a multiple of B.

    Types (d, dmin, m: little-endian fp16; bytes within a block in this order):
      Q4_0  B=32, 18 B: d, 16 B nibbles (low nibbles elements 0..15, high nibbles 16..31);
            w = d * (q - 8)                         -> uint4b8, group 32 (exact)
      Q4_1  B=32, 20 B: d, m, 16 B nibbles as Q4_0;
            w = d * q + m                           -> uint4 with offsets 8 d + m, group 32
      Q8_0  B=32, 34 B: d, 32 int8;  w = d * q     -> uint8b128 (codes q + 128), group 32 (exact)
      Q4_K  B=256, 144 B: d, dmin, 12 B of 6-bit (scale, min) pairs for 8 sub-blocks of 32
            (llama.cpp get_scale_min_k4), 128 B nibbles: byte l of 32-byte chunk c holds
            element 64c + l (low nibble, sub-block 2c) and 64c + 32 + l (high nibble, 2c + 1);
            w = d * sc_j * q - dmin * m_j           -> uint4, group 32, scales d * sc_j,
            offsets 8 * d * sc_j - dmin * m_j (from_codes' w = (q - 8) * s + m)
      MXFP4 B=32, 17 B: e8m0 exponent e, 16 B e2m1 nibbles as Q4_0;
            w = e2m1(q) * 2^(e - 127)               -> mxfp4 (exact; bf16 scales by default)
      NVFP4 B=64, 36 B: 4 unsigned-e4m3 scales (one per 16), 32 B: bytes 8j..8j+7 hold
            elements 16j..16j+7 (low nibbles) and 16j+8..16j+15 (high);
            w = e2m1(q) * ue4m3                      -> nvfp4, global scale 1 (exact)
    Q4_1 offsets and Q4_K scales (d * sc_j: up to 17 significant bits) and offsets are rounded
    to the scale dtype (fp16 unless scale_dtype says): an error of at most 8 |s - fp16(s)| plus
    half an ulp of the offset, i.e. within 2^-7 of the group's step s (plus 2^-11 of dmin * m_j),
    against llama.cpp's fp32 arithmetic (Q4_0, Q8_0, MXFP4, NVFP4 are exact).
    Q5_0, Q5_1, Q5_K, Q6_K, Q2_K, Q3_K and the IQ / TQ types need codes wider than 4 bits, or
    non-uniform codebooks, and raise UnsupportedError; F16 / BF16 / F32 are not quantized.
    """
    name = _type_name(ggml_type)
    if name not in BLOCKS:
        if name in ("F32", "F16", "BF16", "F64"):
            raise UnsupportedError(f"GGUF {name} tensors are not quantized: dequantize and use jitmarlin.quantize")
        raise UnsupportedError(f"GGUF {name} is not supported: its codes do not map onto 4/8-bit "
                               f"integer or fp4 kernel types (supported: {', '.join(SUPPORTED)})")
    try:
        n, k = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise InputError(f"shape must be (out_features, in_features), got {shape!r}") from None
    bs, tsize = BLOCKS[name]
    if n <= 0 or k <= 0 or k % bs:
        raise InputError(f"GGUF {name}: in_features ({k}) must be a positive multiple of the "
                         f"block size {bs} (shape is (N, K), the reverse of GGUF's ne = [K, N])")
    data = _raw_bytes(raw)
    want = n * (k // bs) * tsize
    if data.size != want:
        raise InputError(f"GGUF {name} tensor of shape (N={n}, K={k}) takes {want} bytes, got "
                         f"{data.size} (shape is (N, K), the reverse of GGUF's ne = [K, N])")
    blk = data.reshape(n, k // bs, tsize)

    if name == "Q4_0":
        d = _f16(blk[..., 0:2])                                     # (N, K/32)
        codes = _low_high(blk[..., 2:18]).reshape(n, k)
        sdt = pick_scale_dtype(scale_dtype, None)
        check_fits(d, sdt, "Q4_0 scales")
        return from_codes("uint4b8", codes, d.T, 32, scale_dtype=sdt)
    if name == "Q4_1":
        d, m = _f16(blk[..., 0:2]), _f16(blk[..., 2:4])
        codes = _low_high(blk[..., 4:20]).reshape(n, k)
        sdt = pick_scale_dtype(scale_dtype, None)
        check_fits(d, sdt, "Q4_1 scales")
        return from_codes("uint4", codes, d.T, 32, offsets=(8 * d + m).T, scale_dtype=sdt)
    if name == "Q8_0":
        d = _f16(blk[..., 0:2])
        q = np.ascontiguousarray(blk[..., 2:34]).view(np.int8).astype(np.int64)
        sdt = pick_scale_dtype(scale_dtype, None)
        check_fits(d, sdt, "Q8_0 scales")
        return from_codes("uint8b128", (q + 128).reshape(n, k), d.T, 32, scale_dtype=sdt)
    if name == "Q4_K":
        nb = k // 256
        flat = blk.reshape(n * nb, 144)
        d, dmin = _f16(flat[:, 0:2]), _f16(flat[:, 2:4])
        sc, mn = _q4k_scale_min(flat[:, 4:16])                      # (n*nb, 8)
        qs = flat[:, 16:144].reshape(n * nb, 4, 32)
        codes = np.stack([qs & 0xF, qs >> 4], axis=2).astype(np.int64)   # (n*nb, 4, 2, 32)
        codes = codes.reshape(n, k)
        s = (d[:, None] * sc).reshape(n, nb * 8)                    # exact in float64
        off = (8 * d[:, None] * sc - dmin[:, None] * mn).reshape(n, nb * 8)
        sdt = pick_scale_dtype(scale_dtype, None)
        check_fits(s, sdt, "Q4_K scales (d * sc)")
        return from_codes("uint4", codes, s.T, 32, offsets=off.T, scale_dtype=sdt)
    if name == "MXFP4":
        e = blk[..., 0].astype(np.int64)
        if np.any(e == 255):
            raise InputError("GGUF MXFP4 scale exponent 255 (2^128) does not fit a 16-bit scale")
        codes = _low_high(blk[..., 1:17]).reshape(n, k)
        s = np.ldexp(1.0, e - 127)
        sdt = pick_scale_dtype(scale_dtype, None, default="bfloat16")
        check_fits(s, sdt, "MXFP4 scales")
        return from_codes("mxfp4", codes, s.T, 32, scale_dtype=sdt)
    # NVFP4
    sb = blk[..., 0:4].astype(np.int64)                             # (N, K/64, 4)
    if np.any(sb >= 0x80):
        raise InputError("GGUF NVFP4 block scales are unsigned e4m3: bytes must be below 0x80")
    s = np.where(sb == 0x7F, 0.0, E4M3[sb & 0x7F]).reshape(n, k // 16)
    qs = blk[..., 4:36].reshape(n, k // 64, 4, 8)
    codes = _low_high(qs).reshape(n, k)
    sdt = pick_scale_dtype(scale_dtype, None)
    return from_codes("nvfp4", codes, s.T, 16, scale_dtype=sdt)
