import numpy as np
import pytest

import jitmarlin
from jitmarlin import InputError
from jitmarlin.weights import halves, packing


@pytest.mark.parametrize("group", [-1, 32, 64, 128])
@pytest.mark.parametrize("sdt", ["float16", "bfloat16"])
def test_quantize_dequantize(rng, group, sdt):
    n, k = 128, 256
    w = rng.standard_normal((n, k)) * 0.05
    qw = jitmarlin.quantize(w, "uint4b8", group, scale_dtype=sdt)
    d = jitmarlin.dequantize(qw)
    assert d.shape == (n, k) and d.dtype == np.float32
    # independent recomputation from the stored codes and scales
    q = packing.unpack_int4(qw.packed, n, k).astype(np.float64) - 8
    if group == -1:
        s = halves.from_bits(qw.scales, sdt)[:, None]
    else:
        s = np.repeat(halves.from_bits(packing.unpermute_scales(qw.scales), sdt).T, group, axis=1)
    assert np.array_equal(d, (q * s).astype(np.float32))
    # round-to-nearest with s = max|w| / 7.5: every error is at most half a step. The stored step
    # is s rounded to the scale dtype (relative error <= u), which can put the group's largest
    # weight up to 7.5 u steps past the top code: half a step plus 7.5 u, never a whole step.
    gs = k if group == -1 else group
    step = np.repeat(
        halves.from_bits(qw.scales if group == -1 else packing.unpermute_scales(qw.scales).T, sdt).reshape(n, -1),
        gs,
        axis=1,
    )
    u = {"float16": 2.0**-11, "bfloat16": 2.0**-8}[sdt]
    err = np.abs(d.astype(np.float64) - w)
    assert np.all(err <= step * (0.5 + 7.5 * u) + 1e-9), float((err / step).max())


def test_scales_for_other_activation_dtype(rng):
    qw = jitmarlin.quantize(rng.standard_normal((64, 128)), "uint4b8", 64, scale_dtype="float16")
    b = qw.scales_for("bfloat16")
    assert np.array_equal(b, halves.to_bits(halves.from_bits(qw.scales, "float16"), "bfloat16"))
    assert not np.array_equal(jitmarlin.dequantize(qw), jitmarlin.dequantize(qw, "bfloat16"))


def test_quantize_errors():
    w = np.ones((64, 128), np.float32)
    assert jitmarlin.quantize(w, "uint4b8", 128).shape == (64, 128)
    with pytest.raises(InputError, match="multiples of 8"):
        jitmarlin.quantize(np.ones((60, 128)), "uint4b8", -1)
    with pytest.raises(InputError, match="group_size"):
        jitmarlin.quantize(w, "uint4b8", 48)
    with pytest.raises(InputError, match="NaN"):
        jitmarlin.quantize(np.full((64, 128), np.nan), "uint4b8", 128)
    with pytest.raises(InputError, match="unknown quant"):
        jitmarlin.quantize(w, "int3", 128)


ALL = ["uint4b8", "uint4", "uint8b128", "uint8", "float8_e4m3fn", "nvfp4", "mxfp4"]


@pytest.mark.parametrize("qtype", ALL)
def test_every_type_quantizes_within_its_step(qtype, rng):
    w = rng.standard_normal((128, 256)) * 0.05
    sdt = "bfloat16" if qtype == "mxfp4" else "float16"
    # nvfp4 and mxfp4 take only their own group (a different one is an error, test_weights_trust)
    qw = jitmarlin.quantize(w, qtype, {"nvfp4": 16, "mxfp4": 32}.get(qtype, 64), scale_dtype=sdt)
    d = jitmarlin.dequantize(qw).astype(np.float64)
    assert d.shape == w.shape and np.all(np.isfinite(d))
    rel = np.linalg.norm(d - w) / np.linalg.norm(w)
    bound = {
        "uint4b8": 0.12,
        "uint4": 0.12,
        "uint8b128": 0.01,
        "uint8": 0.01,
        "float8_e4m3fn": 0.04,
        "nvfp4": 0.15,
        "mxfp4": 0.2,
    }[qtype]
    assert rel < bound, rel


