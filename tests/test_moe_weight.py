"""MoEWeight (stacked experts): the gate/up interleave is exact, quantize_moe / dequantize_moe agree
bit for bit with per-expert quantize / dequantize in logical row order, bias is padded and
interleaved, every refusal; and moe_reference against an explicit per-token loop."""

import math
from dataclasses import replace

import numpy as np
import pytest

import jitmarlin
from jitmarlin import InputError, MoEWeight, dequantize_moe, quantize_moe
from jitmarlin.reference import moe_reference
from jitmarlin.weights import halves
from jitmarlin.weights.moe import gate_up_rows, logical_bias
from jitmarlin.weights.quant import from_codes

# (qtype, group_size): every qtype, per-channel (-1) where the qtype takes it
CASES = [
    ("uint4b8", 128),
    ("uint4b8", -1),
    ("uint4", 64),
    ("uint4", -1),
    ("uint8b128", 32),
    ("uint8b128", -1),
    ("uint8", -1),
    ("float8_e4m3fn", -1),
    ("float8_e4m3fn", 64),
    ("nvfp4", 16),
    ("mxfp4", 32),
]
# relative round-trip error that quantization stays under for Gaussian weights
ROUND_TRIP = {
    "uint4b8": 0.15,
    "uint4": 0.15,
    "uint8b128": 0.01,
    "uint8": 0.01,
    "float8_e4m3fn": 0.05,
    "nvfp4": 0.15,
    "mxfp4": 0.2,
}
E, I, K = 3, 24, 96  # I = 24: the last interleave block is a lone 8; 2I = 48 and K = 96 are padded


