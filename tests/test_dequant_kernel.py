"""The large-M route's dequantisation kernel (templates/dequant.cu.j2) without a GPU: bitwise
against the float64 oracle on the CPU warp emulator for every quant type, group size (per
channel, grouped, zero points) and activation dtype; NVRTC builds for every architecture; its
identity in the kernel cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jitmarlin import emu
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import KernelCache, entry_key_inputs, key_of
from jitmarlin.jit.profiles import ARCH_DEFAULT_PROFILE, code_path, get_profile
from jitmarlin.kernels.dequant.source import dequant_partials
from jitmarlin.kernels.planner import group_blocks
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.render import render
from jitmarlin.kernels.spec import DequantSpec, KernelSpec, spec_from_canonical
from jitmarlin.weights import halves
from jitmarlin.weights.quant import dequantize, from_codes

needs_cxx = pytest.mark.skipif(emu.compiler() is None, reason="no C++ compiler for the emulator")

# ---- the oracle, rounded once ---------------------------------------------------------------------


def exact_bits(x: np.ndarray, act: str) -> np.ndarray:
    """float64 values rounded once (to nearest, ties to even) to `act`; uint16 bit patterns.
    (halves.to_bits goes through float32: two roundings for bf16.)"""
    x = np.asarray(x, dtype=np.float64)
    if act == "float16":
        return x.astype(np.float16).view(np.uint16)  # NumPy rounds double -> half once
    m, e = np.frexp(x)  # x = m 2^e, 0.5 <= |m| < 1
    r = np.ldexp(np.rint(np.ldexp(m, 8)), e - 8)  # 8 significant bits, half-even
    return (r.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_exact_bits_rounds_once():
    # 1024.5 + 2^-19 rounds to 1025 in fp16; through float32 it would first become 1024.5
    assert exact_bits(np.array([1024.5 + 2.0**-19]), "float16")[0] == np.float16(1025).view(np.uint16)
    # bf16: 1 + 2^-8 + 2^-30 is above the midpoint 1 + 2^-8 between 1 and 1 + 2^-7
    assert exact_bits(np.array([1 + 2.0**-8 + 2.0**-30]), "bfloat16")[0] == 0x3F81
    assert exact_bits(np.array([1 + 2.0**-8]), "bfloat16")[0] == 0x3F80  # tie: even
    assert exact_bits(np.array([-0.0]), "bfloat16")[0] == 0x8000
    v = np.random.default_rng(0).standard_normal(1000)
    assert np.array_equal(exact_bits(v, "bfloat16"), halves.to_bits(v.astype(np.float32), "bfloat16"))


def random_weight(rng, qtype, group, act, n=192, k=256, *, float_zeros=False, act_order=False):
    """A weight from random codes (every code value, NaN codes of e4m3 excluded), random signed
    scales, zero points (integer, or HQQ-style float) and, for nvfp4, a global scale."""
    bits = 8 if qtype in ("uint8b128", "uint8", "float8_e4m3fn") else 4
    codes = rng.integers(0, 1 << bits, (n, k))
    if qtype == "float8_e4m3fn":
        codes[(codes & 0x7F) == 0x7F] = 0x7E
    g = 1 if group == -1 else k // group
    scales = (rng.random((g, n)) * 0.02 + 0.0005) * rng.choice([-1, 1], (g, n))
    kw = {}
    if qtype in ("uint4", "uint8"):
        top = (1 << bits) - 1
        kw["zeros"] = rng.random((g, n)) * top if float_zeros else rng.integers(0, top + 1, (g, n))
    if qtype == "nvfp4":
        kw["global_scale"] = float(rng.random() * 1e-2 + 1e-3)
    if act_order:
        kw["g_idx"] = rng.permutation(np.repeat(np.arange(g), k // g))
    return from_codes(qtype, codes, scales, group, scale_dtype=act, **kw)


def check_dense(w_bits: np.ndarray, qw, act: str) -> None:
    """The kernel's dense weight (padded, kernel column order, global scale and the fp4 decode's
    power of two left to the GEMM: weights.kernel_form) is the oracle rounded once, bit for bit;
    within one ulp of the float32 oracle rounded to `act` (which can round twice); zero in the
    padded rows."""
    qw1 = dataclasses.replace(qw, global_scale=1.0)
    factor = qw1.kernel_global_scale(act)  # a power of two: 1 but for nvfp4 / mxfp4
    exact = dequantize(qw1, act, dtype=np.float64) / factor
    f32 = (dequantize(qw1, act, dtype=np.float64) / factor).astype(np.float32)
    if qw.perm is not None:  # the kernel keeps the weight's column order
        exact, f32 = exact[:, qw.perm], f32[:, qw.perm]
    n0, k0 = qw.shape
    got = w_bits[:n0, :k0]
    want = exact_bits(exact, act)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{len(bad)} weights differ, first at {tuple(bad[0])}: "
        f"got {got[tuple(bad[0])]:#06x}, want {want[tuple(bad[0])]:#06x}"
    )
    ulps = np.abs(got.astype(np.int64) - halves.to_bits(f32, act).astype(np.int64))
    assert ulps.max() <= 1
    # padded rows have zero scales (and offsets); padded columns (codes 0, not zero weights for
    # every type) are never read: the GEMM takes W[:n_out, :k_in]
    assert np.all(halves.from_bits(w_bits[n0:], act) == 0)
    assert not np.any(w_bits[:, k0:] == 0xFFFF)  # but written (no poison left)


# ---- emulator: every quant type, group size and activation dtype ----------------------------------

GROUPS = {
    "uint4b8": (-1, 32, 128),
    "uint4": (-1, 32, 128),
    "uint8b128": (-1, 32, 128),
    "uint8": (-1, 32, 128),
    "float8_e4m3fn": (-1, 32, 128),
    "nvfp4": (16,),
    "mxfp4": (32,),
}
EMU_CASES = [(qt, g, act, "h100") for qt, gs in GROUPS.items() for g in gs for act in ("float16", "bfloat16")]
# the register-staged generations' fp16 arithmetic partial (act/float16_sm70.cuh)
EMU_CASES += [
    ("uint4", 32, "float16", "v100"),
    ("uint8b128", -1, "float16", "t4"),
    ("nvfp4", 16, "float16", "v100"),
    ("float8_e4m3fn", 128, "float16", "t4"),
]


def _spec(prof, qw, act):
    p = Problem(4096, qw.n, qw.k, act, qw.qtype, qw.group_size)
    return DequantSpec(get_profile(prof).path, qw.qtype, act, group_blocks(p))


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("qt,group,act,prof", EMU_CASES, ids=lambda v: str(v))
def test_dense_weight_is_the_oracle_on_emulator(qt, group, act, prof, rng):
    qw = random_weight(rng, qt, group, act)
    spec = _spec(prof, qw, act)
    check_dense(emu.run_dequant(spec, qw, seed=int(rng.integers(1, 1 << 30))), qw, act)


# Scales at the edges of each half type's range with every e2m1 code: the fp16 e2m1 decode is a
# byte-table lookup that gives the exact value, so 6 s may be as large as fp16 holds and v s may be
# subnormal (a decode that left the exponent bias, 2^14, for the scale would overflow here).
FP4_EDGE_SCALES = {
    "float16": [10912.0, -10912.0, 448.0, -1.0, 2.0**-14, -(2.0**-20), 2.0**-24],
    "bfloat16": [2.0**125, -(2.0**120), 448.0, -1.0, 2.0**-120, -(2.0**-125)],  # v s normal
}


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("qt,group", [("nvfp4", 16), ("mxfp4", 32)])
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_fp4_scales_at_the_range_edges_on_emulator(qt, group, act, rng):
    n, k = 128, 256
    codes = (np.arange(n)[:, None] + np.arange(k)[None, :]) % 16  # every code in every nibble slot
    codes[::2] = rng.integers(0, 16, (n // 2, k))
    edges = np.array(FP4_EDGE_SCALES[act])
    if qt == "mxfp4":  # powers of two (e8m0)
        edges = np.sign(edges) * 2.0 ** np.floor(np.log2(np.abs(edges)))
        edges[np.abs(edges) * 6 > {"float16": 65504, "bfloat16": 3.3e38}[act]] /= 2
    scales = rng.choice(edges, (k // group, n))
    qw = from_codes(qt, codes, scales, group, scale_dtype=act)
    check_dense(emu.run_dequant(_spec("h100", qw, act), qw, seed=int(rng.integers(1, 1 << 30))), qw, act)


FP8_EDGE_SCALES = {  # every e4m3 value times the largest stays finite; the smallest are subnormal
    "float16": [146.0, -146.0, 1.0, 2.0**-14, -(2.0**-20), 2.0**-24],
    "bfloat16": [2.0**119, -(2.0**100), 1.0, 2.0**-120, -(2.0**-125)],
}


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("group", [128, -1])
def test_fp8_scales_at_the_range_edges_on_emulator(act, group, rng):
    """e4m3 codes (NaN patterns excepted) under scales at both ends of the half type: bf16's top
    scales leave the decode's 2^120 partly to the global scale (weights.kernel_form)."""
    n, k = 128, 256
    codes = (np.arange(n)[:, None] * 7 + np.arange(k)[None, :]) % 256
    codes[(codes & 0x7F) == 0x7F] = 0
    scales = rng.choice(np.array(FP8_EDGE_SCALES[act]), (k // 128, n) if group > 0 else (1, n))
    qw = from_codes("float8_e4m3fn", codes, scales, group, scale_dtype=act)
    if act == "bfloat16":
        assert qw.kernel_global_scale(act) > 1.0  # the fold could not take all of 2^120
    check_dense(emu.run_dequant(_spec("h100", qw, act), qw, seed=int(rng.integers(1, 1 << 30))), qw, act)


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_padded_act_order_and_float_zero_points_on_emulator(act, rng):
    # out 200 (padded to 256), HQQ-style float zero points, act-order; then out 200 / in 136
    qw = random_weight(rng, "uint4", 32, act, n=200, k=128, float_zeros=True, act_order=True)
    assert qw.perm is not None
    check_dense(emu.run_dequant(_spec("h100", qw, act), qw), qw, act)
    qw = random_weight(rng, "uint8b128", -1, act, n=200, k=136)
    assert (qw.n, qw.k) == (256, 192)
    check_dense(emu.run_dequant(_spec("h100", qw, act), qw), qw, act)


@pytest.mark.slow
@needs_cxx
def test_bias_rows_on_emulator(rng):
    spec = DequantSpec("sm80", "uint4b8", "bfloat16", 8)
    bias = rng.integers(0, 1 << 16, 72).astype(np.uint16)
    for m, grid in [(1, 1), (37, 2), (300, 5)]:  # fewer blocks than rows: the grid strides
        rows = emu.run_bias(spec, bias, m, grid)
        assert rows.shape == (m, 72) and np.all(rows == bias)


@pytest.mark.slow
@needs_cxx
def test_emulator_catches_a_wrong_transpose(plant, rng):
    plant("  x[3] = shfl_xor(x[3], 3);", "  x[3] = shfl_xor(x[3], 1);")
    qw = random_weight(rng, "uint4b8", 128, "float16")
    with pytest.raises(AssertionError, match="weights differ"):
        check_dense(emu.run_dequant(_spec("h100", qw, "float16"), qw), qw, "float16")


# ---- NVRTC: every architecture, every quant type --------------------------------------------------

ARCHS = [
    "sm_70",
    "sm_72",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_89",
    "sm_90",
    "sm_100",
    "sm_101",
    "sm_103",
    "sm_120",
    "sm_121",
]
QT_GROUP = [
    ("uint4b8", 128),
    ("uint4", -1),
    ("uint8b128", 32),
    ("uint8", 128),
    ("float8_e4m3fn", -1),
    ("nvfp4", 16),
    ("mxfp4", 32),
]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_dequant_kernel_compiles_for_every_arch_and_type(arch):
    from jitmarlin.jit.cache import default_cache

    if arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {arch}")
    major, minor = int(arch[3:-1]), int(arch[-1])
    path = code_path((major, minor))
    acts = ("float16", "bfloat16") if path == "sm80" else ("float16",)
    for i, (qt, group) in enumerate(QT_GROUP):
        for act in acts:
            gb = group_blocks(Problem(4096, 4096, 4096, act, qt, group))
            spec = DequantSpec(path, qt, act, gb)
            art, _, _ = default_cache().get(spec, arch)
            assert art.cubin[:4] == b"\x7fELF"
            ptx = art.ptx
            assert f".entry {spec.name}(" in ptx and f".entry {spec.name}_bias(" in ptx
            assert "shfl.sync.bfly.b32" in ptx
            assert "st.global.v4.u32" in ptx or "st.global.v4.b32" in ptx  # 16-byte stores
            assert "ld.global" in ptx and ".shared" not in ptx
            r = art.resources
            assert r["registers"] is not None and r["registers"] <= 128, (spec.name, r)
            assert r["spill_stores"] == 0 and r["stack_bytes"] == 0, (spec.name, r)


def test_partials_and_source():
    s = DequantSpec("sm75", "float8_e4m3fn", "float16", -1)
    assert dequant_partials(s) == {
        "ptx": "ptx/cuda.cuh",
        "act": "act/float16_sm70.cuh",
        "dequant": "dequant/fp8_float16.cuh",
    }
    b = DequantSpec("sm80", "mxfp4", "bfloat16", 2)
    assert dequant_partials(b, "emu")["dequant"] == "dequant/fp4_bfloat16.cuh"
    src = render(b)
    assert src.startswith(f"// {b.name}") and b.canonical() in src
    assert "{{" not in src and "//%" not in src and "jm_emu" not in src
    assert "jm_emu_dequant" in render(b, "emu")
    with pytest.raises(ValueError):
        render(DequantSpec("sm70", "uint4b8", "bfloat16", 8))


# ---- identity in the kernel cache ----------------------------------------------------------------


def test_cache_keys_differ_from_the_fused_kernels(tmp_path):
    cache = KernelCache(tmp_path)
    dq = DequantSpec("sm80", "uint4b8", "float16", 8)
    fused = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
    k_dq = cache._identity(dq, "sm_90")[0]
    assert k_dq != cache._identity(fused, "sm_90")[0]
    assert k_dq != cache._identity(dataclasses.replace(dq, path="sm75"), "sm_90")[0]
    assert k_dq != cache._identity(dq, "sm_80")[0]
    art, key, status = cache.get(dq, "sm_90")
    assert (key, status) == (k_dq, "compiled") and art.name == dq.name
    assert cache.get(dq, "sm_90")[2] == "memory"
    assert KernelCache(tmp_path).get(dq, "sm_90", compile_missing=False)[2] == "disk"
    assert cache.verify() == []
    e = dict(cache.raw(key))
    assert spec_from_canonical(e["spec"]) == dq
    e.pop("key_inputs")  # an entry that must be re-rendered to check its key
    assert key_of(entry_key_inputs(e)) == key


@pytest.mark.slow
def test_prewarm_plans_the_dequant_kernel_for_large_m(tmp_path):
    from jitmarlin import prewarm

    # (from 2048 rows on H100, 256 on V100; N = 896: 56 wgmma tiles at 2048 rows, less than a wave
    # of 132 SMs that does not deal whole, so H100 takes the route too)
    res = prewarm(["h100", "v100"], [(4096, 896)], ms=(1, 2048), cache=KernelCache(tmp_path))
    names = {r.kernel: r for r in res}
    dq = [n for n in names if n.startswith("jm_dq_")]
    want = {"jm_dq_sm80_uint4b8_f16_g128"}
    if "sm_70" in nvrtc.supported_archs():
        want.add("jm_dq_sm70_uint4b8_f16_g128")
    assert want <= set(dq) and all(names[n].status in ("compiled", "cached") for n in want)
    assert any(n.startswith("jm_sm80_") for n in names)  # M=1 is still the fused kernel


def test_every_named_profile_has_a_dequant_kernel():
    for arch, prof in ARCH_DEFAULT_PROFILE.items():
        p = get_profile(prof)
        s = DequantSpec(p.path, "uint4b8", "float16", 8)
        s.check()
        assert s.grid(4096, 4096) == 4096 // 16 * 4096 // 64 // 8


def test_inspect_shows_the_large_m_route(capsys):
    import json

    from jitmarlin.service.cli import main

    # N = 896: no whole-tile or hybrid wgmma plan at 4096 rows (112 tiles), so the route
    assert (
        main(
            [
                "inspect",
                "--arch",
                "sm_90",
                "--m",
                "4096",
                "--n",
                "896",
                "--quant",
                "uint4",
                "--group",
                "-1",
                "--act",
                "bfloat16",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["route"] == "dequant" and r["kernel"] == "jm_dq_sm80_uint4_bf16_gk"
    assert r["spill_stores"] == 0 and r["shared_bytes"] == 0 and r["grid"] == 896 * 4096 // (16 * 64 * 8)
    # N = 2560, K = 8192: 320 tiles, two whole a block on 132 blocks and 56 striped (a hybrid plan
    # of 128 K-steps a tile: fused); K = 4096 (64 K-steps a tile): the route
    assert main(["inspect", "--arch", "sm_90", "--m", "4096", "--n", "2560", "--k", "8192", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["route"] == "fused" and (r["grid"], r["whole_tiles"]) == (132, 2)
    assert main(["inspect", "--arch", "sm_90", "--m", "4096", "--n", "2560", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["route"] == "dequant"
    # 4096 x 4096: 512 tiles, four a block on 128 blocks: the fused wgmma kernel at any M
    assert main(["inspect", "--arch", "sm_90", "--m", "4096", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["route"] == "fused" and r["kernel"].startswith("jm_sm90_") and r["grid"] == 128
    assert main(["inspect", "--profile", "t4", "--m", "256", "--source"]) == 0
    assert "quad_transpose" in capsys.readouterr().out
    assert main(["inspect", "--arch", "sm_90", "--m", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["route"] == "fused"