@pytest.mark.parametrize(
    "qtype,bits",
    [("uint4b8", 4), ("uint4", 4), ("uint8b128", 8), ("uint8", 8), ("float8_e4m3fn", 8), ("nvfp4", 4), ("mxfp4", 4)],
)
def test_dequantize_is_the_formula_on_the_codes(qtype, bits, rng):
    """dequantize(from_codes(...)) equals decode(q) * s + m computed here from the raw inputs,
    on a shape that needs padding (N=72, K=208) and, for mxfp4, a partial last group."""
    from jitmarlin.weights.quant import E2M1, E4M3, from_codes

    n, k = 72, 208
    g = 32 if qtype == "mxfp4" else 16
    G = -(-k // g)
    top = (1 << bits) - 1
    codes = rng.integers(0, top + 1, (n, k))
    if qtype == "float8_e4m3fn":
        codes[(codes & 0x7F) == 0x7F] = 0
    scales = rng.random((G, n)) * 0.01 + 0.001
    zeros = rng.random((G, n)) * top if qtype in ("uint4", "uint8") else None
    gscale = 0.75 if qtype == "nvfp4" else 1.0
    qw = from_codes(qtype, codes, scales, g, zeros=zeros, global_scale=gscale)
    assert (qw.n, qw.k) == (128, 256) and qw.shape == (n, k)
    s = np.repeat(halves.round_to(scales, "float16").astype(np.float64).T, g, axis=1)[:, :k]
    if qtype in ("uint4b8", "uint8b128", "uint4", "uint8"):
        bias = 8 if bits == 4 else 128
        v = codes - bias
    elif qtype == "float8_e4m3fn":
        v = E4M3[codes]
    else:
        v = E2M1[codes]
    want = v * s
    if zeros is not None:  # m = (bias - z) * s, stored in the scale dtype
        m = halves.round_to((bias - zeros) * halves.round_to(scales, "float16"), "float16")
        m_full = np.repeat(m.astype(np.float64).T, g, axis=1)[:, :k]
        want = want + m_full
        exact = (codes - np.repeat(zeros.T, g, axis=1)[:, :k]) * s
        # (q - z) * s, up to the rounding of m to fp16 (half an ulp)
        assert np.all(np.abs(want - exact) <= 2.0**-11 * np.abs(m_full) + 2.0**-25)  # + subnormal ulp/2
    assert np.array_equal(jitmarlin.dequantize(qw), (want * gscale).astype(np.float32))


def test_act_order_round_trip(rng):
    from jitmarlin.weights.quant import from_codes

    g_idx = rng.permutation(np.repeat(np.arange(4), 32))
    codes = rng.integers(0, 16, (64, 128))
    scales = rng.random((4, 64)) * 0.01 + 0.001
    qw = from_codes("uint4b8", codes, scales, 32, g_idx=g_idx)
    assert qw.perm is not None and sorted(qw.perm) == list(range(128))
    want = (codes - 8) * halves.round_to(scales, "float16")[g_idx].T
    assert np.array_equal(jitmarlin.dequantize(qw), want.astype(np.float32))
    with pytest.raises(InputError, match="exactly group_size"):
        from_codes("uint4b8", codes, scales, 32, g_idx=np.zeros(128, int))
    with pytest.raises(InputError, match="multiple of group_size"):
        from_codes("uint4b8", codes[:, :120], scales, 32, g_idx=g_idx[:120])


def test_from_codes_rejects_bad_input(rng):
    from jitmarlin.weights.quant import from_codes

    c = rng.integers(0, 16, (64, 128))
    s = np.ones((1, 64))
    with pytest.raises(InputError, match="zero points"):
        from_codes("uint4", c, s, -1)
    with pytest.raises(InputError, match="no zero points"):
        from_codes("uint4b8", c, s, -1, zeros=np.zeros((1, 64)))
    with pytest.raises(InputError, match=r"\[0, 15\]"):
        from_codes("uint4b8", c + 1, s, -1)
    with pytest.raises(InputError, match="NaN"):
        from_codes("float8_e4m3fn", np.full((64, 128), 0x7F), s, -1)
    with pytest.raises(InputError, match="groups of 16"):
        from_codes("nvfp4", c, np.ones((4, 64)), 32)
