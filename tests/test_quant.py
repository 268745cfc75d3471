import numpy as np
import pytest

import jitmarlin
from jitmarlin import InputError, UnsupportedError, halves, packing


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
    # round-to-nearest: error at most half a step (plus the top code's clipping, one step)
    gs = k if group == -1 else group
    step = np.repeat(halves.from_bits(
        qw.scales if group == -1 else packing.unpermute_scales(qw.scales).T, sdt).reshape(n, -1), gs, axis=1)
    assert np.all(np.abs(d - w) <= step * 1.0 + 1e-7)
    assert np.mean(np.abs(d - w) <= step * 0.5 + 1e-7) > 0.95


def test_scales_for_other_activation_dtype(rng):
    qw = jitmarlin.quantize(rng.standard_normal((64, 128)), "uint4b8", 64, scale_dtype="float16")
    b = qw.scales_for("bfloat16")
    assert np.array_equal(b, halves.to_bits(halves.from_bits(qw.scales, "float16"), "bfloat16"))
    assert not np.array_equal(jitmarlin.dequantize(qw), jitmarlin.dequantize(qw, "bfloat16"))


def test_quantize_accepts_torch_and_errors():
    w = np.ones((64, 128), np.float32)
    assert jitmarlin.quantize(w, "uint4b8", 128).shape == (64, 128)
    with pytest.raises(InputError, match="multiples of 64"):
        jitmarlin.quantize(np.ones((60, 128)), "uint4b8", 128)
    with pytest.raises(InputError, match="group_size"):
        jitmarlin.quantize(w, "uint4b8", 48)
    with pytest.raises(UnsupportedError):
        jitmarlin.quantize(w, "nvfp4", 16)
    with pytest.raises(InputError, match="NaN"):
        jitmarlin.quantize(np.full((64, 128), np.nan), "uint4b8", 128)
    with pytest.raises(InputError, match="unknown quant"):
        jitmarlin.quantize(w, "int3", 128)