def _interleave(gate, up):
    """The kernel row order written out row by row: gate row j at (j//8)*16 + j%8, up row j 8 later."""
    out = np.full((gate.shape[0] + up.shape[0],) + gate.shape[1:], np.nan)
    for j in range(gate.shape[0]):
        out[(j // 8) * 16 + j % 8] = gate[j]
        out[(j // 8) * 16 + 8 + j % 8] = up[j]
    return out


def _gate_up(rng, qtype, gs, scale_dtype="float16"):
    """Each expert's gate and up QuantizedWeights (I, K); for nvfp4 halves of one quantized w13 so
    that they share the global scale."""
    w = rng.standard_normal((E, 2 * I, K)) * rng.uniform(0.5, 2, (E, 1, 1))
    if qtype == "nvfp4":
        full = [jitmarlin.quantize(w[e], qtype, gs, scale_dtype=scale_dtype) for e in range(E)]
        return [f.shard(0, 0, 2) for f in full], [f.shard(0, 1, 2) for f in full]
    return (
        [jitmarlin.quantize(w[e, :I], qtype, gs, scale_dtype=scale_dtype) for e in range(E)],
        [jitmarlin.quantize(w[e, I:], qtype, gs, scale_dtype=scale_dtype) for e in range(E)],
    )


@pytest.mark.parametrize("qtype,gs", CASES, ids=[f"{q}-g{g}" for q, g in CASES])
def test_stack_gate_up_interleave_is_exact(rng, qtype, gs):
    sdt = "bfloat16" if qtype == "mxfp4" else "float16"
    gates, ups = _gate_up(rng, qtype, gs, sdt)
    mw = MoEWeight.stack_gate_up(gates, ups)
    assert mw.gated and mw.shape == (E, 2 * I, K) and mw.intermediate == I
    for e in range(E):
        g = jitmarlin.dequantize(gates[e], dtype=np.float64)
        u = jitmarlin.dequantize(ups[e], dtype=np.float64)
        kernel_order = jitmarlin.dequantize(mw.expert(e), dtype=np.float64)
        assert np.array_equal(kernel_order, _interleave(g, u))
        assert mw.expert(e).global_scale == gates[e].global_scale
    logical = dequantize_moe(mw, dtype=np.float64)
    assert np.array_equal(logical[:, :I], np.stack([jitmarlin.dequantize(g, dtype=np.float64) for g in gates]))
    assert np.array_equal(logical[:, I:], np.stack([jitmarlin.dequantize(u, dtype=np.float64) for u in ups]))
    # the other activation dtype's scale rounding goes through the same rows
    other = "bfloat16" if sdt == "float16" else "float16"
    if qtype != "mxfp4":  # e8m0 scales below float16's range do not fit it (refused, as for one weight)
        assert np.array_equal(dequantize_moe(mw, other)[:, I:], np.stack([jitmarlin.dequantize(u, other) for u in ups]))


def test_gate_up_rows_matches_the_written_out_order():
    rows = gate_up_rows(40)
    expect = _interleave(np.arange(40.0)[:, None], 40 + np.arange(40.0)[:, None])[:, 0]
    assert np.array_equal(np.argsort(rows), expect.astype(int))
    assert sorted(rows) == list(range(80))


@pytest.mark.parametrize("qtype,gs", CASES, ids=[f"{q}-g{g}" for q, g in CASES])
def test_quantize_moe_matches_per_expert_quantize(rng, qtype, gs):
    w = rng.standard_normal((E, 2 * I, K))
    for gated in (False, True):
        mw = quantize_moe(w, qtype, gs, gated=gated)
        assert mw.gated == gated and mw.shape == (E, 2 * I, K) and mw.packed.flags.c_contiguous
        got = dequantize_moe(mw)
        assert got.dtype == np.float32 and got.shape == w.shape
        # logical order, exactly the per-expert quantization of w13 as one tensor
        assert np.array_equal(
            got, np.stack([jitmarlin.dequantize(jitmarlin.quantize(w[e], qtype, gs)) for e in range(E)])
        )
        assert np.linalg.norm(got - w) / np.linalg.norm(w) < ROUND_TRIP[qtype]
    if qtype != "nvfp4":  # scales are per row: the same as quantizing gate and up apart
        halves_apart = [
            np.concatenate(
                [
                    jitmarlin.dequantize(jitmarlin.quantize(w[e, :I], qtype, gs)),
                    jitmarlin.dequantize(jitmarlin.quantize(w[e, I:], qtype, gs)),
                ]
            )
            for e in range(E)
        ]
        assert np.array_equal(got, np.stack(halves_apart))
    else:
        assert mw.global_scales.dtype == np.float32 and mw.global_scales.shape == (E,)
        assert np.all(mw.global_scales != 1)


def test_quantize_moe_nvfp4_experts_keep_their_own_global_scale(rng):
    w = rng.standard_normal((2, 32, 64)) * np.array([1.0, 100.0])[:, None, None]
    mw = quantize_moe(w, "nvfp4", gated=True)
    for e in range(2):  # quantize's rule, over the whole w13 of the expert
        assert mw.global_scales[e] == np.float32(np.abs(w[e]).max() / (448 * 6))
    assert np.linalg.norm(dequantize_moe(mw)[1] - w[1]) / np.linalg.norm(w[1]) < 0.15


def test_stack_matches_experts_and_views_share_memory(rng):
    experts = [jitmarlin.quantize(rng.standard_normal((40, 72)), "uint4", 32) for _ in range(4)]
    mw = MoEWeight.stack(experts)
    assert (mw.packed.shape, mw.scales.shape, mw.offsets.shape) == ((4, 128 // 16, 128), (4, 4, 64), (4, 4, 64))
    assert mw.global_scales is None and mw.bias is None and not mw.gated
    assert np.array_equal(dequantize_moe(mw), np.stack([jitmarlin.dequantize(x) for x in experts]))
    view = mw.expert(2)
    assert np.shares_memory(view.packed, mw.packed) and np.shares_memory(view.scales, mw.scales)
    assert mw.nbytes == sum(x.nbytes for x in experts)
    with pytest.raises(InputError, match="intermediate is defined for gated"):
        _ = mw.intermediate
    with pytest.raises(InputError, match=r"expert: e must be an int in \[0, 4\)"):
        mw.expert(4)


def test_bias_is_padded_interleaved_and_round_trips(rng):
    w = rng.standard_normal((E, 2 * I, K))
    b = rng.standard_normal((E, 2 * I))
    mw = quantize_moe(w, gated=True, bias=b)
    assert mw.bias.dtype == np.float32 and mw.bias.shape == (E, 64) and mw.bias.flags.c_contiguous
    assert np.all(mw.bias[:, 2 * I :] == 0)
    for e in range(E):
        assert np.array_equal(
            mw.bias[e], np.concatenate([_interleave(b[e, :I], b[e, I:]), np.zeros(64 - 2 * I)]).astype(np.float32)
        )
    assert np.array_equal(logical_bias(mw), b.astype(np.float32).astype(np.float64))
    # stack_gate_up with only an up bias: gate entries are zeros
    gates, ups = _gate_up(rng, "uint4b8", 128)
    g2 = MoEWeight.stack_gate_up(gates, ups, up_bias=b[:, I:].astype(np.float16))
    assert np.array_equal(logical_bias(g2)[:, :I], np.zeros((E, I)))
    assert np.array_equal(logical_bias(g2)[:, I:], b[:, I:].astype(np.float16).astype(np.float64))
    # plain weights: natural order, padded
    plain = quantize_moe(w[:, :40], "uint8b128", -1, bias=b[:, :40])
    assert plain.bias.shape == (E, 64) and np.all(plain.bias[:, 40:] == 0)
    assert np.array_equal(logical_bias(plain), b[:, :40].astype(np.float32))
    assert logical_bias(quantize_moe(w)) is None


# ---- refusals -------------------------------------------------------------------------------------


def test_stack_names_the_expert_and_field_that_differ(rng):
    x = rng.standard_normal((64, 128))
    base = jitmarlin.quantize(x, "uint4b8", 128)
    cases = [
        (jitmarlin.quantize(x, "uint4b8", 64), "group_size"),
        (jitmarlin.quantize(x, "uint8b128", 128), "qtype"),
        (jitmarlin.quantize(x, "uint4b8", 128, scale_dtype="bfloat16"), "scale_dtype"),
        (jitmarlin.quantize(x[:56], "uint4b8", 128), "out_features"),
        (jitmarlin.quantize(x[:, :120], "uint4b8", 128), "in_features"),
    ]
    for other, fld in cases:
        with pytest.raises(InputError, match=rf"expert 2 differs from expert 0 in {fld}"):
            MoEWeight.stack([base, base, other, base])
    with pytest.raises(InputError, match="no experts given"):
        MoEWeight.stack([])
    with pytest.raises(InputError, match="expert 1 must be a QuantizedWeight"):
        MoEWeight.stack([base, x])
    with pytest.raises(InputError, match=r"bias must have shape \(2, 64\)"):
        MoEWeight.stack([base, base], bias=np.zeros((2, 63)))
    with pytest.raises(InputError, match="bias contains NaN"):
        MoEWeight.stack([base, base], bias=np.full((2, 64), np.nan))
    with pytest.raises(InputError, match=r"ups\[1\] differs from gates\[0\] in out_features"):
        MoEWeight.stack_gate_up([base, base], [base, jitmarlin.quantize(x[:56], "uint4b8", 128)])
    with pytest.raises(InputError, match="2 gates but 1 ups"):
        MoEWeight.stack_gate_up([base, base], [base])


def test_act_order_is_refused(rng):
    codes = rng.integers(0, 16, (64, 128))
    g_idx = rng.permutation(np.repeat(np.arange(4), 32))
    ao = from_codes("uint4b8", codes, rng.uniform(0.5, 1, (4, 64)), 32, g_idx=g_idx)
    plain = from_codes("uint4b8", codes, rng.uniform(0.5, 1, (4, 64)), 32)
    assert ao.perm is not None
    with pytest.raises(InputError, match=r"expert 1: MoE experts with act-order \(g_idx\) are not supported"):
        MoEWeight.stack([plain, ao])
    with pytest.raises(InputError, match=r"gates\[0\]: MoE experts with act-order"):
        MoEWeight.stack_gate_up([ao], [plain])


def test_gate_up_global_scale_must_match(rng):
    gates = [jitmarlin.quantize(rng.standard_normal((16, 64)), "nvfp4") for _ in range(2)]
    ups = [jitmarlin.quantize(rng.standard_normal((16, 64)) * 3, "nvfp4") for _ in range(2)]
    with pytest.raises(InputError, match="expert 0's gate and up have different global_scale"):
        MoEWeight.stack_gate_up(gates, ups)


def test_gated_intermediate_must_be_a_multiple_of_8(rng):
    with pytest.raises(InputError, match="I=12 must be a multiple of 8"):
        quantize_moe(rng.standard_normal((2, 24, 64)), gated=True)
    with pytest.raises(InputError, match=r"2\*I rows per expert, got 39"):
        quantize_moe(rng.standard_normal((2, 39, 64)), gated=True)
    mw = quantize_moe(rng.standard_normal((2, 32, 64)), gated=True)
    with pytest.raises(InputError, match="I=12 must be a multiple of 8"):
        replace(mw, out_features=24)
    with pytest.raises(InputError, match="a gated weight has 2\\*I rows"):
        replace(mw, out_features=31)


def test_constructor_checks_every_array(rng):
    mw = quantize_moe(rng.standard_normal((2, 40, 72)), "uint4", 32)  # n 64, k 128: packed (2, 8, 128)
    ok = dict(global_scales=np.ones(2, np.float32), bias=np.zeros((2, 64), np.float32))
    replace(mw, **ok)
    bad = [
        (dict(num_experts=0), "num_experts must be an int >= 1"),
        (dict(num_experts=3), r"packed must have shape \(3, 8, 128\)"),
        (dict(qtype="int3"), "unknown quant type"),
        (dict(group_size=48), "group_size must be one of"),
        (dict(n=96), "n .* must be a positive multiple of 64"),
        (dict(out_features=72), r"out_features must be in 1..n=64"),
        (dict(in_features=136), r"in_features must be in 1..k=128"),
        (dict(in_features=24), "not the padded shape"),
        (dict(packed=mw.packed.astype(np.int64)), "packed must be int32"),
        (dict(packed=mw.packed[:, :4]), r"packed must have shape \(2, 8, 128\)"),
        (dict(packed=np.asfortranarray(mw.packed)), "packed must be C-contiguous"),
        (dict(packed=list(mw.packed)), "packed must be an array"),
        (dict(scales=mw.scales[:, :2]), r"scales must have shape \(2, 4, 64\)"),
        (dict(scales=mw.scales.view(np.int16)), "scales must be uint16"),
        (dict(offsets=None), "uint4 has zero points: offsets are required"),
        (dict(offsets=mw.offsets[:, :, :32]), r"offsets must have shape \(2, 4, 64\)"),
        (dict(qtype="uint4b8"), "uint4b8 has no zero points: offsets must be None"),
        (dict(scale_dtype="float32"), "scale_dtype must be float16 or bfloat16"),
        (dict(global_scales=np.ones(3, np.float32)), r"global_scales must have shape \(2,\)"),
        (dict(global_scales=np.ones(2)), "global_scales must be float32"),
        (dict(global_scales=np.array([1, np.inf], np.float32)), "global_scales contain NaN or Inf"),
        (dict(bias=np.zeros((2, 40), np.float32)), r"bias must have shape \(2, 64\)"),
        (dict(bias=np.zeros((2, 64), np.float16)), "bias must be float32"),
        (dict(bias=np.full((2, 64), np.nan, np.float32)), "bias contain NaN or Inf"),
        (dict(gated="yes"), "gated must be a bool"),
    ]
    for kw, msg in bad:
        with pytest.raises(InputError, match=msg):
            replace(mw, **kw)
    # a field changed after construction is checked again before use
    mw2 = replace(mw)
    mw2.packed = mw.packed[:, :4]
    with pytest.raises(InputError, match="packed must have shape"):
        dequantize_moe(mw2)
    # device copies are per object and dropped when a field changes (no GPU here: a stand-in entry)
    mw3 = replace(mw)
    mw3._device[(0, "float16")] = "stale"
    assert replace(mw3)._device == {}
    mw3.bias = np.zeros((2, 64), np.float32)
    assert mw3._device == {}
    # symmetric per-channel scales are 2-D (E, n)
    sym = quantize_moe(rng.standard_normal((2, 40, 72)), "uint4b8", -1)
    assert sym.scales.shape == (2, 64)
    with pytest.raises(InputError, match=r"scales must have shape \(2, 64\)"):
        replace(sym, scales=np.zeros((2, 1, 64), np.uint16))


def test_quantize_moe_input_checks(rng):
    with pytest.raises(InputError, match="must be 3-D"):
        quantize_moe(rng.standard_normal((32, 64)))
    with pytest.raises(InputError, match=r"bias must have shape \(2, 32\)"):
        quantize_moe(rng.standard_normal((2, 32, 64)), gated=True, bias=np.zeros((2, 16)))
    with pytest.raises(InputError, match="weight contains NaN"):
        quantize_moe(np.full((2, 32, 64), np.nan))


def test_scales_for_other_activation_dtype(rng):
    mw = quantize_moe(rng.standard_normal((2, 32, 64)), "uint4b8", 64)
    bf = mw.scales_for("bfloat16")
    assert bf.shape == mw.scales.shape
    assert np.array_equal(bf, halves.to_bits(halves.from_bits(mw.scales, "float16"), "bfloat16"))
    assert mw.scales_for("float16") is mw.scales and mw.offsets_for("float16") is None


# ---- moe_reference --------------------------------------------------------------------------------

H = 64


def _moe(rng, num_experts=3, inter=16, bias=True, scale=0.3):
    w13 = rng.standard_normal((num_experts, 2 * inter, H)) * scale
    w2 = rng.standard_normal((num_experts, H, inter)) * scale
    b13 = rng.standard_normal((num_experts, 2 * inter)) if bias else None
    b2 = rng.standard_normal((num_experts, H)) * 0.1 if bias else None
    return (quantize_moe(w13, "uint4b8", 32, gated=True, bias=b13), quantize_moe(w2, "uint8b128", -1, bias=b2), w13, w2)


def _slow(x, qw13, qw2, w13, w2, ids, wts, activation, act, emap=None, on_input=False, rounding=True):
    """One token and one slot at a time, from per-expert quantize + dequantize of the float weights."""
    inter = w13.shape[1] // 2
    W13 = [
        jitmarlin.dequantize(jitmarlin.quantize(w13[e], "uint4b8", 32), act).astype(np.float64) for e in range(len(w13))
    ]
    W2 = [
        jitmarlin.dequantize(jitmarlin.quantize(w2[e], "uint8b128", -1), act).astype(np.float64) for e in range(len(w2))
    ]
    b13 = logical_bias(qw13)
    b2 = logical_bias(qw2)
    sig = lambda z: 1 / (1 + math.exp(-z)) if z > -700 else 0.0
    out = np.zeros((x.shape[0], x.shape[1]))
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j]) if emap is None else int(emap[ids[t, j]])
            if e < 0:
                continue
            inp = x[t].astype(np.float64) * (wts[t, j] if on_input else 1.0)
            h = W13[e] @ inp + (0 if b13 is None else b13[e])
            a = np.empty(inter)
            for i in range(inter):
                g, u = h[i], h[inter + i]
                if activation == "silu":
                    a[i] = g * sig(g) * u
                elif activation == "gelu":
                    a[i] = 0.5 * g * (1 + math.erf(g / math.sqrt(2))) * u
                else:
                    g, u = min(g, 7.0), min(max(u, -7.0), 7.0)
                    a[i] = (u + 1) * g * sig(1.702 * g)
            if rounding:
                # via float32, as the kernels round their fp32 activation (rounding float64 straight
                # to float16 differs where float32's own rounding crosses a float16 tie)
                a = (a.astype(np.float32).astype(np.float16) if act == "float16" else halves.round_to(a, act)).astype(
                    np.float64
                )
            y = W2[e] @ a + (0 if b2 is None else b2[e])
            out[t] += y if on_input else wts[t, j] * y
    return out


@pytest.mark.parametrize("activation", ["silu", "gelu", "swigluoai"])
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_moe_reference_matches_a_per_token_loop(rng, activation, act):
    qw13, qw2, w13, w2 = _moe(rng)
    x = rng.standard_normal((7, H)) * (3 if activation == "swigluoai" else 1)  # reach the clamps
    xa = x.astype(np.float16) if act == "float16" else halves.round_to(x, "bfloat16")
    ids = rng.integers(0, 3, (7, 2))
    wts = rng.uniform(0.1, 1, (7, 2))
    ref = moe_reference(xa, qw13, qw2, wts, ids, activation=activation, act=None if act == "float16" else act)
    slow = _slow(xa, qw13, qw2, w13, w2, ids, wts, activation, act)
    assert ref.shape == (7, H) and ref.dtype == np.float64
    np.testing.assert_allclose(ref, slow, rtol=1e-9, atol=1e-9 * np.abs(slow).max())


def test_moe_reference_expert_map_skips_other_ranks(rng):
    qw13, qw2, w13, w2 = _moe(rng)
    emap = np.array([-1, 2, -1, 0, 1, -1])  # 6 global experts, 3 local
    x = rng.standard_normal((9, H)).astype(np.float16)
    ids = rng.integers(0, 6, (9, 3))
    ids[0] = [0, 2, 5]  # token 0: every expert elsewhere
    wts = rng.uniform(0.1, 1, (9, 3))
    ref = moe_reference(x, qw13, qw2, wts, ids, expert_map=emap)
    np.testing.assert_allclose(
        ref,
        _slow(x, qw13, qw2, w13, w2, ids, wts, "silu", "float16", emap=emap),
        rtol=1e-9,
        atol=1e-9 * np.abs(ref).max(),
    )
    assert np.all(ref[0] == 0)
    # ids outside the map, or (without one) outside the experts, add nothing (jitmarlin.moe's contract)
    assert np.all(moe_reference(x, qw13, qw2, wts, ids + 6, expert_map=emap) == 0)
    local = np.where(ids < 3, ids, 7)
    kept = np.where(ids < 3, wts, 0.0)
    np.testing.assert_allclose(
        moe_reference(x, qw13, qw2, wts, local),
        moe_reference(x, qw13, qw2, kept, ids % 3),
        rtol=1e-12,
        atol=1e-12 * np.abs(ref).max(),
    )


def test_moe_reference_router_weight_on_input(rng):
    qw13, qw2, w13, w2 = _moe(rng)
    x = rng.standard_normal((6, H)).astype(np.float16)
    ids = rng.integers(0, 3, (6, 1))
    wts = rng.uniform(0.2, 0.9, (6, 1))
    on = moe_reference(x, qw13, qw2, wts, ids, apply_router_weight_on_input=True)
    np.testing.assert_allclose(
        on,
        _slow(x, qw13, qw2, w13, w2, ids, wts, "silu", "float16", on_input=True),
        rtol=1e-9,
        atol=1e-9 * np.abs(on).max(),
    )
    off = moe_reference(x, qw13, qw2, wts, ids)
    assert not np.allclose(on, off, rtol=1e-2)  # silu is not linear: where the weight goes matters


def test_moe_reference_round_intermediate(rng):
    qw13, qw2, w13, w2 = _moe(rng, bias=False)
    x = rng.standard_normal((5, H)).astype(np.float16)
    ids = rng.integers(0, 3, (5, 2))
    wts = rng.uniform(0.1, 1, (5, 2))
    exact = moe_reference(x, qw13, qw2, wts, ids, round_intermediate=False)
    np.testing.assert_allclose(
        exact,
        _slow(x, qw13, qw2, w13, w2, ids, wts, "silu", "float16", rounding=False),
        rtol=1e-9,
        atol=1e-9 * np.abs(exact).max(),
    )
    rounded = moe_reference(x, qw13, qw2, wts, ids)
    bf = moe_reference(x, qw13, qw2, wts, ids, act="bfloat16")
    scale = np.abs(exact).max()
    for got, u in ((rounded, 2.0**-11), (bf, 2.0**-8)):
        diff = np.abs(got - exact).max()
        assert 1e-3 * u * scale < diff < 20 * u * scale  # differs, by roundings of the dtype


def test_moe_reference_refusals(rng):
    qw13, qw2, *_ = _moe(rng)
    x = np.zeros((2, H), np.float16)
    ids, wts = np.zeros((2, 1), np.int64), np.ones((2, 1))
    with pytest.raises(InputError, match="activation must be one of"):
        moe_reference(x, qw13, qw2, wts, ids, activation="relu")
    with pytest.raises(InputError, match="w13 must be a gated MoEWeight"):
        moe_reference(x, qw2, qw2, wts, ids)
    with pytest.raises(InputError, match=r"x must be \(T, 64\)"):
        moe_reference(np.zeros((2, 32)), qw13, qw2, wts, ids)
    with pytest.raises(InputError, match="topk_ids"):
        moe_reference(x, qw13, qw2, wts, ids.astype(np.float32))
    with pytest.raises(InputError, match="w2 must be"):
        moe_reference(x, qw13, _moe(rng, inter=24)[1], wts, ids)
