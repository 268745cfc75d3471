"""Checkpoint converters (jitmarlin.formats): each test packs random raw tensors the way the
source format does (its own packer, written here independently of the converter), computes
the format's dequantisation from those raw tensors in float64, and checks
jitmarlin.dequantize(from_X(...)) against it: exactly where the scales are exact in the
scale dtype, else within the stated rounding of offsets / scales. GGUF tensors are also
checked against the gguf package's own dequantizer when it is installed."""

import numpy as np
import pytest

import jitmarlin
from jitmarlin import (
    InputError,
    UnsupportedError,
    from_awq,
    from_compressed_tensors,
    from_gguf,
    from_gptq,
    from_hqq,
    from_mxfp4,
    from_nvfp4,
)
from jitmarlin.weights import halves
from jitmarlin.weights.quant import E2M1, E4M3

# ---- helpers ---------------------------------------------------------------------------------


def fp16_scales(rng, shape, lo=2e-3, hi=3e-2):
    """Random positive scales exactly representable in fp16, as float64."""
    return rng.uniform(lo, hi, shape).astype(np.float16).astype(np.float64)


def pack32(codes, bits, axis):
    """Pack unsigned codes into int32 words along `axis`, low bits first: word r holds codes
    per*r .. per*r + per - 1 (per = 32 / bits), code per*r + i at bit bits*i. Pads with zeros."""
    per = 32 // bits
    c = np.moveaxis(np.asarray(codes, dtype=np.int64), axis, 0)
    pad = -c.shape[0] % per
    c = np.concatenate([c, np.zeros((pad,) + c.shape[1:], np.int64)])
    c = c.reshape(c.shape[0] // per, per, *c.shape[1:])
    place = np.array([1 << (bits * i) for i in range(per)], dtype=np.int64)
    word = np.tensordot(place, c, axes=([0], [1]))  # (rows, ...)
    return np.moveaxis((word & 0xFFFFFFFF).astype(np.uint32).view(np.int32), 0, axis)


def deq(qw):
    d = jitmarlin.dequantize(qw)
    assert d.dtype == np.float32 and d.shape == qw.shape
    return d.astype(np.float64)


def assert_exact(qw, want):
    got = jitmarlin.dequantize(qw)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float64).astype(np.float32))


def assert_offset_rounding(qw, want, m, sdt="float16"):
    """want (float64) up to the rounding of the offsets m (w = decode(q) * s + m, m stored in
    the scale dtype: half an ulp) and the float32 result."""
    rel = 2.0**-11 if sdt == "float16" else 2.0**-8
    tiny = 2.0**-25 if sdt == "float16" else 2.0**-134
    err = np.abs(deq(qw) - want)
    bound = rel * np.abs(m) + tiny + 2.0**-24 * np.abs(want) + 1e-30
    assert np.all(err <= bound), float((err / bound).max())


def act_order_g_idx(rng, k, gs):
    """GPTQ act-order: columns visited in a random order, group i // gs for the i-th visited."""
    perm = rng.permutation(k)
    g_idx = np.empty(k, np.int32)
    g_idx[perm] = np.arange(k) // gs
    return g_idx


