"""weights.kernel_form: the float-code words and scales a kernel reads, against the canonical
layout and the dequantize oracle. The decodes are modelled here from the PTX ISA (prmt's byte
selection) and the templates' formulas; the emulator tests run the templates themselves."""

import dataclasses

import numpy as np
import pytest

from jitmarlin.errors import InputError
from jitmarlin.weights import halves, kernel_form, packing
from jitmarlin.weights.quant import E2M1, E4M3, dequantize, from_codes, quantize

ACTS = ("float16", "bfloat16")


def _prmt(a: int, b: int, sel: int) -> int:
    src = a | (b << 32)
    return sum(((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


def _rotr(q: int, r: int) -> int:
    return ((q >> r) | (q << (32 - r))) & 0xFFFFFFFF


def _decode_like_the_kernel(q: int, act: str) -> list[int]:
    """templates/dequant/fp4_<act>.cuh on one word: the four half2 registers b0.r0, b0.r1,
    b1.r0, b1.r1 (pairs (v0, v1), (v2, v3), (v4, v5), (v6, v7))."""
    if act == "float16":
        x = q & 0x8E8E8E8E
        y = ((q >> 3) & 0x0E0E0E0E) | ((q << 7) & 0x80808080)
        return [_prmt(x, 0, 0x1404), _prmt(x, 0, 0x3424), _prmt(y, 0, 0x1404), _prmt(y, 0, 0x3424)]
    l1, h1 = q & 0xC0C0C0C0, _rotr(q, 1) & 0x81818181
    l2, h2 = (q << 4) & 0xC0C0C0C0, _rotr(q, 5) & 0x81818181
    return [_prmt(l1, h1, 0x5140), _prmt(l1, h1, 0x7362), _prmt(l2, h2, 0x5140), _prmt(l2, h2, 0x7362)]


def _decode8_like_the_kernel(q: int, act: str) -> list[int]:
    """templates/dequant/fp8_<act>.cuh on one word: registers r0 (bytes 0, 1), r1 (bytes 2, 3)."""
    hi = q & (0xBFBFBFBF if act == "float16" else 0x87878787)
    lo = (q << 1) & (0x80808080 if act == "float16" else 0xF0F0F0F0)
    return [_prmt(hi, lo, 0x1504), _prmt(hi, lo, 0x3726)]


def _halves(regs, act):
    return halves.from_bits(np.array([(r >> (16 * h)) & 0xFFFF for r in regs for h in (0, 1)]), act)


def _same(got, want) -> bool:
    return np.array_equal(got.astype(np.float64), want) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("act", ACTS)
def test_fp4_decode_gives_every_code_times_the_power_of_two(act):
    """Every code in every value slot of a word decodes to its e2m1 value * 2^-DECODE_EXP,
    exactly, in the half the fragment order wants (value i: register i // 2, half i % 2)."""
    scale = 2.0 ** -kernel_form.DECODE_EXP[(4, act)]
    for slot in range(8):
        for code in range(16):
            vals = np.zeros(8, dtype=np.uint32)
            vals[slot] = code
            vals[(slot + 3) % 8] = 15 - code  # a neighbour that must not leak in
            word = int(sum(int(vals[v]) << (4 * int(packing.VALUE_NIBBLE[v])) for v in range(8)))
            kw = kernel_form.kernel_words(np.array([word], np.uint32).view(np.int32), 4, act)
            got = _halves(_decode_like_the_kernel(int(kw.view(np.uint32)[0]), act), act)
            assert _same(got, E2M1[vals.astype(np.int64)] * scale), (slot, code)


@pytest.mark.parametrize("act", ACTS)
def test_fp8_decode_gives_every_code_times_the_power_of_two(act):
    """Every e4m3 code but NaN in every byte of a word decodes to its value * 2^-DECODE_EXP."""
    scale = 2.0 ** -kernel_form.DECODE_EXP[(8, act)]
    codes = np.array([c for c in range(256) if (c & 0x7F) != 0x7F], dtype=np.uint32)
    for slot in range(4):
        for code in codes:
            vals = np.array([(code + 37 * i) % 256 for i in range(4)], dtype=np.uint32)
            vals[(vals & 0x7F) == 0x7F] = 0
            vals[slot] = code
            word = int(sum(int(vals[i]) << (8 * i) for i in range(4)))
            kw = kernel_form.kernel_words(np.array([word], np.uint32).view(np.int32), 8, act)
            got = _halves(_decode8_like_the_kernel(int(kw.view(np.uint32)[0]), act), act)
            assert _same(got, E4M3[vals.astype(np.int64)] * scale), (slot, code)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("act", ACTS)
def test_words_round_trip(bits, act, rng):
    w = rng.integers(-(2**31), 2**31, (64, 96), dtype=np.int64).astype(np.int32)
    k = kernel_form.kernel_words(w, bits, act)
    assert k.shape == w.shape and k.dtype == np.int32 and not np.array_equal(k, w)
    assert np.array_equal(kernel_form.canonical_words(k, bits, act), w)
    assert np.array_equal(np.sort(kernel_form.KERNEL_BITS[(bits, act)]), np.arange(32))


@pytest.mark.parametrize("qt", ["nvfp4", "mxfp4", "float8_e4m3fn"])
@pytest.mark.parametrize("act", ACTS)
def test_fold_is_exact_for_the_formats_scales(qt, act, rng):
    """decode * folded scale, rounded once to `act` as the kernel's multiply does, times the
    kernel's factor, is the stored form's product rounded once: for e4m3 / e8m0 scales exact,
    for fp8's fp16 scales the same rounding as without the fold (factor 1)."""
    w = rng.standard_normal((128, 256)) * np.exp(rng.uniform(-6, 3, (128, 1)))
    qw = quantize(w, qt, group_size=128 if qt == "float8_e4m3fn" else None, scale_dtype=act)
    bits = qw.bits
    packed, sbits, factor = kernel_form.kernel_form(qt, qw.packed, qw.scales_for(act), act)
    assert factor == qw.kernel_global_scale(act) / qw.global_scale
    assert factor == 2.0 ** (
        kernel_form.DECODE_EXP[(bits, act)] - kernel_form.fold_exponent(qw.scales_for(act), act, bits)
    )
    codes = packing.unpack(kernel_form.canonical_words(packed, bits, act), qw.n, qw.k, bits).astype(np.int64)
    s = halves.from_bits(packing.unpermute_scales(sbits.reshape(-1, qw.n)), act).astype(np.float64)
    vals = E2M1[codes] if bits == 4 else E4M3[codes]
    prod = vals * 2.0 ** -kernel_form.DECODE_EXP[(bits, act)] * np.repeat(s.T, qw.group_size, axis=1)
    rounded = halves.from_bits(halves.to_bits(prod, act), act).astype(np.float64)
    stored = dequantize(dataclasses.replace(qw, global_scale=1.0), act, dtype=np.float64)
    if bits == 4:
        assert np.array_equal(rounded, prod)  # exact in the half type, subnormals included
    else:
        assert factor == 1.0
    want = halves.from_bits(halves.to_bits(stored, act), act).astype(np.float64)
    assert np.array_equal((rounded * factor)[: qw.out_features, : qw.in_features], want)


def test_fold_exponents():
    e4m3_top = halves.to_bits(np.array([448.0, 2.0**-9]), "float16")
    assert kernel_form.fold_exponent(e4m3_top, "float16") == 7  # 448 * 2^7 = 57344 <= 65504
    assert kernel_form.fold_exponent(e4m3_top, "float16", bits=8) == 7
    assert kernel_form.fold_exponent(halves.to_bits(np.array([255.0]), "float16"), "float16", bits=8) == 8
    assert kernel_form.fold_exponent(halves.to_bits(np.array([448.0]), "bfloat16"), "bfloat16") == 119
    small = halves.to_bits(np.array([2.0**-3, -(2.0**-12)]), "float16")
    assert kernel_form.fold_exponent(small, "float16") == 14  # all of it: factor 1
    assert kernel_form.fold_exponent(halves.to_bits(np.array([65504.0]), "float16"), "float16") == 0
    assert kernel_form.fold_exponent(halves.to_bits(np.array([2047.0]), "float16"), "float16") == 5  # * 32 = 65504
    assert kernel_form.fold_exponent(halves.to_bits(np.array([2048.0]), "float16"), "float16") == 4
    assert kernel_form.kernel_factor("uint4b8", e4m3_top, "float16") == 1.0
    assert kernel_form.kernel_factor("nvfp4", e4m3_top, "float16") == 2.0**7
    assert kernel_form.kernel_factor("float8_e4m3fn", e4m3_top, "float16") == 2.0


def test_other_types_read_their_stored_form(rng):
    qw = quantize(rng.standard_normal((64, 128)), "uint4b8")
    p, s, f = kernel_form.kernel_form("uint4b8", qw.packed, qw.scales_for("float16"), "float16")
    assert p is qw.packed and f == 1.0 and np.array_equal(s, qw.scales_for("float16"))
    assert qw.kernel_global_scale("bfloat16") == qw.global_scale


def test_a_factor_out_of_fp32_range_is_refused():
    # bf16 scales at the top leave the whole 2^126 to a global scale that cannot take it
    codes = np.zeros((64, 32), np.uint8)
    qw = from_codes("mxfp4", codes, np.full((1, 64), 2.0**127), 32, scale_dtype="bfloat16", global_scale=2.0**10)
    with pytest.raises(InputError, match="overflows float32"):
        qw.kernel_global_scale("bfloat16")
