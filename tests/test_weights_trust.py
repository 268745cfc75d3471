"""A weight that lies about its arrays is refused at construction (DESIGN.md, trust model), the
reference quantizer refuses what it cannot represent, and every valid weight's kernels stay inside
their buffers on the CPU emulator (issue #57, weights half)."""

import dataclasses
import warnings

import numpy as np
import pytest

import jitmarlin
from jitmarlin import InputError
from jitmarlin.weights import halves
from jitmarlin.weights.qtypes import shape_problem
from jitmarlin.weights.quant import QuantizedWeight, from_codes, quantize

FIELDS = (
    "qtype",
    "group_size",
    "n",
    "k",
    "packed",
    "scales",
    "scale_dtype",
    "offsets",
    "global_scale",
    "perm",
    "out_features",
    "in_features",
)


def _fields(qtype="uint4b8", group=128, n0=128, k0=256, act_order=False, rng=None):
    """Keyword arguments of a valid QuantizedWeight, made by from_codes."""
    rng = rng or np.random.default_rng(0)
    bits = jitmarlin.weights.quant.get_qtype(qtype).bits
    gs = k0 if group == -1 else group
    G = -(-k0 // gs)
    codes = rng.integers(0, 1 << bits, (n0, k0))
    if qtype == "float8_e4m3fn":
        codes[(codes & 0x7F) == 0x7F] = 0
    zeros = rng.random((G, n0)) * ((1 << bits) - 1) if qtype in ("uint4", "uint8") else None
    g_idx = rng.permutation(np.repeat(np.arange(G), gs)) if act_order else None
    qw = from_codes(qtype, codes, rng.random((G, n0)) * 0.01 + 0.001, group, zeros=zeros, g_idx=g_idx)
    return {f: getattr(qw, f) for f in FIELDS}


def _bad(**over):
    """(base field overrides, mutation) -> the kwargs of a lying weight."""
    return over


# (id, base weight, mutation of its fields, message)
MALFORMED = [
    ("truncated-packed", {}, lambda f: {"packed": f["packed"][:-1]}, "packed must have shape"),
    ("packed-int8", {}, lambda f: {"packed": f["packed"].astype(np.int8)}, "packed must be int32"),
    ("packed-uint32", {}, lambda f: {"packed": f["packed"].view(np.uint32)}, "packed must be int32"),
    (
        "packed-8bit-shape-for-4bit",
        {},
        lambda f: {"packed": np.zeros((f["k"] // 16, 4 * f["n"]), np.int32)},
        "packed must have shape",
    ),
    ("packed-not-an-array", {}, lambda f: {"packed": f["packed"].tolist()}, "packed must be an array"),
    ("truncated-scales", {}, lambda f: {"scales": f["scales"][:-1]}, "scales must have shape"),
    ("scales-flat", {}, lambda f: {"scales": f["scales"].reshape(-1)}, "scales must have shape"),
    ("scales-float16", {}, lambda f: {"scales": f["scales"].view(np.float16)}, "scales must be uint16"),
    ("scales-float32", {}, lambda f: {"scales": f["scales"].astype(np.float32)}, "scales must be uint16"),
    ("group-mismatch", {}, lambda f: {"group_size": 64}, "scales must have shape"),
    ("group-unknown", {}, lambda f: {"group_size": 48}, "group_size must be one of"),
    ("group-str", {}, lambda f: {"group_size": "128"}, "group_size must be an int"),
    ("group-float", {}, lambda f: {"group_size": 128.0}, "group_size must be an int"),
    ("qtype-mismatch", {}, lambda f: {"qtype": "uint8b128"}, "packed must have shape"),
    ("qtype-unknown", {}, lambda f: {"qtype": "int3"}, "unknown quant type"),
    ("nvfp4-group-32", dict(qtype="nvfp4", group=16), lambda f: {"group_size": 32}, "groups of 16"),
    ("mxfp4-group-16", dict(qtype="mxfp4", group=32), lambda f: {"group_size": 16}, "groups of 32"),
    ("doubled-n", {}, lambda f: {"n": 2 * f["n"]}, "packed must have shape|padded shape"),
    ("doubled-k", {}, lambda f: {"k": 2 * f["k"]}, "packed must have shape|padded shape"),
    (
        "doubled-n-consistent-arrays",
        {},
        lambda f: {
            "n": 2 * f["n"],
            "packed": np.zeros((f["k"] // 16, 4 * f["n"]), np.int32),
            "scales": np.zeros((f["k"] // 128, 2 * f["n"]), np.uint16),
        },
        "padded shape",
    ),
    ("n-not-64", {}, lambda f: {"n": 96}, "multiple of 64"),
    ("n-zero", {}, lambda f: {"n": 0, "out_features": 8}, "multiple of 64"),
    ("k-negative", {}, lambda f: {"k": -256}, "multiple of 64"),
    ("n-float", {}, lambda f: {"n": 128.0}, "multiple of 64"),
    ("zero-point-without-offsets", dict(qtype="uint4"), lambda f: {"offsets": None}, "offsets are required"),
    ("offsets-on-symmetric", {}, lambda f: {"offsets": f["scales"].copy()}, "offsets must be None"),
    (
        "truncated-offsets",
        dict(qtype="uint8", group=64),
        lambda f: {"offsets": f["offsets"][:, :-8]},
        "offsets must have shape",
    ),
    (
        "offsets-int16",
        dict(qtype="uint4"),
        lambda f: {"offsets": f["offsets"].view(np.int16)},
        "offsets must be uint16",
    ),
    ("out-features-past-n", {}, lambda f: {"out_features": f["n"] + 8}, "out_features must be in 1..n"),
    ("in-features-past-k", {}, lambda f: {"in_features": f["k"] + 8}, "in_features must be in 1..k"),
    ("out-features-negative", {}, lambda f: {"out_features": -8}, "out_features must be in"),
    ("out-features-not-8", {}, lambda f: {"out_features": 100}, "positive multiples of 8"),
    ("in-features-padding-past-a-group", {}, lambda f: {"in_features": 64}, "padded shape"),
    (
        "perm-duplicate",
        dict(act_order=True, group=64),
        lambda f: {"perm": np.concatenate([f["perm"][:-1], f["perm"][:1]])},
        "permutation",
    ),
    (
        "perm-out-of-range",
        dict(act_order=True, group=64),
        lambda f: {"perm": np.where(f["perm"] == 0, 256, f["perm"]).astype(np.int32)},
        "permutation",
    ),
    ("perm-short", dict(act_order=True, group=64), lambda f: {"perm": f["perm"][:-1]}, r"perm must have shape"),
    ("perm-float", dict(act_order=True, group=64), lambda f: {"perm": f["perm"].astype(np.float32)}, "integer array"),
    ("global-scale-nan", dict(qtype="nvfp4", group=16), lambda f: {"global_scale": float("nan")}, "finite"),
    ("global-scale-inf", {}, lambda f: {"global_scale": float("inf")}, "finite"),
    ("global-scale-str", {}, lambda f: {"global_scale": "1.0"}, "finite"),
    ("scale-dtype-float32", {}, lambda f: {"scale_dtype": "float32"}, "scale_dtype"),
]


@pytest.mark.parametrize("base,mutate,msg", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_lying_weight_is_refused_at_construction(base, mutate, msg):
    f = _fields(**base)
    QuantizedWeight(**f)  # the honest one is accepted
    f.update(mutate(f))
    with pytest.raises(InputError, match=msg):
        QuantizedWeight(**f)


def test_a_layout_tag_it_does_not_have_is_refused():
    with pytest.raises(InputError, match="layout"):
        QuantizedWeight(**_fields(), layout="marlin-v2")


def test_a_field_changed_after_construction_is_checked_before_upload():
    qw = QuantizedWeight(**_fields())
    qw.packed = qw.packed[:-1]
    # to_device checks before it imports CuPy: no GPU needed to see the refusal
    with pytest.raises(InputError, match="packed must have shape"):
        qw.to_device(0, "float16")
    with pytest.raises(InputError, match="packed must have shape"):
        qw.validate()


@pytest.mark.parametrize(
    "qtype,group",
    [
        ("uint4b8", 128),
        ("uint4b8", -1),
        ("uint4", 32),
        ("uint4", -1),
        ("uint8b128", 64),
        ("uint8", -1),
        ("float8_e4m3fn", 128),
        ("nvfp4", 16),
        ("mxfp4", 32),
    ],
)
def test_every_honest_path_is_accepted(qtype, group, rng):
    """quantize, from_codes (padded, act-order) and dataclasses.replace (measure.py's copies) all
    make weights the checks accept."""
    sdt = "bfloat16" if qtype == "mxfp4" else "float16"
    qw = quantize(rng.standard_normal((72, 200)) * 0.05, qtype, group, scale_dtype=sdt)
    assert qw.shape == (72, 200) and (qw.n, qw.k) == (128, 256)
    dataclasses.replace(qw, _device={}, _launchers={}, _gather={}).validate()
    if group > 0 and qtype in ("uint4b8", "uint4"):
        QuantizedWeight(**_fields(qtype, group, 64, 4 * group, act_order=True, rng=rng))


# ---- quantize ------------------------------------------------------------------------------------


def test_quantize_scale_overflow_is_an_error_suggesting_bfloat16():
    w = np.full((64, 128), 1e6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy overflow warning on the way
        with pytest.raises(InputError, match="bfloat16"):
            quantize(w, "uint4b8", 128)
        qw = quantize(w, "uint4b8", 128, scale_dtype="bfloat16")
    assert np.all(np.abs(jitmarlin.dequantize(qw) - 1e6) <= 1e6 / 7.5)  # within one step
    with pytest.raises(InputError, match="bfloat16"):  # zero-point offsets too
        quantize(np.linspace(-5e5, 1e3, 64 * 128).reshape(64, 128), "uint4", 128)


def test_from_codes_scale_overflow_is_an_error():
    with pytest.raises(InputError, match="overflow float16"):
        from_codes("uint4b8", np.zeros((64, 128), int), np.full((1, 64), 1e5), 128)


@pytest.mark.parametrize(
    "weight,msg",
    [
        (np.zeros((0, 64)), "empty"),
        (np.zeros((64, 0)), "empty"),
        (np.zeros((64, 128), np.complex64), "real"),
        (np.full((64, 128), "x"), "real"),
        (np.zeros((64, 128), object), "real"),
        (np.zeros(128), "2-D"),
        (np.full((64, 128), np.nan), "NaN"),
    ],
    ids=["no-rows", "no-columns", "complex", "strings", "object", "1-D", "nan"],
)
def test_quantize_refuses_what_it_cannot_represent(weight, msg):
    with pytest.raises(InputError, match=msg):
        quantize(weight, "uint4b8", 128)


@pytest.mark.parametrize(
    "qtype,group,msg",
    [
        ("uint4b8", "128", "group_size must be an int .*str '128'"),
        ("uint4b8", 128.0, "group_size must be an int"),
        ("uint4b8", 96, "group_size must be one of"),
        ("nvfp4", 32, "nvfp4 uses groups of 16"),
        ("nvfp4", 128, "nvfp4 uses groups of 16"),
        ("mxfp4", 16, "mxfp4 uses groups of 32"),
    ],
)
def test_quantize_group_sizes_are_checked_not_changed(qtype, group, msg):
    with pytest.raises(InputError, match=msg):
        quantize(np.ones((64, 128)), qtype, group)


def test_nvfp4_and_mxfp4_default_to_their_own_group():
    assert quantize(np.ones((64, 128)), "nvfp4").group_size == 16
    assert quantize(np.ones((64, 128)), "mxfp4", scale_dtype="bfloat16").group_size == 32
    assert quantize(np.ones((64, 128))).group_size == 128


def test_one_shape_rule_with_one_message(capsys, tmp_path):
    """quantize, from_codes, the planner entry (plan_for, used by inspect and prewarm) and the
    CLI all say the same thing about a shape the kernels cannot take."""
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.ops.linear import plan_for
    from jitmarlin.service.cli import main

    want = shape_problem(100, 128)
    assert want and "multiples of 8" in want
    with pytest.raises(InputError) as e1:
        quantize(np.ones((100, 128)), "uint4b8", 128)
    with pytest.raises(InputError) as e2:
        from_codes("uint4b8", np.zeros((100, 128), int), np.ones((1, 100)), 128)
    with pytest.raises(InputError) as e3:
        plan_for(get_profile("h100"), 1, 100, 128)
    assert str(e1.value) == str(e2.value) == str(e3.value) == want
    assert main(["inspect", "--arch", "sm_90", "--n", "100", "--k", "128"]) == 2
    assert want in capsys.readouterr().err
    assert main(["prewarm", "--arch", "sm_90", "--shapes", "128x100", "--m", "1", "--cache-dir", str(tmp_path)]) == 1
    cap = capsys.readouterr()
    assert want in cap.out and "compiled nothing" in cap.err
    # a shape the rule takes is padded as the weight is, and planned as linear() plans it
    qw = quantize(np.ones((72, 200)), "uint4b8", 128)
    p = plan_for(get_profile("h100"), 1, 72, 200)
    assert (p.problem.n, p.problem.k) == (qw.n, qw.k) == (128, 256)


# ---- the emulator: valid weights never read or write outside their buffers ----------------------

EMU_CONFIGS = [  # (qtype, group, act): one forced kernel each, reused over many shapes
    ("uint4b8", 128, "float16"),
    ("uint4", 32, "bfloat16"),
    ("uint8b128", -1, "float16"),
    ("uint8", 64, "bfloat16"),
    ("float8_e4m3fn", 128, "float16"),
    ("nvfp4", 16, "float16"),
    ("mxfp4", 32, "bfloat16"),
    ("uint4b8", -1, "bfloat16"),
]


@pytest.mark.slow
def test_200_random_valid_weights_stay_in_bounds_on_the_emulator(rng):
    """200 random honest weights (every quant type, padded N and K, partial groups, act-order)
    run through planned and forced kernels on the CPU emulator, which checks every global access
    against its buffer's size (EmuError on any out-of-bounds read or write, a guard row after the
    output, locks reset). Outputs also match the float64 reference."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.planner import plan
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.kernels.spec import KernelSpec
    from jitmarlin.reference import linear_reference, rel_error

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    tol = {"float16": 3e-3, "bfloat16": 1.5e-2}
    base = replace(get_profile("h100"), cc=(8, 9))  # mma.sync kernels (wgmma ones: test_wgmma_emu.py)
    planned = 0
    for case in range(200):
        qtype, group, act = EMU_CONFIGS[case % len(EMU_CONFIGS)]
        bits = jitmarlin.weights.quant.get_qtype(qtype).bits
        n0 = 8 * int(rng.integers(1, 25))  # 8 .. 192 outputs
        k0 = 8 * int(rng.integers(1, 41))  # 8 .. 320 inputs
        m = int(rng.integers(1, 40))
        gs = k0 if group == -1 else group
        G = -(-k0 // gs)
        codes = rng.integers(0, 1 << bits, (n0, k0))
        if qtype == "float8_e4m3fn":
            codes[(codes & 0x7F) == 0x7F] = 0
        zeros = rng.random((G, n0)) * ((1 << bits) - 1) if qtype in ("uint4", "uint8") else None
        g_idx = None
        if group > 0 and k0 % group == 0 and rng.random() < 0.3:
            g_idx = rng.permutation(np.repeat(np.arange(G), gs))
        qw = from_codes(
            qtype,
            codes,
            rng.random((G, n0)) * 0.01 + 0.001,
            group,
            zeros=zeros,
            g_idx=g_idx,
            global_scale=0.5 if qtype == "nvfp4" else 1.0,
            scale_dtype=act,
        )
        prof = replace(base, sms=int(rng.integers(1, 6)))
        problem = Problem(m, qw.n, qw.k, act, qtype, group)
        spec = None
        if case % 4:  # three in four on one forced kernel per config: few emulator builds
            spec = KernelSpec("sm80", qtype, act, -1 if group < 0 else group // 16, 1, 16, 4, 2)
        pl = plan(prof, problem, spec)
        if pl.route != "fused":
            pl = plan(prof, problem, KernelSpec("sm80", qtype, act, -1 if group < 0 else group // 16, 1, 16, 4, 2))
        planned += spec is None
        x = rng.standard_normal((m, qw.in_features)).astype(np.float32)
        b = rng.standard_normal(qw.out_features).astype(np.float32) if case % 2 else None
        out = emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))  # EmuError: a bug
        ref = linear_reference(halves.round_to(x, act), qw, None if b is None else halves.round_to(b, act))
        assert out.shape == (m, n0)
        err = rel_error(out, ref)
        assert err <= tol[act], f"case {case} {pl.spec.name} m={m} n0={n0} k0={k0}: {err:.3e}"
    assert planned == 50


@pytest.mark.slow
@pytest.mark.parametrize("field", ["packed", "scales"])
def test_the_emulator_catches_a_lying_weight_that_slips_past(field, rng):
    """Why the check above can fail: the same kernels given a truncated array (validation
    bypassed) read outside every buffer, and the emulator says so."""
    from dataclasses import replace

    from jitmarlin import emu
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.planner import plan
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.kernels.spec import KernelSpec

    if emu.compiler() is None:
        pytest.skip("no C++ compiler for the emulator")
    qw = quantize(rng.standard_normal((128, 256)), "uint4b8", 128)
    prof = replace(get_profile("h100"), cc=(8, 9), sms=3)
    pl = plan(
        prof, Problem(5, 128, 256, "float16", "uint4b8", 128), KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 4, 2)
    )
    object.__setattr__(qw, field, getattr(qw, field)[:-1])  # what the constructor refuses
    with pytest.raises(emu.EmuError, match="outside every buffer"):
        emu.run_values(pl, rng.standard_normal((5, 256)), qw)


def test_converters_refuse_empty_complex_and_loose_group_sizes():
    from jitmarlin.weights.formats import from_mxfp4, from_nvfp4
    from jitmarlin.weights.formats._common import group_size_of

    w = np.zeros((64, 64), np.uint8)  # 64 x 128 e2m1 codes
    sb = np.full((64, 8), 0x38, np.uint8)  # e4m3 1.0
    from_nvfp4(w, sb, 1.0)
    with pytest.raises(InputError, match="weight_scale_2 must be a float"):
        from_nvfp4(w, sb, np.complex64(1 + 1j))
    with pytest.raises(InputError, match="empty"):
        from_nvfp4(np.zeros((0, 64), np.uint8), np.zeros((0, 8), np.uint8), 1.0)
    with pytest.raises(InputError):
        from_mxfp4(np.zeros((64, 0), np.uint8), np.zeros((64, 0), np.uint8))
    with pytest.raises(InputError, match="group_size must be an int"):
        group_size_of(256, 2, "128")
    with pytest.raises(InputError, match="group_size must be an int"):
        group_size_of(256, 2, 128.0)
    assert group_size_of(256, 2, np.int64(128)) == 128