# ---- GPTQ ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq(rng, bits, sym, fmt, act_order):
    n, k, gs = 128, 256, 64
    g = k // gs
    top, half = (1 << bits) - 1, 1 << (bits - 1)
    q = rng.integers(0, top + 1, (k, n))  # GPTQ's intweight is (K, N)
    s = fp16_scales(rng, (g, n))
    if sym:
        z = np.full((g, n), half)
    elif fmt == "gptq":  # v1 stores z - 1: z in 1 .. 2^bits
        z = rng.integers(1, top + 2, (g, n))
    else:
        z = rng.integers(0, top + 1, (g, n))
    stored = z - 1 if fmt == "gptq" else z
    g_idx = act_order_g_idx(rng, k, gs) if act_order else (np.arange(k) // gs).astype(np.int32)
    qw = from_gptq(
        pack32(q, bits, 0),
        pack32(stored, bits, 1),
        s.astype(np.float16),
        g_idx,
        bits=bits,
        sym=sym,
        checkpoint_format=fmt,
    )
    assert (
        qw.qtype
        == {(4, True): "uint4b8", (4, False): "uint4", (8, True): "uint8b128", (8, False): "uint8"}[(bits, sym)]
    )
    assert qw.group_size == gs and (qw.perm is not None) == act_order
    want = (q.T - z[g_idx].T) * s[g_idx].T  # (N, K)
    if sym:
        assert_exact(qw, want)
    else:
        assert_offset_rounding(qw, want, ((8 if bits == 4 else 128) - z[g_idx].T) * s[g_idx].T)


def test_gptq_torch_inputs_and_no_qzeros(rng):
    torch = pytest.importorskip("torch")
    n, k, gs = 64, 128, 32
    q = rng.integers(0, 16, (k, n))
    s = fp16_scales(rng, (k // gs, n))
    qw = from_gptq(
        torch.from_numpy(pack32(q, 4, 0)),
        None,
        torch.from_numpy(s.astype(np.float16)),
        torch.arange(k, dtype=torch.int32) // gs,
    )
    assert_exact(qw, (q.T - 8) * np.repeat(s.T, gs, axis=1))


def test_gptq_large_group_is_split_into_kernel_groups(rng):
    """group 256 -> groups of 128 with repeated scales, plain and act-order: exact."""
    n, k, gs = 64, 512, 256
    q = rng.integers(0, 16, (k, n))
    s = fp16_scales(rng, (k // gs, n))
    for g_idx in ((np.arange(k) // gs).astype(np.int32), act_order_g_idx(rng, k, gs)):
        qw = from_gptq(pack32(q, 4, 0), pack32(np.full((2, n), 7), 4, 1), s, g_idx)
        assert qw.group_size == 128
        assert_exact(qw, (q.T - 8) * s[g_idx].T)


def test_gptq_per_channel_and_padded(rng):
    """N=72, K=200 (padded to 128 x 256 inside): per-channel, and groups of 128 with a partial
    last group (group size from g_idx, or given)."""
    n, k = 72, 200
    q = rng.integers(0, 16, (k, n))
    s1 = fp16_scales(rng, (1, n))
    qw = from_gptq(pack32(q, 4, 0), None, s1, np.zeros(k, np.int32))
    assert qw.group_size == -1 and qw.shape == (n, k) and (qw.n, qw.k) == (128, 256)
    assert_exact(qw, (q.T - 8) * s1.T)
    s2 = fp16_scales(rng, (2, n))
    z = rng.integers(0, 16, (2, n))
    g_idx = np.arange(k) // 128
    want = (q.T - z[g_idx].T) * s2[g_idx].T
    m = (8 - z[g_idx].T) * s2[g_idx].T
    qw = from_gptq(pack32(q, 4, 0), pack32(z, 4, 1), s2, g_idx, sym=False, checkpoint_format="gptq_v2")
    assert qw.group_size == 128
    assert_offset_rounding(qw, want, m)
    qw = from_gptq(pack32(q, 4, 0), pack32(z, 4, 1), s2, sym=False, checkpoint_format="gptq_v2", group_size=128)
    assert_offset_rounding(qw, want, m)


def test_gptq_errors(rng):
    qweight = pack32(rng.integers(0, 16, (128, 64)), 4, 0)
    qzeros = pack32(np.full((2, 64), 7), 4, 1)
    s = fp16_scales(rng, (2, 64))
    with pytest.raises(UnsupportedError, match="3-bit"):
        from_gptq(qweight, qzeros, s, bits=3)
    with pytest.raises(InputError, match="bits must be 4 or 8"):
        from_gptq(qweight, qzeros, s, bits=5)
    with pytest.raises(InputError, match="checkpoint_format"):
        from_gptq(qweight, qzeros, s, checkpoint_format="gptq_v3")
    with pytest.raises(InputError, match="integer"):
        from_gptq(qweight.astype(np.float32), qzeros, s)
    with pytest.raises(InputError, match="scales must be"):
        from_gptq(qweight, qzeros, s[:, :32])
    with pytest.raises(InputError, match="qzeros must be"):
        from_gptq(qweight, qzeros[:1], s)
    with pytest.raises(InputError, match="symmetric zero point"):
        from_gptq(qweight, pack32(np.full((2, 64), 3), 4, 1), s)
    with pytest.raises(InputError, match="symmetric zero point"):  # v2 sym is 8, not 7
        from_gptq(qweight, qzeros, s, checkpoint_format="gptq_v2")
    with pytest.raises(InputError, match="needs qzeros"):
        from_gptq(qweight, None, s, sym=False)
    with pytest.raises(InputError, match="g_idx must have"):
        from_gptq(qweight, qzeros, s, np.zeros(100, np.int32))
    with pytest.raises(InputError, match=r"g_idx values must lie in \[0, 2\)"):
        from_gptq(qweight, qzeros, s, np.full(128, 5, np.int32))
    with pytest.raises(InputError, match="group_size=32 gives 4 groups"):
        from_gptq(qweight, qzeros, s, group_size=32)
    with pytest.raises(UnsupportedError, match="group size 40"):
        from_gptq(pack32(rng.integers(0, 16, (80, 64)), 4, 0), qzeros, s)
    with pytest.raises(InputError, match="NaN"):
        from_gptq(qweight, qzeros, np.full((2, 64), np.nan))
    with pytest.raises(InputError, match="do not fit float16"):
        from_gptq(qweight, qzeros, np.full((2, 64), 1e6))


# ---- AWQ -------------------------------------------------------------------------------------


def awq_pack(codes):
    """AutoAWQ WQLinear_GEMM.from_linear: columns 8c + order_map[i] into nibble i of word c."""
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    r, cols = codes.shape
    out = np.zeros((r, cols // 8), np.uint32)
    for c in range(cols // 8):
        for i in range(8):
            out[:, c] |= codes[:, 8 * c + order_map[i]].astype(np.uint32) << np.uint32(4 * i)
    return out.view(np.int32)


@pytest.mark.parametrize("n,k,gs", [(128, 256, 128), (72, 192, 64), (64, 128, -1)])
def test_awq(rng, n, k, gs):
    g = 1 if gs == -1 else k // gs
    q = rng.integers(0, 16, (k, n))
    z = rng.integers(0, 16, (g, n))
    s = fp16_scales(rng, (g, n))
    qw = from_awq(awq_pack(q), awq_pack(z), s.astype(np.float16))
    assert qw.qtype == "uint4" and qw.group_size == gs and qw.shape == (n, k)
    grp = np.arange(k) // (k if gs == -1 else gs)
    assert_offset_rounding(qw, (q.T - z[grp].T) * s[grp].T, (8 - z[grp].T) * s[grp].T)


def test_awq_nibble_order():
    """One word: nibble i (value i + 1) lands in column order_map[i]."""
    word = sum((i + 1) << (4 * i) for i in range(8))
    qweight = np.full((64, 8), word, np.uint32).view(np.int32)  # K=64, N=64
    qw = from_awq(qweight, np.zeros((1, 8), np.int32), np.ones((1, 64)))
    outs = deq(qw)[:8, 0]  # out features 0..7, input 0
    assert outs.tolist() == [1, 5, 2, 6, 3, 7, 4, 8]


def test_awq_errors(rng):
    q = awq_pack(rng.integers(0, 16, (128, 64)))
    z = awq_pack(rng.integers(0, 16, (1, 64)))
    with pytest.raises(InputError, match="scales must be"):
        from_awq(q, z, np.ones((1, 32)))
    with pytest.raises(InputError, match="qzeros must be"):
        from_awq(q, z[:, :4], np.ones((1, 64)))
    with pytest.raises(InputError, match="qzeros is required"):
        from_awq(q, None, np.ones((1, 64)))


# ---- compressed-tensors ----------------------------------------------------------------------


def ct_case(rng, n, k, gs, bits):
    g = 1 if gs == -1 else -(-k // gs)
    half = 1 << (bits - 1)
    q = rng.integers(-half, half, (n, k))  # signed quantized values
    s = fp16_scales(rng, (n, g))  # (N, G)
    zp = rng.integers(-half, half, (n, g))
    grp = np.arange(k) // (k if gs == -1 else gs)
    return q, s, zp, grp, half


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("n,k,gs", [(128, 256, 128), (64, 256, 32), (72, 200, -1)])
def test_compressed_tensors_symmetric(rng, bits, n, k, gs):
    q, s, _, grp, half = ct_case(rng, n, k, gs, bits)
    packed = pack32(q + half, bits, 1)  # (N, ceil(K * bits / 32))
    assert packed.shape == (n, -(-k * bits // 32))
    qw = from_compressed_tensors(packed, s.astype(np.float16), np.array([n, k]), num_bits=bits)
    assert qw.qtype == ("uint4b8" if bits == 4 else "uint8b128") and qw.group_size == gs
    assert_exact(qw, q * s[:, grp])


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("zp_form", ["packed", "plain"])
def test_compressed_tensors_asymmetric(rng, bits, zp_form):
    n, k, gs = 72, 256, 64
    q, s, zp, grp, half = ct_case(rng, n, k, gs, bits)
    if zp_form == "packed":  # along N, unsigned, >= 0.9
        zpt = pack32(zp + half, bits, 0)
        assert zpt.shape == (-(-n * bits // 32), k // gs)
    else:
        zpt = zp.astype(np.int8)
    qw = from_compressed_tensors(pack32(q + half, bits, 1), s, [n, k], zpt, num_bits=bits)
    assert qw.qtype == ("uint4" if bits == 4 else "uint8")
    want = (q - zp[:, grp]) * s[:, grp]
    assert_offset_rounding(qw, want, -zp[:, grp] * s[:, grp])  # m = (bias - (zp + half)) * s


def test_compressed_tensors_zero_zero_points_are_symmetric(rng):
    n, k, gs = 64, 128, 64
    q, s, _, grp, half = ct_case(rng, n, k, gs, 4)
    qw = from_compressed_tensors(pack32(q + half, 4, 1), s, [n, k], np.zeros((n, k // gs), np.int8))
    assert qw.qtype == "uint4b8" and qw.offsets is None
    assert_exact(qw, q * s[:, grp])


def test_compressed_tensors_act_order_torch_bf16(rng):
    """torch tensors, bf16 scales (kept as bf16: exact), act-order weight_g_idx."""
    torch = pytest.importorskip("torch")
    n, k, gs = 64, 256, 128
    q, _, _, _, half = ct_case(rng, n, k, gs, 4)
    s = torch.from_numpy(rng.uniform(1e-3, 1e-1, (n, k // gs)).astype(np.float32)).bfloat16()
    sv = s.float().numpy().astype(np.float64)
    g_idx = act_order_g_idx(rng, k, gs)
    qw = from_compressed_tensors(
        torch.from_numpy(pack32(q + half, 4, 1)), s, torch.tensor([n, k]), weight_g_idx=torch.from_numpy(g_idx)
    )
    assert qw.scale_dtype == "bfloat16" and qw.perm is not None
    assert_exact(qw, q * sv[:, g_idx])
    unset = from_compressed_tensors(
        pack32(q + half, 4, 1), s, [n, k], weight_g_idx=np.full(k, -1, np.int32)
    )  # all -1: not set
    assert unset.perm is None
    assert_exact(unset, q * np.repeat(sv, gs, axis=1))


def test_compressed_tensors_errors(rng):
    packed = pack32(rng.integers(0, 16, (64, 128)), 4, 1)
    s = np.ones((64, 1))
    with pytest.raises(InputError, match="weight_packed must be"):
        from_compressed_tensors(packed, s, [64, 256])
    with pytest.raises(InputError, match="weight_shape must be"):
        from_compressed_tensors(packed, s, [64, 128, 1])
    with pytest.raises(InputError, match="weight_scale must be"):
        from_compressed_tensors(packed, np.ones((32, 1)), [64, 128])
    with pytest.raises(InputError, match="weight_zero_point must be"):
        from_compressed_tensors(packed, s, [64, 128], np.zeros((3, 1), np.int32))
    with pytest.raises(InputError, match=r"plain, signed\) must lie"):
        from_compressed_tensors(packed, s, [64, 128], np.full((64, 1), 9, np.int8))
    with pytest.raises(UnsupportedError, match="2-bit"):
        from_compressed_tensors(packed, s, [64, 128], num_bits=2)


# ---- HQQ -------------------------------------------------------------------------------------


def hqq_pack_4bit_u8(q):
    """BitPack.pack_4bit_u8: first half of the rows in the high nibble."""
    h = q.shape[0] // 2
    return ((q[:h] << 4) | q[h:]).astype(np.uint8)


def hqq_case(rng, n, k, gs, nbits=4):
    rows = n * k // gs
    q = rng.integers(0, 1 << nbits, (rows, gs))
    scale = fp16_scales(rng, (rows, 1))
    zero = rng.uniform(0, (1 << nbits) - 1, (rows, 1)).astype(np.float16).astype(np.float64)
    want = ((q - zero) * scale).reshape(n, k)
    m = (((1 << (nbits - 1)) - zero) * scale).reshape(-1)  # offset of each group
    m_full = np.repeat(m.reshape(n, k // gs), gs, axis=1)
    return q, scale, zero, want, m_full


@pytest.mark.parametrize("n,k,gs", [(128, 256, 64), (72, 192, 64), (64, 256, 128), (64, 512, 256)])
def test_hqq(rng, n, k, gs):
    q, scale, zero, want, m = hqq_case(rng, n, k, gs)
    meta = {"shape": (n, k), "nbits": 4, "group_size": gs, "axis": 1, "packing": "4bit_u8"}
    qw = from_hqq(hqq_pack_4bit_u8(q), scale.astype(np.float16), zero.astype(np.float16), meta)
    assert qw.qtype == "uint4" and qw.group_size == min(gs, 128)
    assert_offset_rounding(qw, want, m)


def test_hqq_torch_view_as_float_per_row_and_8bit(rng):
    torch = pytest.importorskip("torch")
    n, k = 72, 200  # group_size None: one group per row, padded
    q, scale, zero, want, m = hqq_case(rng, n, k, k)
    wq = torch.from_numpy(hqq_pack_4bit_u8(q)).view(torch.float16)  # view_as_float storage
    meta = {
        "shape": torch.Size([n, k]),
        "nbits": 4,
        "group_size": None,
        "axis": 1,
        "packing": "4bit_u8",
        "view_as_float": True,
        "scale": torch.from_numpy(scale.astype(np.float16)),
        "zero": torch.from_numpy(zero.astype(np.float16)),
    }
    qw = from_hqq(wq, meta=meta)  # scale / zero taken from meta
    assert qw.group_size == -1 and qw.shape == (n, k)
    assert_offset_rounding(qw, want, m)

    q, scale, zero, want, m = hqq_case(rng, 64, 128, 64, nbits=8)
    meta = {"shape": (64, 128), "nbits": 8, "group_size": 64, "axis": 1, "packing": "8bit_u8"}
    qw = from_hqq(
        torch.from_numpy(q.astype(np.uint8)),
        torch.from_numpy(scale.astype(np.float16)),
        torch.from_numpy(zero.astype(np.float16)),
        meta,
    )
    assert qw.qtype == "uint8"
    assert_offset_rounding(qw, want, m)


def test_hqq_errors(rng):
    q, scale, zero, _, _ = hqq_case(rng, 64, 128, 64)
    wq = hqq_pack_4bit_u8(q)
    meta = {"shape": (64, 128), "nbits": 4, "group_size": 64, "axis": 1}
    with pytest.raises(UnsupportedError, match="axis=0"):
        from_hqq(wq, scale, zero, dict(meta, axis=0))
    with pytest.raises(UnsupportedError, match="nbits=3"):
        from_hqq(wq, scale, zero, dict(meta, nbits=3))
    with pytest.raises(UnsupportedError, match="straddle"):
        from_hqq(wq, scale, zero, dict(meta, group_size=96))
    with pytest.raises(UnsupportedError, match="quant_scale"):
        from_hqq(wq, None, zero, dict(meta, quant_scale=True))
    with pytest.raises(InputError, match="W_q must hold"):
        from_hqq(wq[:10], scale, zero, meta)
    with pytest.raises(InputError, match="scale must have"):
        from_hqq(wq, scale[:5], zero, meta)
    with pytest.raises(InputError, match="meta must hold"):
        from_hqq(wq, scale, zero, {"nbits": 4})


# ---- GGUF ------------------------------------------------------------------------------------

GG = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q8_0": (32, 34),
    "Q4_K": (256, 144),
    "MXFP4": (32, 17),
    "NVFP4": (64, 36),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q2_K": (256, 84),
    "Q3_K": (256, 110),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
}
# where the fp16 fields of the newer types sit in a block: (d, dmin / m or None)
GG_F16 = {"Q5_0": (0, None), "Q5_1": (0, 2), "Q2_K": (80, 82), "Q3_K": (108, None), "Q5_K": (0, 2), "Q6_K": (208, None)}


def put_f16(raw, col, vals):
    raw[:, col : col + 2] = np.asarray(vals, "<f2").reshape(-1, 1).view(np.uint8)


def gguf_raw(rng, name, n, k):
    """Random block bytes of a (N, K) tensor: random code bytes, controlled scale fields."""
    bs, ts = GG[name]
    nb = n * k // bs
    raw = rng.integers(0, 256, (nb, ts)).astype(np.uint8)
    sign = rng.choice([-1.0, 1.0], nb)
    if name in ("Q4_0", "Q8_0"):
        put_f16(raw, 0, sign * rng.uniform(1e-3, 2e-2, nb))
    elif name == "Q4_1":
        put_f16(raw, 0, rng.uniform(1e-3, 2e-2, nb))
        put_f16(raw, 2, sign * rng.uniform(1e-3, 0.2, nb))
    elif name == "Q4_K":
        put_f16(raw, 0, rng.uniform(1e-4, 1e-3, nb))
        put_f16(raw, 2, rng.uniform(1e-4, 1e-3, nb))
    elif name in GG_F16:  # random code and scale bytes; sane d / dmin
        d_at, m_at = GG_F16[name]
        put_f16(raw, d_at, sign * rng.uniform(1e-4, 1e-2, nb))
        if m_at is not None:
            put_f16(raw, m_at, rng.choice([-1.0, 1.0], nb) * rng.uniform(1e-4, 1e-2, nb))
    elif name == "MXFP4":
        raw[:, 0] = rng.integers(110, 140, nb)
    else:  # NVFP4: unsigned e4m3 block scales (0x7f reads as 0)
        raw[:, 0:4] = rng.integers(0, 0x80, (nb, 4))
    return raw.reshape(n, -1)  # as GGUFReader's tensor.data: rows of blocks


def f16_at(raw2d, col):
    return raw2d[:, col : col + 2].copy().view("<f2")[:, 0].astype(np.float64)


def gguf_reference(raw, name, n, k):
    """The format's dequantisation in float64, element by element from the block bytes
    (written from ggml-quants.c's dequantize_row_* / gguf-py's quants.py)."""
    bs, ts = GG[name]
    blk = raw.reshape(-1, ts)
    out = np.zeros((blk.shape[0], bs))
    if name == "Q4_K":
        d, dmin = f16_at(blk, 0), f16_at(blk, 2)
        sc_b = blk[:, 4:16].astype(np.int64)
        sc, mn = np.zeros((len(blk), 8)), np.zeros((len(blk), 8))
        for j in range(8):  # get_scale_min_k4
            if j < 4:
                sc[:, j], mn[:, j] = sc_b[:, j] & 63, sc_b[:, j + 4] & 63
            else:
                sc[:, j] = (sc_b[:, j + 4] & 0xF) | ((sc_b[:, j - 4] >> 6) << 4)
                mn[:, j] = (sc_b[:, j + 4] >> 4) | ((sc_b[:, j] >> 6) << 4)
        for e in range(256):
            chunk, hi, l = e // 64, (e % 64) // 32, e % 32
            q = (blk[:, 16 + 32 * chunk + l].astype(np.int64) >> (4 * hi)) & 0xF
            j = 2 * chunk + hi
            out[:, e] = d * sc[:, j] * q - dmin * mn[:, j]
        return out.reshape(n, k), (d[:, None] * sc, dmin[:, None] * mn)
    if name == "NVFP4":
        for e in range(64):
            j, r = e // 16, e % 16
            byte = blk[:, 4 + 8 * j + r % 8].astype(np.int64)
            q = (byte >> 4) if r >= 8 else (byte & 0xF)
            sb = blk[:, j].astype(np.int64)
            s = np.where(sb == 0x7F, 0.0, E4M3[sb & 0x7F])
            out[:, e] = E2M1[q] * s
        return out.reshape(n, k), None
    for e in range(bs):
        if name == "Q8_0":
            out[:, e] = f16_at(blk, 0) * blk[:, 2 + e].view(np.int8)
            continue
        first = {"Q4_0": 2, "Q4_1": 4, "MXFP4": 1}[name]
        byte = blk[:, first + e % 16].astype(np.int64)
        q = (byte >> 4) if e >= 16 else (byte & 0xF)
        if name == "Q4_0":
            out[:, e] = f16_at(blk, 0) * (q - 8)
        elif name == "Q4_1":
            out[:, e] = f16_at(blk, 0) * q + f16_at(blk, 2)
        else:
            out[:, e] = E2M1[q] * 2.0 ** (blk[:, 0].astype(np.int64) - 127)
    return out.reshape(n, k), None


@pytest.mark.parametrize(
    "name,n,k",
    [("Q4_0", 72, 96), ("Q4_0", 128, 256), ("Q8_0", 72, 96), ("Q8_0", 64, 128), ("MXFP4", 72, 224), ("NVFP4", 72, 192)],
)
def test_gguf_exact_types(rng, name, n, k):
    raw = gguf_raw(rng, name, n, k)
    want, _ = gguf_reference(raw, name, n, k)
    qw = from_gguf(raw, name, (n, k))
    assert qw.qtype == {"Q4_0": "uint4b8", "Q8_0": "uint8b128", "MXFP4": "mxfp4", "NVFP4": "nvfp4"}[
        name
    ] and qw.shape == (n, k)
    assert_exact(qw, want)


def test_gguf_q4_1(rng):
    n, k = 72, 128
    raw = gguf_raw(rng, "Q4_1", n, k)
    want, _ = gguf_reference(raw, "Q4_1", n, k)
    qw = from_gguf(raw.tobytes(), "q4_1", (n, k))  # bytes, lower-case name
    assert qw.qtype == "uint4" and qw.group_size == 32
    blk = raw.reshape(-1, 20)
    m = np.repeat((8 * f16_at(blk, 0) + f16_at(blk, 2)).reshape(n, k // 32), 32, axis=1)
    assert_offset_rounding(qw, want, m)  # offsets 8 d + m, rounded to fp16


@pytest.mark.parametrize("n,k", [(64, 256), (72, 512)])
def test_gguf_q4_k(rng, n, k):
    raw = gguf_raw(rng, "Q4_K", n, k)
    want, (s, dm) = gguf_reference(raw, "Q4_K", n, k)
    qw = from_gguf(raw, 12, (n, k))  # the integer enum
    assert qw.qtype == "uint4" and qw.group_size == 32
    # scales d * sc_j and offsets 8 s - dmin m_j are rounded to fp16:
    # |error| <= 8 |s - fp16(s)| + half an ulp of the offset (+ the float32 result)
    s_r = halves.round_to(s, "float16").astype(np.float64)
    m = 8 * s - dm
    full = lambda a: np.repeat(a.reshape(n, k // 32), 32, axis=1)  # noqa: E731
    err = np.abs(deq(qw) - want)
    bound = 8 * full(np.abs(s - s_r)) + 2.0**-11 * full(np.abs(m)) + 2.0**-25 + 2.0**-24 * np.abs(want)
    assert np.all(err <= bound)
    # i.e. within 2^-7 of the group's step s (+ 2^-11 of its min dmin * m_j)
    assert np.all(err <= 2.0**-7 * full(s) + 2.0**-11 * full(dm) + 2.0**-25 + 2.0**-24 * np.abs(want))


@pytest.mark.parametrize(
    "name,n,k",
    [("Q4_0", 72, 96), ("Q4_1", 72, 128), ("Q8_0", 72, 96), ("Q4_K", 72, 512), ("MXFP4", 72, 224), ("NVFP4", 72, 192)],
)
def test_gguf_against_gguf_package(rng, name, n, k):
    """gguf-py's own dequantizer (llama.cpp's Python twin) as the oracle on the raw bytes: it
    agrees with the reference above (it computes in float32: within float32 rounding), and
    jitmarlin.dequantize of the converted weight equals it exactly for the exact types and
    within the rounding bound of the scale dtype for Q4_1 / Q4_K."""
    gguf = pytest.importorskip("gguf")
    if name not in gguf.GGMLQuantizationType.__members__:
        pytest.skip(f"this gguf release has no {name}")
    raw = gguf_raw(rng, name, n, k)
    ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]).astype(np.float64)
    want, extra = gguf_reference(raw, name, n, k)
    assert ref.shape == (n, k)
    np.testing.assert_allclose(ref, want, rtol=2e-6, atol=1e-9)
    got = deq(from_gguf(raw, gguf.GGMLQuantizationType[name], (n, k)))
    full = lambda a: np.repeat(a.reshape(n, -1), 32, axis=1)  # noqa: E731
    if name == "Q4_1":  # offsets 8 d + m rounded to fp16 (half an ulp)
        blk = raw.reshape(-1, 20)
        bound = 2.0**-11 * full(np.abs(8 * f16_at(blk, 0) + f16_at(blk, 2)))
    elif name == "Q4_K":  # 2^-7 of the step d * sc_j + 2^-11 of dmin * m_j
        bound = 2.0**-7 * full(extra[0]) + 2.0**-11 * full(extra[1])
    if name in ("Q4_1", "Q4_K"):
        assert np.all(np.abs(got - ref) <= bound + 2.0**-25 + 2.0**-23 * np.abs(ref))
    else:
        np.testing.assert_array_equal(got, ref)


def test_gguf_errors(rng):
    raw = gguf_raw(rng, "Q4_0", 64, 64)
    for t in ("IQ4_XS", "Q8_K", "TQ1_0", 23):  # still refused (an UnsupportedError too)
        with pytest.raises(UnsupportedError, match="IQ4_XS" if t in ("IQ4_XS", 23) else str(t)):
            from_gguf(raw, t, (64, 64))
    with pytest.raises(UnsupportedError, match="not quantized"):
        from_gguf(raw, "F16", (64, 64))
    with pytest.raises(InputError, match="unknown ggml type"):
        from_gguf(raw, "Q4_9", (64, 64))
    with pytest.raises(InputError, match="unknown ggml type enum"):
        from_gguf(raw, 99, (64, 64))
    with pytest.raises(InputError, match="takes 2304 bytes"):
        from_gguf(raw[:32], "Q4_0", (64, 64))
    with pytest.raises(InputError, match="multiple of the block size 256"):
        from_gguf(raw, "Q4_K", (64, 64))
    mx = gguf_raw(rng, "MXFP4", 64, 64)
    mx[0, 0] = 255
    with pytest.raises(InputError, match="255"):
        from_gguf(mx, "MXFP4", (64, 64))


# ---- GGUF: Q5_0, Q5_1 and the K-quants (codes widened, sub-blocks as groups) -------------------


def k4_scale_min(b):
    """llama.cpp get_scale_min_k4 over (blocks, 12) bytes -> (scales, mins), each (blocks, 8)."""
    b = b.astype(np.int64)
    sc, mn = np.zeros((len(b), 8), np.int64), np.zeros((len(b), 8), np.int64)
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = b[:, j] & 63, b[:, j + 4] & 63
        else:
            sc[:, j] = (b[:, j + 4] & 0xF) | ((b[:, j - 4] >> 6) << 4)
            mn[:, j] = (b[:, j + 4] >> 4) | ((b[:, j] >> 6) << 4)
    return sc, mn


def kq_terms(raw, name, n, k):
    """(c, s, o), each (N, K) float64, with the format's value c * s + o per weight: c the code
    measured from the format's zero, s the sub-block's combined step, o its offset. Element by
    element from ggml-quants.c's dequantize_row_* (independent of the converter's unpacking)."""
    bs, ts = GG[name]
    blk = raw.reshape(-1, ts)
    byte = lambda i: blk[:, i].astype(np.int64)  # noqa: E731
    nbk = len(blk)
    c, s, o = np.zeros((nbk, bs)), np.zeros((nbk, bs)), np.zeros((nbk, bs))
    if name in ("Q5_0", "Q5_1"):
        at = 2 if name == "Q5_0" else 4
        qh = blk[:, at : at + 4].copy().view("<u4")[:, 0].astype(np.int64)
        d = f16_at(blk, 0)
        for j in range(16):
            for e, nib in ((j, byte(at + 4 + j) & 0xF), (j + 16, byte(at + 4 + j) >> 4)):
                q = nib | (((qh >> e) & 1) << 4)
                if name == "Q5_0":
                    c[:, e], s[:, e] = q - 16, d
                else:
                    c[:, e], s[:, e], o[:, e] = q, d, f16_at(blk, 2)
    elif name == "Q5_K":
        d, dmin = f16_at(blk, 0), f16_at(blk, 2)
        sc, mn = k4_scale_min(blk[:, 4:16])
        for e in range(256):
            chunk, hi, l = e // 64, (e % 64) // 32, e % 32
            j = 2 * chunk + hi
            q = ((byte(48 + 32 * chunk + l) >> (4 * hi)) & 0xF) + 16 * ((byte(16 + l) >> j) & 1)
            c[:, e], s[:, e], o[:, e] = q, d * sc[:, j], -dmin * mn[:, j]
    elif name == "Q6_K":
        d = f16_at(blk, 208)
        for e in range(256):
            h, r = e // 128, e % 128
            part, l = r // 32, r % 32  # y[l], y[l+32], y[l+64], y[l+96]
            lo = byte(64 * h + l + 32 * (part % 2))
            lo = (lo & 0xF) if part < 2 else (lo >> 4)
            q = lo | (((byte(128 + 32 * h + l) >> (2 * part)) & 3) << 4)
            sc = blk[:, 192 + 8 * h + part * 2 + l // 16].view(np.int8).astype(np.int64)
            c[:, e], s[:, e] = q - 32, d * sc
    elif name == "Q3_K":
        d = f16_at(blk, 108)
        b = blk[:, 96:108].astype(np.int64)
        sc = (
            np.stack(
                [
                    ((b[:, i % 8] >> (4 * (i // 8))) & 0xF) | (((b[:, 8 + i % 4] >> (2 * (i // 4))) & 3) << 4)
                    for i in range(16)
                ],
                axis=1,
            )
            - 32
        )  # the kmask1 / kmask2 shuffle
        for e in range(256):
            h, r = e // 128, e % 128
            shift, l = r // 32, r % 32
            q = ((byte(32 + 32 * h + l) >> (2 * shift)) & 3) - np.where((byte(l) >> (4 * h + shift)) & 1, 0, 4)
            c[:, e], s[:, e] = q, d * sc[:, 8 * h + 2 * shift + l // 16]
    else:  # Q2_K
        d, dmin = f16_at(blk, 80), f16_at(blk, 82)
        for e in range(256):
            h, r = e // 128, e % 128
            shift, l = r // 32, r % 32
            sc = byte(8 * h + 2 * shift + l // 16)
            c[:, e] = (byte(16 + 32 * h + l) >> (2 * shift)) & 3
            s[:, e], o[:, e] = d * (sc & 0xF), -dmin * (sc >> 4)
    return c.reshape(n, k), s.reshape(n, k), o.reshape(n, k)


def rounding_bound(c, s, o, sdt="float16"):
    """The docstring's bound: |c| e(s) + e(o), e(x) = |x - round(x)| (exactly, and checked
    against u |x| + t), + the float32 rounding of the result."""
    e = lambda x: np.abs(x - halves.round_to(x, sdt).astype(np.float64))  # noqa: E731
    u, t = (2.0**-11, 2.0**-25) if sdt == "float16" else (2.0**-8, 2.0**-133)
    assert np.all(e(s) <= u * np.abs(s) + t) and np.all(e(o) <= u * np.abs(o) + t)
    return np.abs(c) * e(s) + e(o) + 2.0**-24 * np.abs(c * s + o)


NEW = {
    "Q5_0": ("uint8b128", 32, 16),
    "Q5_1": ("uint8", 32, 31),
    "Q5_K": ("uint8", 32, 31),
    "Q6_K": ("uint8b128", 16, 32),
    "Q3_K": ("uint4b8", 16, 4),
    "Q2_K": ("uint4", 16, 3),
}
CLOSED = {"Q5_K": 2.0**-6, "Q6_K": 2.0**-6, "Q3_K": 2.0**-9, "Q2_K": 3 * 2.0**-11}


def check_new_type(name, raw, n, k, sdt="float16", tensor_type=None):
    """from_gguf(raw) against the format's value (kq_terms) and gguf-py's dequantizer."""
    gguf = pytest.importorskip("gguf")
    c, s, o = kq_terms(raw, name, n, k)
    want = c * s + o
    ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]).astype(np.float64)
    assert ref.shape == (n, k)
    np.testing.assert_allclose(ref, want, rtol=2.0**-23, atol=0)  # gguf-py computes in fp32
    qw = from_gguf(
        raw, name if tensor_type is None else tensor_type, (n, k), scale_dtype=None if sdt == "float16" else sdt
    )
    qtype, gs, cmax = NEW[name]
    assert (qw.qtype, qw.group_size, qw.shape, qw.scale_dtype) == (qtype, gs, (n, k), sdt)
    assert np.abs(c).max() <= cmax
    got = deq(qw)
    bound = rounding_bound(c, s, o, sdt)
    assert np.all(np.abs(got - want) <= bound), float((np.abs(got - want) / (bound + 1e-300)).max())
    assert np.all(np.abs(got - ref) <= bound + 2.0**-24 * np.abs(ref))
    if name in CLOSED and sdt == "float16":  # the docstring's closed form, in steps
        u, t = 2.0**-11, 2.0**-25
        closed = CLOSED[name] * np.abs(s) + u * np.abs(o) + np.abs(c) * t + t + 2.0**-24 * np.abs(want)
        assert np.all(np.abs(got - want) <= closed)
    return qw, got, want


@pytest.mark.parametrize("name,n,k", [("Q5_0", 72, 96), ("Q5_0", 200, 256), ("Q5_1", 72, 96), ("Q5_1", 136, 224)])
def test_gguf_q5_0_q5_1_from_gguf_quantizer(rng, name, n, k):
    """Q5_0 / Q5_1 blocks from gguf-py's own quantizer: exact (d and m are fp16 already)."""
    gguf = pytest.importorskip("gguf")
    w = (rng.standard_normal((n, k)) * rng.uniform(0.01, 0.1, (n, 1))).astype(np.float32)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType[name])
    assert raw.shape == (n, k // 32 * GG[name][1])
    qw, got, want = check_new_type(name, raw, n, k)
    assert_exact(qw, want)
    np.testing.assert_array_equal(got, gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]))
    assert np.abs(got - w).max() <= 0.1 * np.abs(w).max()  # and it is the weight, roughly


@pytest.mark.parametrize("name", ["Q5_0", "Q5_1"])
def test_gguf_q5_0_q5_1_random_bytes(rng, name):
    raw = gguf_raw(rng, name, 72, 160)
    qw, _, want = check_new_type(name, raw, 72, 160)
    assert_exact(qw, want)


@pytest.mark.parametrize(
    "name,n,k",
    [
        ("Q5_K", 72, 256),
        ("Q5_K", 128, 512),
        ("Q6_K", 72, 512),
        ("Q6_K", 200, 256),
        ("Q3_K", 72, 256),
        ("Q3_K", 136, 512),
        ("Q2_K", 72, 512),
        ("Q2_K", 200, 256),
    ],
)
def test_gguf_k_quants_random_blocks(rng, name, n, k):
    """gguf-py has no quantizer for the K-quants: random block bytes (every code and sub-block
    scale / min pattern, signed d) under controlled fp16 d / dmin."""
    check_new_type(name, gguf_raw(rng, name, n, k), n, k)


@pytest.mark.parametrize("name", ["Q6_K", "Q5_K", "Q3_K", "Q2_K"])
def test_gguf_k_quants_bf16_scales_and_enum(rng, name):
    gguf = pytest.importorskip("gguf")
    raw = gguf_raw(rng, name, 72, 256)
    check_new_type(name, raw, 72, 256, sdt="bfloat16", tensor_type=gguf.GGMLQuantizationType[name])


@pytest.mark.parametrize("name", ["Q6_K", "Q5_K", "Q2_K"])
def test_gguf_k_quants_tiny_scales(rng, name):
    """d, dmin of 1e-7 .. 1e-5: combined scales in fp16's subnormal range (the bound's t)."""
    raw = gguf_raw(rng, name, 64, 256)
    blk = raw.reshape(-1, GG[name][1])
    d_at, m_at = GG_F16[name]
    for at in (d_at, m_at):
        if at is not None:
            put_f16(blk, at, rng.uniform(1e-7, 1e-5, len(blk)))
    _, got, want = check_new_type(name, raw, 64, 256)
    assert np.abs(got - want).max() > 0  # the case does reach the rounding


def test_gguf_q6_k_extreme_scales_and_scale_overflow(rng):
    """sc = -128 and 127 with the largest codes; d * sc past 65504 asks for bfloat16."""
    raw = gguf_raw(rng, "Q6_K", 64, 256)
    blk = raw.reshape(-1, 210)
    blk[:, 192:208] = np.array([0x80, 0x7F] * 8, np.uint8)  # -128, 127
    blk[:, 0:192] = 0xFF  # q = 63 -> c = 31
    blk[::2, 0:192] = 0x00  # q = 0 -> c = -32
    check_new_type("Q6_K", raw, 64, 256)
    put_f16(blk, 208, np.full(len(blk), 1000.0))
    with pytest.raises(InputError, match="bfloat16"):
        from_gguf(raw, "Q6_K", (64, 256), name="output.weight")
    check_new_type("Q6_K", raw, 64, 256, sdt="bfloat16")


def test_gguf_unsupported_types_name_the_tensor(rng):
    from jitmarlin.weights.formats.gguf import GGUFTypeError

    raw = gguf_raw(rng, "Q4_0", 64, 64)
    for t, shown in (
        ("IQ4_NL", "IQ4_NL"),
        ("Q8_K", "Q8_K"),
        ("TQ2_0", "TQ2_0"),
        (23, "IQ4_XS"),
        ("IQ2_XXS", "IQ2_XXS"),
        ("Q8_1", "Q8_1"),
    ):
        with pytest.raises(InputError, match=rf"'blk\.3\.ffn_down\.weight' \({shown}\).*not supported") as ei:
            from_gguf(raw, t, (64, 64), name="blk.3.ffn_down.weight")
        assert isinstance(ei.value, UnsupportedError) and isinstance(ei.value, GGUFTypeError)
    with pytest.raises(InputError, match=r"'token_embd\.weight' \(F32\) is not quantized"):
        from_gguf(raw, "F32", (64, 64), name="token_embd.weight")
    with pytest.raises(InputError, match=r"'blk\.0\.attn_v\.weight' \(Q6_K\).*multiple of the block size 256"):
        from_gguf(gguf_raw(rng, "Q6_K", 64, 256), "Q6_K", (64, 128), name="blk.0.attn_v.weight")
    with pytest.raises(InputError, match="takes 13440 bytes"):
        from_gguf(gguf_raw(rng, "Q6_K", 64, 256)[:, :-1], "Q6_K", (64, 256))


def test_gguf_file_round_trip(rng, tmp_path):
    """A tiny .gguf holding the mix a Q4_K_M / Q3_K_M download carries, written by
    gguf.GGUFWriter and read back by gguf.GGUFReader: every quantized tensor converts (within
    its bound against gguf-py's dequantizer), the ones we cannot take raise naming themselves."""
    gguf = pytest.importorskip("gguf")
    T = gguf.GGMLQuantizationType
    plan = {
        "blk.0.attn_q.weight": ("Q4_K", 72, 256),
        "blk.0.attn_v.weight": ("Q6_K", 72, 256),
        "blk.0.ffn_up.weight": ("Q5_K", 200, 512),
        "blk.0.ffn_gate.weight": ("Q3_K", 136, 256),
        "blk.0.ffn_down.weight": ("Q2_K", 72, 512),
        "blk.1.attn_k.weight": ("Q5_0", 64, 96),
        "blk.1.attn_output.weight": ("Q8_0", 72, 128),
        "output.weight": ("Q6_K", 200, 256),
    }
    path = tmp_path / "mix.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    raws = {}
    for tname, (ty, n, k) in plan.items():
        raws[tname] = gguf_raw(rng, ty, n, k)
        writer.add_tensor(tname, raws[tname], raw_dtype=T[ty])
    w5 = (rng.standard_normal((64, 128)) * 0.05).astype(np.float32)
    writer.add_tensor("blk.1.ffn_up.weight", gguf.quants.quantize(w5, T.Q5_1), raw_dtype=T.Q5_1)
    writer.add_tensor(
        "blk.1.ffn_gate.weight", rng.integers(0, 256, (64, 64 // 32 * 18)).astype(np.uint8), raw_dtype=T.IQ4_NL
    )
    writer.add_tensor("output_norm.weight", np.ones(64, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    seen = set()
    for t in gguf.GGUFReader(str(path)).tensors:
        ty = T(int(t.tensor_type)).name
        shape = tuple(int(v) for v in reversed(t.shape.tolist()))  # ne = [K, N] -> (N, K)
        seen.add(t.name)
        if ty in ("IQ4_NL", "F32"):
            with pytest.raises(InputError, match=rf"'{t.name}' \({ty}\)"):
                from_gguf(t.data, t.tensor_type, shape, name=t.name)
            continue
        qw = from_gguf(t.data, t.tensor_type, shape, name=t.name)
        assert qw.shape == shape
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        got = deq(qw)
        if ty in NEW:
            c, s, o = kq_terms(np.asarray(t.data), ty, *shape)
            assert np.all(np.abs(got - ref) <= rounding_bound(c, s, o) + 2.0**-24 * np.abs(ref))
        elif ty == "Q4_K":
            _, (s, dm) = gguf_reference(np.asarray(t.data), ty, *shape)
            full = lambda a: np.repeat(a.reshape(shape[0], -1), 32, axis=1)  # noqa: E731
            assert np.all(
                np.abs(got - ref) <= 2.0**-7 * full(s) + 2.0**-11 * full(dm) + 2.0**-25 + 2.0**-23 * np.abs(ref)
            )
        else:
            np.testing.assert_array_equal(got, ref)
        if t.name in raws:
            np.testing.assert_array_equal(np.asarray(t.data).reshape(-1), raws[t.name].reshape(-1))
    assert seen == set(plan) | {"blk.1.ffn_up.weight", "blk.1.ffn_gate.weight", "output_norm.weight"}


# ---- NVFP4 (ModelOpt) ------------------------------------------------------------------------


def fp4_pack(codes):
    """Two e2m1 codes per byte, element 2i in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


@pytest.mark.parametrize("n,k", [(128, 256), (72, 208)])
def test_nvfp4(rng, n, k):
    codes = rng.integers(0, 16, (n, k))
    sb = rng.integers(0, 0x7F, (n, k // 16)).astype(np.uint8)  # e4m3 bytes, no NaN
    ws2 = np.float32(rng.uniform(1e-4, 1e-2))
    qw = from_nvfp4(fp4_pack(codes), sb, ws2)
    assert qw.qtype == "nvfp4" and qw.global_scale == float(ws2) and qw.shape == (n, k)
    want = E2M1[codes] * np.repeat(E4M3[sb], 16, axis=1) * float(ws2)
    assert_exact(qw, want)


def test_nvfp4_torch_float8_scales(rng):
    torch = pytest.importorskip("torch")
    n, k = 64, 128
    codes = rng.integers(0, 16, (n, k))
    sb = rng.integers(0x20, 0x70, (n, k // 16)).astype(np.uint8)
    f8 = torch.from_numpy(sb).view(torch.float8_e4m3fn)
    ws2 = torch.tensor(0.0123, dtype=torch.float32)
    qw = from_nvfp4(torch.from_numpy(fp4_pack(codes)), f8, ws2)
    want = E2M1[codes] * np.repeat(E4M3[sb], 16, axis=1) * float(np.float32(0.0123))
    assert_exact(qw, want)
    # the same scales as float values (e.g. after .float()) are accepted too
    assert_exact(from_nvfp4(fp4_pack(codes), f8.float(), ws2), want)


def test_nvfp4_errors(rng):
    w = fp4_pack(rng.integers(0, 16, (64, 128)))
    sb = np.full((64, 8), 0x38, np.uint8)
    with pytest.raises(InputError, match="NaN"):
        from_nvfp4(w, np.full((64, 8), 0x7F, np.uint8), 1.0)
    with pytest.raises(InputError, match="weight_scale must be"):
        from_nvfp4(w, sb[:, :4], 1.0)
    with pytest.raises(InputError, match="weight_scale_2 must be one"):
        from_nvfp4(w, sb, np.ones(3, np.float32))
    with pytest.raises(InputError, match="not float8_e4m3fn numbers"):
        from_nvfp4(w, np.full((64, 8), 0.3), 1.0)
    with pytest.raises(InputError, match="uint8"):
        from_nvfp4(w.astype(np.float32), sb, 1.0)


# ---- MXFP4 (OCP MX / gpt-oss) ----------------------------------------------------------------


@pytest.mark.parametrize("n,k", [(128, 256), (72, 224)])
def test_mxfp4(rng, n, k):
    codes = rng.integers(0, 16, (n, k))
    e = rng.integers(90, 160, (n, k // 32)).astype(np.uint8)  # beyond fp16's range: bf16
    blocks = fp4_pack(codes).reshape(n, k // 32, 16)
    qw = from_mxfp4(blocks, e)
    assert qw.qtype == "mxfp4" and qw.scale_dtype == "bfloat16" and qw.shape == (n, k)
    want = E2M1[codes] * np.repeat(2.0 ** (e.astype(np.int64) - 127), 32, axis=1)
    assert_exact(qw, want)


def test_mxfp4_torch_and_fp16_scales(rng):
    torch = pytest.importorskip("torch")
    n, k = 64, 128
    codes = rng.integers(0, 16, (n, k))
    e = rng.integers(117, 137, (n, k // 32)).astype(np.uint8)
    blocks = torch.from_numpy(fp4_pack(codes).reshape(n, k // 32, 16))
    qw = from_mxfp4(blocks, torch.from_numpy(e), scale_dtype="float16")
    assert qw.scale_dtype == "float16"
    assert_exact(qw, E2M1[codes] * np.repeat(2.0 ** (e.astype(np.int64) - 127), 32, axis=1))


def test_mxfp4_errors(rng):
    blocks = fp4_pack(rng.integers(0, 16, (64, 128))).reshape(64, 4, 16)
    e = np.full((64, 4), 127, np.uint8)
    with pytest.raises(InputError, match="255 is NaN"):
        from_mxfp4(blocks, np.full((64, 4), 255, np.uint8))
    with pytest.raises(InputError, match="do not fit float16"):
        from_mxfp4(blocks, np.full((64, 4), 60, np.uint8), scale_dtype="float16")
    with pytest.raises(InputError, match="scales must be uint8"):
        from_mxfp4(blocks, e[:, :2])
    with pytest.raises(InputError, match="blocks must be"):
        from_mxfp4(blocks.reshape(64, 8, 8), e)


def test_exported():
    for name in (
        "from_gptq",
        "from_awq",
        "from_compressed_tensors",
        "from_hqq",
        "from_gguf",
        "from_nvfp4",
        "from_mxfp4",
    ):
        assert name in jitmarlin.__all__ and callable(getattr(jitmarlin, name))
