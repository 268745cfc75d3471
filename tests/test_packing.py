"""The packed weight layout against an oracle written from the PTX ISA's fragment layout."""

import numpy as np
import pytest

from jitmarlin.weights import packing


def test_pack_unpack_round_trip(rng):
    n, k = 192, 256
    q = rng.integers(0, 16, (n, k), dtype=np.uint8)
    p = packing.pack_int4(q)
    assert p.shape == (k // 16, 2 * n) and p.dtype == np.int32
    assert np.array_equal(packing.unpack_int4(p, n, k), q)


def _dequant_word_like_the_kernel(word: int):
    """The kernel's bit tricks on one 32-bit word, returning 4 (lo, hi) 16-bit lanes of nibbles:
    mask 0x000f000f, mask 0x00f000f0 (>> 4), then the same after >> 8."""
    out = []
    for shift in (0, 8):
        w = word >> shift
        out.append((w & 0xF, (w >> 16) & 0xF))  # fragment reg 0 of sub-tile
        out.append(((w >> 4) & 0xF, (w >> 20) & 0xF))  # fragment reg 1 of sub-tile
    return out  # [b0.r0, b0.r1, b1.r0, b1.r1]


def test_lane_words_hold_mma_b_fragments(rng):
    """Each lane's word j must give the m16n8k16 B fragments (PTX ISA: reg 0 = rows 2t, 2t+1,
    reg 1 = rows 2t+8, 2t+9, column g; low half = lower row) of n8 sub-tiles 2j and 2j+1."""
    n, k = 128, 32
    q = rng.integers(0, 16, (n, k), dtype=np.uint8)
    words = packing.pack_int4(q).view(np.uint32).reshape(k // 16, n // 64, 32, 4)
    B = q.T  # (k, n)
    for kb in range(k // 16):
        for nb in range(n // 64):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for j in range(4):
                    regs = _dequant_word_like_the_kernel(int(words[kb, nb, lane, j]))
                    for h in range(2):  # sub-tile 2j + h
                        col = nb * 64 + 8 * (2 * j + h) + g
                        r0, r1 = regs[2 * h], regs[2 * h + 1]
                        rows0 = (kb * 16 + 2 * t, kb * 16 + 2 * t + 1)
                        rows1 = (kb * 16 + 2 * t + 8, kb * 16 + 2 * t + 9)
                        assert r0 == (B[rows0[0], col], B[rows0[1], col])
                        assert r1 == (B[rows1[0], col], B[rows1[1], col])


def test_scale_permutation_serves_each_lane_its_columns(rng):
    g, n = 3, 128
    s = rng.integers(0, 60000, (g, n)).astype(np.uint16)
    p = packing.permute_scales(s)
    for wn in range(n // 64):
        for lane_g in range(8):
            # the kernel loads 8 halves at chunk wn*8 + g: positions 64 wn + 8 g + s
            got = p[:, wn * 64 + lane_g * 8 : wn * 64 + lane_g * 8 + 8]
            want = s[:, [wn * 64 + 8 * sub + lane_g for sub in range(8)]]
            assert np.array_equal(got, want)
    assert np.array_equal(packing.unpermute_scales(p), s)


def test_pack_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple|N % 64"):
        packing.pack_int4(np.zeros((60, 64), np.uint8))
    with pytest.raises(ValueError, match="0, 15"):
        packing.pack_int4(np.full((64, 64), 16, np.uint8))
