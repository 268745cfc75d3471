"""MoE checkpoint converters (jitmarlin.weights.formats.moe): synthetic expert tensors are built
here from random codes and scales in each format's published layout (packed by this file, not
by jitmarlin), converted to (w13, w2), and dequantize_moe / logical_bias are checked against the
format's dequantisation computed here in float64 from the raw codes and scales: exactly where
the format is exact. gpt-oss also runs the transformers-style forward pass (interleaved gate/up,
clamped swiglu) against jitmarlin.reference.moe_reference with activation="swigluoai"."""

import numpy as np
import pytest

from jitmarlin import InputError
from jitmarlin.reference import moe_reference
from jitmarlin.weights.formats import (
    from_gguf,
    from_gptq,
    moe_from_experts,
    moe_from_gguf,
    moe_from_gpt_oss,
    moe_from_nvfp4,
)
from jitmarlin.weights.moe import dequantize_moe, logical_bias
from jitmarlin.weights.quant import dequantize, quantize

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def e4m3(b):
    """float8_e4m3fn bytes -> float64 (OCP FP8: bias 7, subnormals at exponent 0, 0x7f NaN)."""
    b = np.asarray(b, np.int64)
    exp, man = (b >> 3) & 0xF, b & 7
    mag = np.where(exp == 0, man / 8.0 * 2.0**-6, (1 + man / 8.0) * 2.0 ** (exp - 7))
    return np.where(b >> 7, -mag, mag)


def pack_nibbles(codes):
    """(..., K) e2m1 codes -> (..., K/2) bytes, element 2i in the low nibble of byte i."""
    c = np.asarray(codes, np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def bf16_values(rng, shape):
    """Random float32 values that are exactly bfloat16 numbers."""
    v = rng.normal(0, 0.5, shape).astype(np.float32)
    return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def both(w13, w2):
    return dequantize_moe(w13, dtype=np.float64), dequantize_moe(w2, dtype=np.float64)


# ---- gpt-oss ---------------------------------------------------------------------------------------


def gpt_oss_layer(rng, e=3, inter=64, hidden=96, lo=122, hi=129):
    """The six HF checkpoint tensors of one gpt-oss MoE layer and their float64 values
    (gate_up (E, 2I, H) in checkpoint row order: gate, up, gate, up, ...; down (E, H, I))."""

    def mx(rows, cols):
        codes = rng.integers(0, 16, (e, rows, cols))
        scales = rng.integers(lo, hi, (e, rows, cols // 32)).astype(np.uint8)
        blocks = pack_nibbles(codes).reshape(e, rows, cols // 32, 16)
        vals = E2M1[codes] * np.repeat(2.0 ** (scales.astype(np.int64) - 127), 32, axis=-1)
        return blocks, scales, vals

    gub, gus, gu = mx(2 * inter, hidden)
    db, ds, dn = mx(hidden, inter)
    return (gub, gus, bf16_values(rng, (e, 2 * inter)), db, ds, bf16_values(rng, (e, hidden))), gu, dn


def test_gpt_oss_exact_and_deinterleaved(rng):
    t, gu, dn = gpt_oss_layer(rng)
    w13, w2 = moe_from_gpt_oss(*t)
    assert w13.gated and w13.shape == (3, 128, 96) and w2.shape == (3, 96, 64)
    assert w13.qtype == w2.qtype == "mxfp4" and w13.scale_dtype == "bfloat16"
    W13, W2 = both(w13, w2)
    np.testing.assert_array_equal(W13[:, :64], gu[:, 0::2])  # logical gate = checkpoint rows 0::2
    np.testing.assert_array_equal(W13[:, 64:], gu[:, 1::2])  # logical up = rows 1::2
    np.testing.assert_array_equal(W2, dn)
    assert not np.array_equal(W13, gu)  # the interleave is not ignored
    np.testing.assert_array_equal(logical_bias(w13), np.concatenate([t[2][:, 0::2], t[2][:, 1::2]], axis=1))
    np.testing.assert_array_equal(logical_bias(w2), t[5])


def test_gpt_oss_forward_matches_transformers_swiglu(rng):
    """transformers GptOssExperts: gate_up = x @ W.T + b, gate = [..., ::2], up = [..., 1::2],
    gate = min(gate, 7), up = clip(up, -7, 7), (up + 1) * gate * sigmoid(1.702 gate), then down."""
    t, gu, dn = gpt_oss_layer(rng)
    w13, w2 = moe_from_gpt_oss(*t)
    x = rng.normal(0, 1, (5, 96))
    ids = np.array([[0, 2], [1, 0], [2, 1], [0, 1], [2, 0]])
    wts = rng.uniform(0.1, 1, ids.shape)
    want = np.zeros((5, 96))
    clamped = 0
    for tok in range(5):
        for j in range(2):
            e = ids[tok, j]
            h = gu[e] @ x[tok] + t[2][e]
            gate, up = h[0::2], h[1::2]
            clamped += int(np.sum(gate > 7) + np.sum(np.abs(up) > 7))
            gate, up = np.minimum(gate, 7.0), np.clip(up, -7.0, 7.0)
            a = (up + 1) * gate / (1 + np.exp(-1.702 * gate))
            want[tok] += wts[tok, j] * (dn[e] @ a + t[5][e])
    assert clamped > 0  # the limits are exercised
    got = moe_reference(x, w13, w2, wts, ids, activation="swigluoai", round_intermediate=False)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def test_gpt_oss_flat_blocks_and_no_bias(rng):
    t, gu, dn = gpt_oss_layer(rng, e=2, inter=32, hidden=64)
    flat = (t[0].reshape(2, 64, 32), t[1], None, t[3].reshape(2, 64, 16), t[4], None)
    w13, w2 = moe_from_gpt_oss(*flat)
    assert w13.bias is None and w2.bias is None
    W13, W2 = both(w13, w2)
    np.testing.assert_array_equal(W13, np.concatenate([gu[:, 0::2], gu[:, 1::2]], axis=1))
    np.testing.assert_array_equal(W2, dn)


def test_gpt_oss_refusals(rng):
    t, _, _ = gpt_oss_layer(rng, e=2, inter=32, hidden=64)
    gub, gus, gb, db, ds, dbias = t

    def bad(match, **over):
        args = dict(
            gate_up_blocks=gub, gate_up_scales=gus, gate_up_bias=gb, down_blocks=db, down_scales=ds, down_bias=dbias
        )
        args.update(over)
        with pytest.raises(InputError, match=match):
            moe_from_gpt_oss(**args)

    nan = gus.copy()
    nan[1, 5, 0] = 255
    bad(r"expert 1 up .*255", gate_up_scales=nan)  # row 5: odd, an up row
    nan_d = ds.copy()
    nan_d[0, 0, 0] = 255
    bad(r"expert 0 down_proj.*255", down_scales=nan_d)
    bad("down_proj has 1 experts", down_blocks=db[:1], down_scales=ds[:1])
    bad(r"cols/32, 16", gate_up_blocks=gub.reshape(2, 64, 4, 8))
    bad("uint8", gate_up_blocks=gub.astype(np.float32))
    bad("integer", gate_up_scales=gus.astype(np.float32))
    bad("gate_up_proj_scales must be", gate_up_scales=gus[:, :, :1])
    bad("gate_up_proj_bias must be", gate_up_bias=gb[:, :10])
    nanb = gb.copy()
    nanb[0, 0] = np.nan
    bad("NaN", gate_up_bias=nanb)
    bad("2I", gate_up_blocks=gub[:, :63], gate_up_scales=gus[:, :63], gate_up_bias=None)
    bad("rows must be 64", down_blocks=db[:, :32], down_scales=ds[:, :32], down_bias=None)
    bad(
        "cols must be 32",
        down_blocks=np.zeros((2, 64, 2, 16), np.uint8),
        down_scales=np.full((2, 64, 2), 127, np.uint8),
    )
    bad("does not fit|float16", scale_dtype="float16", gate_up_scales=np.full_like(gus, 200))


# ---- GGUF ------------------------------------------------------------------------------------------


def write_gguf(tmp_path, tensors):
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "moe.gguf")
    w = gguf.GGUFWriter(path, "test")
    for name, data, qt in tensors:
        w.add_tensor(name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "MXFP4"])
def test_gguf_reader_tensors_exact(rng, tmp_path, name):
    """gguf-py quantizes (E, N, K) weights, writes them to a .gguf file and reads them back;
    its own dequantizer (exact for these types) is the oracle."""
    gguf = pytest.importorskip("gguf")
    qt = gguf.GGMLQuantizationType[name]
    e, inter, hidden = 3, 64, 96
    ws = {
        p: rng.normal(0, 1, shape).astype(np.float32)
        for p, shape in (("gate", (e, inter, hidden)), ("up", (e, inter, hidden)), ("down", (e, hidden, inter)))
    }
    raws = {p: gguf.quants.quantize(w, qt) for p, w in ws.items()}
    biases = {p: rng.normal(0, 1, (e, inter if p != "down" else hidden)).astype(np.float32) for p in ws}
    rd = write_gguf(
        tmp_path,
        [(f"blk.0.ffn_{p}_exps.weight", raws[p], qt) for p in ws]
        + [(f"blk.0.ffn_{p}_exps.bias", biases[p], gguf.GGMLQuantizationType.F32) for p in ws],
    )
    t = {p: rd[f"blk.0.ffn_{p}_exps.weight"] for p in ws}
    assert [int(v) for v in t["gate"].shape] == [hidden, inter, e]  # ne: fastest first
    w13, w2 = moe_from_gguf(
        t["gate"],
        t["up"],
        t["down"],
        gate_bias=rd["blk.0.ffn_gate_exps.bias"],
        up_bias=rd["blk.0.ffn_up_exps.bias"],
        down_bias=biases["down"],
    )
    ref = {p: gguf.quants.dequantize(raws[p], qt).astype(np.float64) for p in ws}
    W13, W2 = both(w13, w2)
    np.testing.assert_array_equal(W13, np.concatenate([ref["gate"], ref["up"]], axis=1))
    np.testing.assert_array_equal(W2, ref["down"])
    np.testing.assert_array_equal(logical_bias(w13), np.concatenate([biases["gate"], biases["up"]], axis=1))
    np.testing.assert_array_equal(logical_bias(w2), biases["down"])


def q4k_bytes(rng, rows, k):
    """Random Q4_K super-blocks (144 B) with sane fp16 d, dmin: (rows, k / 256 * 144) bytes."""
    nb = rows * k // 256
    raw = rng.integers(0, 256, (nb, 144)).astype(np.uint8)
    for col in (0, 2):
        raw[:, col : col + 2] = rng.uniform(1e-4, 1e-3, (nb, 1)).astype("<f2").view(np.uint8)
    return raw.reshape(rows, -1)


def test_gguf_tuples_k_quant(rng):
    """Tuple inputs (raw, type, (E, N, K)); each expert equals from_gguf of its own byte slice,
    and the whole stays within Q4_K's scale rounding of gguf-py's dequantisation."""
    gguf = pytest.importorskip("gguf")
    e, inter, hidden = 2, 64, 256
    gate, up = (q4k_bytes(rng, e * inter, hidden).reshape(e, inter, -1) for _ in range(2))
    down = gguf.quants.quantize(rng.normal(0, 1, (e, hidden, inter)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w13, w2 = moe_from_gguf(
        (gate, "Q4_K", (e, inter, hidden)), (up.tobytes(), 12, (e, inter, hidden)), (down, "Q8_0", (e, hidden, inter))
    )
    W13, W2 = both(w13, w2)
    for x in range(e):
        np.testing.assert_array_equal(
            W13[x, :inter], dequantize(from_gguf(gate[x], "Q4_K", (inter, hidden)), dtype=np.float64)
        )
        np.testing.assert_array_equal(
            W13[x, inter:], dequantize(from_gguf(up[x], "Q4_K", (inter, hidden)), dtype=np.float64)
        )
    ref = np.concatenate([gguf.quants.dequantize(a, gguf.GGMLQuantizationType.Q4_K) for a in (gate, up)], axis=1)
    # Q4_K: |err| <= 2^-7 of the step d * sc + 2^-11 dmin * m (+ fp32 rounding of gguf-py's result)
    np.testing.assert_allclose(W13, ref, rtol=2.0**-20, atol=2.0**-7 * 1e-3 * 63 * 2)
    np.testing.assert_array_equal(W2, gguf.quants.dequantize(down, gguf.GGMLQuantizationType.Q8_0))


def test_gguf_refusals(rng):
    gguf = pytest.importorskip("gguf")
    e, inter, hidden = 2, 32, 64
    q = gguf.GGMLQuantizationType.Q8_0

    def t(rows, cols, experts=e):
        return (
            gguf.quants.quantize(rng.normal(0, 1, (experts, rows, cols)).astype(np.float32), q),
            "Q8_0",
            (experts, rows, cols),
        )

    g, u, d = t(inter, hidden), t(inter, hidden), t(hidden, inter)
    with pytest.raises(InputError, match="expert counts differ"):
        moe_from_gguf(g, t(inter, hidden, 3), d)
    with pytest.raises(InputError, match="do not chain"):
        moe_from_gguf(g, u, t(inter, hidden))
    with pytest.raises(InputError, match="do not chain"):
        moe_from_gguf(g, t(64, hidden), d)
    with pytest.raises(InputError, match="reverse of GGUF"):  # ne order passed as a tuple shape
        moe_from_gguf((g[0], "Q8_0", (hidden, inter, e)), u, d)
    with pytest.raises(InputError, match="takes"):
        moe_from_gguf((g[0][:, :, :-1], "Q8_0", g[2]), u, d)
    with pytest.raises(InputError, match="not quantized"):
        moe_from_gguf((np.zeros(e * inter * hidden * 2, np.uint8), "F16", (e, inter, hidden)), u, d)
    with pytest.raises(InputError, match="not supported"):
        moe_from_gguf((g[0], "IQ2_XXS", g[2]), u, d)
    with pytest.raises(InputError, match="unknown ggml type"):
        moe_from_gguf((g[0], "Q9_9", g[2]), u, d)
    with pytest.raises(InputError, match="3-D"):
        moe_from_gguf((g[0], "Q8_0", (inter, hidden)), u, d)
    with pytest.raises(InputError, match="GGUFReader tensor or a tuple"):
        moe_from_gguf(g[0], u, d)
    with pytest.raises(InputError, match="up_bias must have shape"):
        moe_from_gguf(g, u, d, up_bias=np.zeros((e, inter + 1)))
    with pytest.raises(InputError, match="differs from gates"):  # gate and up of different types
        moe_from_gguf(
            g,
            (
                gguf.quants.quantize(
                    rng.normal(0, 1, (e, inter, hidden)).astype(np.float32), gguf.GGMLQuantizationType.Q4_0
                ),
                "Q4_0",
                (e, inter, hidden),
            ),
            d,
        )


# ---- ModelOpt NVFP4 --------------------------------------------------------------------------------


def nvfp4_expert(rng, rows, cols, gs2, as_tuple=False):
    """ModelOpt tensors of one projection and their float64 values."""
    codes = rng.integers(0, 16, (rows, cols))
    sbytes = rng.integers(0x18, 0x58, (rows, cols // 16)).astype(np.uint8)  # positive e4m3
    vals = E2M1[codes] * np.repeat(e4m3(sbytes), 16, axis=1) * float(np.float32(gs2))
    w, s, s2 = pack_nibbles(codes), sbytes, np.array(gs2, np.float32)
    spec = (
        (w, s, s2, np.array(1.5, np.float32))
        if as_tuple
        else {"weight": w, "weight_scale": s, "weight_scale_2": s2, "input_scale": np.array(0.7, np.float32)}
    )
    return spec, vals


def nvfp4_layer(rng, gs2s, e=2, inter=64, hidden=64):
    """gs2s: per expert (gate, up, down) weight_scale_2."""
    specs, vals = ([], [], []), ([], [], [])
    for x in range(e):
        for i, (r, c) in enumerate(((inter, hidden), (inter, hidden), (hidden, inter))):
            s, v = nvfp4_expert(rng, r, c, gs2s[x][i], as_tuple=(x + i) % 2 == 1)
            specs[i].append(s)
            vals[i].append(v)
    return specs, [np.stack(v) for v in vals]


def test_nvfp4_shared_and_exactly_folded_global_scales(rng):
    gs = [(1e-3, 1e-3, 2e-3), (3e-3, 1.5e-3, 4e-3)]  # expert 1: up = gate / 2
    (g, u, d), (gv, uv, dv) = nvfp4_layer(rng, gs)
    bias = rng.normal(0, 1, (2, 64)).astype(np.float32)
    w13, w2 = moe_from_nvfp4(g, u, d, up_bias=bias, down_bias=bias)
    W13, W2 = both(w13, w2)
    np.testing.assert_array_equal(W13, np.concatenate([gv, uv], axis=1))
    np.testing.assert_array_equal(W2, dv)
    np.testing.assert_array_equal(w13.global_scales, np.float32([1e-3, 3e-3]))  # gate's kept, up's folded
    np.testing.assert_array_equal(w2.global_scales, np.float32([2e-3, 4e-3]))
    np.testing.assert_array_equal(logical_bias(w13), np.concatenate([np.zeros((2, 64)), bias], axis=1))


def test_nvfp4_fold_into_gate_when_up_cannot(rng):
    g0 = 1.25 * 2.0**-10  # float32 globals in an exact ratio 3
    gs = [(3 * g0, g0, 1e-3), (2e-3, 2e-3, 1e-3)]  # expert 0: s_up / 3 is inexact, s_gate * 3 not
    (g, u, d), (gv, uv, dv) = nvfp4_layer(rng, gs)
    w13, w2 = moe_from_nvfp4(g, u, d)
    W13, _ = both(w13, w2)
    np.testing.assert_array_equal(W13, np.concatenate([gv, uv], axis=1))
    assert w13.global_scales[0] == np.float32(g0)


def test_nvfp4_inexact_ratio_refused_or_rounded(rng):
    gs = [(1e-3, 1.1e-3, 1e-3), (1e-3, 1e-3, 1e-3)]
    (g, u, d), (gv, uv, dv) = nvfp4_layer(rng, gs)
    with pytest.raises(InputError, match=r"expert 0: gate and up weight_scale_2 differ.*round_scales=True"):
        moe_from_nvfp4(g, u, d)
    w13, w2 = moe_from_nvfp4(g, u, d, round_scales=True)
    W13, W2 = both(w13, w2)
    assert w13.global_scales[0] == np.float32(1.1e-3)  # the larger kept: gate's scales shrink
    np.testing.assert_array_equal(W13[:, 64:], uv)
    np.testing.assert_array_equal(W13[1], np.concatenate([gv[1], uv[1]]))
    err = np.abs(W13[0, :64] - gv[0])
    assert np.all(err <= 2.0**-10 * np.abs(gv[0])) and err.max() > 0  # one fp16 rounding per scale
    np.testing.assert_array_equal(W2, dv)


def test_nvfp4_refusals(rng):
    gs = [(1e-3, 1e-3, 1e-3)] * 2
    (g, u, d), _ = nvfp4_layer(rng, gs)
    with pytest.raises(InputError, match="expert counts differ"):
        moe_from_nvfp4(g, u[:1], d)
    with pytest.raises(InputError, match="lacks weight_scale_2"):
        moe_from_nvfp4([{"weight": g[0]["weight"], "weight_scale": g[0]["weight_scale"]}, g[1]], u, d)
    nan = dict(g[0], weight_scale=g[0]["weight_scale"].copy())
    nan["weight_scale"][0, 0] = 0x7F
    with pytest.raises(InputError, match=r"gates\[0\].*NaN"):
        moe_from_nvfp4([nan, g[1]], u, d)
    two = dict(g[0], weight_scale_2=np.float32([1e-3, 2e-3]))
    with pytest.raises(InputError, match="one float32"):
        moe_from_nvfp4([two, g[1]], u, d)
    with pytest.raises(InputError, match=r"expert 0: down is \(64, 32\)"):
        small, _ = nvfp4_expert(rng, 64, 32, 1e-3)
        moe_from_nvfp4(g, u, [small, d[1]])
    with pytest.raises(InputError, match="must be a mapping"):
        moe_from_nvfp4([g[0]["weight"], g[1]], u, d)
    with pytest.raises(InputError, match="one entry per expert"):
        moe_from_nvfp4(g[0], u, d)
    with pytest.raises(InputError, match="round_scales must be a bool"):
        moe_from_nvfp4(g, u, d, round_scales="yes")


# ---- moe_from_experts --------------------------------------------------------------------------------


def gptq_expert(rng, rows, cols, group=32):
    """GPTQ v1 symmetric tensors packed here (qweight int32 (K/8, N), low bits first along K)
    and the weight's float64 value (q - 8) * s."""
    q = rng.integers(0, 16, (cols, rows))  # (K, N)
    words = np.zeros((cols // 8, rows), np.uint32)
    for i in range(8):
        words |= q[i::8].astype(np.uint32) << np.uint32(4 * i)
    s = rng.uniform(1e-3, 3e-2, (cols // group, rows)).astype(np.float16)
    w = ((q - 8) * np.repeat(s.astype(np.float64), group, axis=0)).T
    return from_gptq(words.view(np.int32), None, s), w


def test_experts_from_gptq(rng):
    e, inter, hidden = 3, 64, 96
    parts = [[gptq_expert(rng, r, c) for _ in range(e)] for r, c in ((inter, hidden), (inter, hidden), (hidden, inter))]
    (g, gv), (u, uv), (d, dv) = ([list(x) for x in zip(*p)] for p in parts)
    bg, bd = rng.normal(0, 1, (e, inter)), rng.normal(0, 1, (e, hidden))
    w13, w2 = moe_from_experts(g, u, d, gate_bias=bg, down_bias=bd)
    assert w13.qtype == "uint4b8" and w13.group_size == 32 and w13.shape == (e, 2 * inter, hidden)
    W13, W2 = both(w13, w2)
    np.testing.assert_array_equal(W13, np.concatenate([np.stack(gv), np.stack(uv)], axis=1))
    np.testing.assert_array_equal(W2, np.stack(dv))
    np.testing.assert_array_equal(
        logical_bias(w13), np.concatenate([bg.astype(np.float32), np.zeros((e, inter))], axis=1)
    )
    np.testing.assert_array_equal(logical_bias(w2), bd.astype(np.float32))


def test_experts_refusals(rng):
    def q(r, c):
        return quantize(rng.normal(0, 1, (r, c)), "uint4b8", 64)

    g, u, d = [q(64, 128), q(64, 128)], [q(64, 128), q(64, 128)], [q(128, 64), q(128, 64)]
    with pytest.raises(InputError, match="expert counts differ"):
        moe_from_experts(g, u, d[:1])
    with pytest.raises(InputError, match=r"expert 1: up is \(128, 128\)"):
        moe_from_experts(g, [u[0], q(128, 128)], d)
    with pytest.raises(InputError, match=r"expert 1: down is \(64, 128\) but must be \(H, I\) = \(128, 64\)"):
        moe_from_experts(g, u, [d[0], q(64, 128)])
    with pytest.raises(InputError, match="expert 1: gate is"):
        moe_from_experts([g[0], q(64, 64)], [u[0], q(64, 64)], [d[0], q(64, 64)])
    with pytest.raises(InputError, match=r"downs\[0\] must be a QuantizedWeight"):
        moe_from_experts(g, u, [np.zeros((128, 64)), d[1]])
    with pytest.raises(InputError, match="one entry per expert"):
        moe_from_experts(g[0], u, d)
    with pytest.raises(InputError, match="empty"):
        moe_from_experts([], [], [])
    with pytest.raises(InputError, match="down_bias|bias must have shape"):
        moe_from_experts(g, u, d, down_bias=np.zeros((2, 64)))
    with pytest.raises(InputError, match="differs from"):
        moe_from_experts(g, [u[0], quantize(rng.normal(0, 1, (64, 128)), "uint8b128", 64)], d)
