"""The generated kernels run on the CPU warp emulator against the float64 reference: the
fragment layouts, dequant bit tricks, pipeline, intra-block and Stream-K reductions all execute
as written for the GPU (only the instruction layer differs). The emulator itself is checked by
planting bugs it must catch."""

from dataclasses import replace

import numpy as np
import pytest

from jitmarlin import emu
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.planner import plan
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import KernelSpec
from jitmarlin.reference import check_output, fails_check, linear_reference
from jitmarlin.weights import halves
from jitmarlin.weights.quant import quantize

pytestmark = [pytest.mark.slow, pytest.mark.skipif(emu.compiler() is None, reason="no C++ compiler for the emulator")]

# (m, n, k, group, act, emulated SM count, forced spec or None): tails in M and N, several M
# chunks, uneven Stream-K splits, every tile shape and group size.
CASES = [
    (1, 192, 256, 128, "float16", 3, ("sm80", 1, 8, 8, 4)),
    (5, 128, 256, 128, "float16", 2, None),
    (33, 256, 512, 64, "float16", 4, None),
    (130, 128, 512, 64, "float16", 5, None),
    (7, 64, 1024, -1, "bfloat16", 4, None),
    (64, 256, 640, 32, "bfloat16", 6, None),
    (16, 512, 128, 128, "float16", 3, ("sm80", 1, 16, 4, 3)),
    (3, 128, 384, -1, "float16", 4, ("sm80", 1, 8, 8, 2)),
    (70, 320, 384, 32, "float16", 4, None),
    (18, 128, 256, 32, "float16", 3, ("sm75", 2, 8, 8, 2)),
    (9, 192, 512, -1, "float16", 5, ("sm75", 1, 4, 8, 2)),
    (5, 128, 256, 128, "float16", 1, ("sm70", 1, 8, 16, 2)),
    (33, 256, 512, 64, "float16", 3, ("sm70", 2, 8, 8, 2)),
    (17, 192, 256, -1, "float16", 3, ("sm70", 2, 4, 8, 2)),
    (1, 64, 1024, 32, "float16", 2, ("sm70", 1, 4, 16, 2)),
    (40, 256, 256, 32, "float16", 4, ("sm70", 2, 16, 4, 2)),
    # K-tiles of 512 (tk 32): x's fetch passes cover 4 rows each, so each works out its swizzle
    (16, 256, 1536, 128, "float16", 5, ("sm80", 1, 4, 32, 4)),
    (9, 448, 1024, 64, "bfloat16", 3, ("sm80", 1, 8, 32, 3)),
    (3, 128, 1024, 32, "float16", 2, ("sm80", 1, 4, 32, 3)),
    # Blocks whose ranges cross tile boundaries, with the pipeline running on across them
    # (scratch fits in a stage) or draining (it does not), and split tiles whose partial sums
    # carry only the rows that exist (M = 1, 5, 17 in a 16- or 32-row tile).
    (1, 512, 1024, 128, "float16", 3, ("sm80", 1, 8, 16, 3)),
    (5, 384, 1024, 64, "bfloat16", 3, ("sm80", 1, 16, 8, 2)),
    (17, 512, 1024, 128, "float16", 3, ("sm80", 2, 16, 8, 4)),
    (9, 512, 1024, 128, "float16", 3, ("sm75", 1, 16, 8, 2)),
    (9, 256, 1024, 128, "float16", 3, ("sm75", 1, 8, 8, 2)),
    (20, 512, 1024, 32, "float16", 3, ("sm70", 2, 16, 8, 2)),
]


def _run_case(
    m, n, k, group, act, sms, forced, rng, bias=True, cluster=1, whole=False, late=False, bulk=False, xbox=False
):
    # H100's limits with the mma.sync kernel at every M (wgmma kernels: test_wgmma_emu.py); a
    # forced cluster kernel plans on sm_90 (no measured cluster counts: SMs / size of them), and so
    # does a forced kernel with TMA weight boxes
    prof = replace(
        get_profile("h100"), sms=sms, **(dict(clusters=()) if cluster > 1 else dict() if bulk else dict(cc=(8, 9)))
    )
    spec = None
    if forced:
        path, tm, tn, tk, st = forced
        spec = KernelSpec(
            path,
            "uint4b8",
            act,
            -1 if group < 0 else group // 16,
            tm,
            tn,
            tk,
            st,
            cluster=cluster,
            whole=whole,
            late=late,
            bulk=bulk,
            xbox=xbox,
        )
    w = rng.standard_normal((n, k)).astype(np.float32)
    qw = quantize(w, "uint4b8", group, scale_dtype=act)
    x = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    pl = plan(prof, Problem(m, n, k, act, "uint4b8", group), spec)
    out = emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))
    ref = linear_reference(halves.round_to(x, act), qw, None if b is None else halves.round_to(b, act))
    return pl, out, ref


@pytest.mark.parametrize(
    "case",
    [
        (16, 320, 512, 128, "float16", 2, ("sm80", 1, 4, 8, 4)),  # 5 tiles, 3 a block: 2 blocks
        (5, 448, 1024, 64, "bfloat16", 3, ("sm80", 1, 8, 16, 3)),  # 4 tiles, 2 a block, N tail
        (33, 256, 256, -1, "float16", 3, ("sm75", 2, 8, 8, 2)),  # 2 M chunks x 2 N tiles
        (13, 192, 2048, 128, "bfloat16", 2, ("sm80", 1, 4, 32, 3)),  # K-tiles of 512: 3 tiles, 2 a block
    ],
    ids=lambda c: f"m{c[0]}n{c[1]}k{c[2]}{c[6][0]}",
)
def test_whole_tile_plans_on_emulator(case, rng):
    """KernelSpec.whole: the Stream-K kernel on plans where no tile is split over blocks (no
    partial sums in the workspace, blocks with several whole tiles)."""
    pl, out, ref = _run_case(*case, rng, whole=True)
    k_tiles = case[2] // pl.spec.tile_k
    assert pl.spec.whole and pl.iters % k_tiles == 0 and pl.iters > k_tiles
    check_output(out, ref, case[4], spec=pl.spec)


# KernelSpec.late: blocks that share a split tile and go on to another one count themselves in
# after their next step (block 1 of 3 in both plans: 16 steps, 6 a block).
LATE_CASES = [
    (1, 512, 1024, 128, "float16", 3, ("sm80", 1, 8, 16, 3)),
    (9, 512, 1024, 128, "bfloat16", 3, ("sm80", 1, 16, 8, 2)),
    (9, 512, 1024, 128, "float16", 3, ("sm75", 1, 16, 8, 2)),
]


@pytest.mark.parametrize("case", LATE_CASES, ids=lambda c: f"m{c[0]}{c[4][:2]}{c[6][0]}")
def test_late_publish_on_emulator(case, rng):
    from jitmarlin.kernels.planner import late_contributors

    pl, out, ref = _run_case(*case, rng, late=True)
    assert pl.spec.late and late_contributors(pl.problem, pl.spec, pl.grid, pl.iters) > 0
    check_output(out, ref, case[4], spec=pl.spec)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"m{c[0]}n{c[1]}k{c[2]}g{c[3]}{c[4][:2]}sm{c[5]}")
def test_kernel_on_emulator(case, rng):
    pl, out, ref = _run_case(*case, rng)
    check_output(out, ref, case[4], spec=pl.spec)


# KernelSpec.scale_sums (one m16 row block, groups of 64 or 128): a warp's run of k16 steps under
# one scale row sums unscaled codes, then takes the scale. Runs of a whole stage's steps (group
# >= the K tile), two runs a warp and stage (group 64 < SUB = 8), runs of 2 steps on 8 K-warps,
# sm75's k8 MMAs, a short last tile. Runs of 8 steps in bf16 (256-wide tiles, groups of 128) take
# the codes raw, their offsets out of each run's sums (KernelSpec.raw_codes): split tiles with an
# N tail, one tile over 5 blocks.
SCALE_SUM_CASES = [
    (12, 256, 1024, 64, "float16", 3, ("sm80", 1, 16, 16, 2)),
    (16, 320, 768, 128, "bfloat16", 4, ("sm80", 1, 4, 16, 3)),
    (2, 192, 1024, 64, "float16", 3, ("sm75", 1, 8, 16, 2)),
    (11, 128, 512, 128, "bfloat16", 2, ("sm80", 1, 8, 8, 2)),
    (13, 448, 1536, 128, "bfloat16", 3, ("sm80", 1, 16, 16, 2)),
    (9, 256, 2048, 128, "bfloat16", 5, ("sm80", 1, 16, 16, 3)),
]


@pytest.mark.parametrize(
    "case", SCALE_SUM_CASES, ids=lambda c: f"m{c[0]}g{c[3]}{c[4][:2]}{c[6][0]}tn{c[6][2]}tk{c[6][3]}"
)
def test_group_scales_on_the_sums_on_emulator(case, rng):
    pl, out, ref = _run_case(*case, rng)
    assert pl.spec.scale_sums and pl.spec.raw_codes == (case[4] == "bfloat16" and case[6][2:4] == (16, 16))
    check_output(out, ref, case[4], spec=pl.spec)


@pytest.mark.parametrize(
    "old,new",
    [
        # the run's sums never enter the totals, or enter them without being cleared
        ("if ((sub + 1) % SCALE_RUN == 0) end_run(sub);", "if ((sub + 1) % SCALE_RUN == 0) {}"),
        ("          grp[s].r[e] = 0.f;\n        }\n      }\n      JM_UNROLL", "        }\n      }\n      JM_UNROLL"),
        # every run takes the first scale row of the stage (two groups a stage)
        (
            "const int srow = GROUP_BLOCKS >= TK ? 0 : kk / GROUP_BLOCKS;\n      const int4* row",
            "const int srow = 0;\n      const int4* row",
        ),
        # raw codes: the offsets' sums never taken out, or taken out of every run since the first
        ("const float g = RAW_CODES ? grp[s].r[e] - xs[e] : grp[s].r[e];", "const float g = grp[s].r[e];"),
        (
            "        for (int e = 0; e < 4; ++e) xoff[c].r[e] = 0.f;\n    };",
            "        for (int e = 0; e < 4; ++e) {}\n    };",
        ),
        # raw codes: only the first of the offsets' chains taken out
        (
            "        for (int c = 0; c < XO; ++c)\n          JM_UNROLL\n          for (int e = 0; e < 4; ++e) xs[e] += xoff[c].r[e];",
            "        for (int c = 0; c < 1; ++c)\n          JM_UNROLL\n          for (int e = 0; e < 4; ++e) xs[e] += xoff[c].r[e];",
        ),
    ],
    ids=["no-flush", "no-clear", "one-scale-row", "raw-no-offsets", "raw-no-clear", "raw-one-chain"],
)
def test_emulator_catches_planted_scale_sum_slips(plant, rng, old, new):
    plant(old, new)
    case = SCALE_SUM_CASES[4 if "xoff" in old or "RAW_CODES" in old else 0]
    pl, out, ref = _run_case(*case, rng)
    assert fails_check(out, ref, case[4])


def _mutated_run(plant, old, new, rng):
    plant(old, new)
    return _run_case(33, 256, 512, 64, "float16", 4, None, rng, bias=False)


@pytest.mark.parametrize(
    "old,new",
    [
        ("      pipe.template land<STAGES - 2>();\n      bar_sync();", "      pipe.template land<STAGES - 2>();"),
        ("pipe.template land<STAGES - 2>();", "pipe.template land<STAGES - 1>();"),
        ("        bar_sync();\n        if (wk == 0) {", "        if (wk == 0) {"),
    ],
    ids=["missing-barrier", "shallow-wait", "missing-reduce-barrier"],
)
def test_emulator_catches_planted_races(plant, rng, old, new):
    assert _caught(plant, old, new, rng)


def _caught(plant, old, new, rng, case=None, **forced) -> bool:
    """The planted bug is caught: the emulator reports an error, or the suite's own tolerance
    would fail the result (on `case`, as _run_case takes it, where given)."""
    try:
        if case is None:
            _, out, ref = _mutated_run(plant, old, new, rng)
        else:
            plant(old, new)
            _, out, ref = _run_case(*case, rng, bias=False, **forced)
    except emu.EmuError:
        return True
    return fails_check(out, ref, case[4] if case else "float16")


def test_emulator_catches_finisher_not_waiting(plant, rng):
    # The finishing block reads the others' partial sums before they are all stored. One
    # schedule in ~6 lets the finisher arrive last anyway (then nothing is wrong); eight random
    # schedules miss it with probability ~1e-6.
    assert any(_caught(plant, "wait_count(r.locks + b_lo, contributors);", "", rng) for _ in range(8))


@pytest.mark.parametrize("case", [LATE_CASES[0], LATE_CASES[2]], ids=["sm80", "sm75"])
def test_emulator_catches_late_publish_never_made(plant, rng, case):
    # a late contributor that fences but never counts itself in: its finisher waits for ever
    plant("    fence_release_gpu();\n    arrive(r.locks + b_lo);\n  }", "    fence_release_gpu();\n  }")
    with pytest.raises(emu.EmuError, match="deadlock"):
        _run_case(*case, rng, late=True)


# Not every race is within reach: publishing a block's arrival before all of its partial sums are
# stored needs the finishing block to overtake a straggler warp of another block, which a
# randomised scheduler rarely produces. The emulator is a strong check, not a proof.


def test_emulator_catches_scratch_in_a_stage_still_loading(plant, rng):
    # Between tiles the reduction may use only the stage just consumed: every other stage holds
    # or awaits the next steps. Using the next one (copies in flight) must show up: the emulator
    # lands cp.async groups at random times between issue and wait.
    for case in CASES[-6:-3]:  # cp.async kernels whose blocks cross tile boundaries
        assert _caught(
            plant, "smem + ((t - 1) % STAGES) * STAGE : smem", "smem + (t % STAGES) * STAGE : smem", rng, case=case
        ), case


def test_emulator_catches_divergent_barrier(plant, rng):
    with pytest.raises(emu.EmuError, match="deadlock"):
        _mutated_run(
            plant,
            "  bar_sync();\n  if (threadIdx.x == 0) {\n    fence_release_gpu();",
            "  if (threadIdx.x < 64) bar_sync();\n  if (threadIdx.x == 0) {\n    fence_release_gpu();",
            rng,
        )


# Thread-block clusters (sm_90): split tiles reduce through another block's shared memory.
# (m, n, k, group, act, emulated SMs, (tn, tk, stages, cluster)): tiles split over 2, 4 and 8
# blocks of a cluster (1, 3 and 7 contributors), clusters with fewer tiles than the others,
# blocks with no steps, bf16, per-channel scales, several M chunks' worth of rows (M = 16).
CLUSTER_CASES = [
    (1, 256, 1024, 128, "float16", 4, (8, 16, 4, 2)),
    (5, 384, 1536, 64, "bfloat16", 4, (8, 8, 3, 4)),
    (16, 320, 2048, 128, "float16", 3, (16, 8, 2, 8)),
    (3, 640, 1024, -1, "float16", 4, (8, 16, 2, 2)),
    (9, 1152, 2048, 32, "bfloat16", 16, (8, 16, 2, 4)),
]


def _run_cluster_case(m, n, k, group, act, sms, cfg, rng):
    tn, tk, st, c = cfg
    return _run_case(m, n, k, group, act, sms, ("sm80", 1, tn, tk, st), rng, cluster=c)


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=lambda c: f"m{c[0]}n{c[1]}k{c[2]}c{c[6][3]}")
def test_cluster_kernel_on_emulator(case, rng):
    pl, out, ref = _run_cluster_case(*case, rng)
    assert pl.spec.cluster == case[6][3] and pl.grid % pl.spec.cluster == 0
    assert (pl.iters * pl.spec.cluster) % pl.k_tiles == 0  # whole tiles per cluster
    assert pl.iters % pl.k_tiles, "the case must split tiles over the blocks of a cluster"
    check_output(out, ref, case[4], spec=pl.spec)


def test_emulator_catches_cluster_finisher_not_waiting(plant, rng):
    plant("  if (reader) cl_bar_wait(r.bar, 0);", "")
    caught = 0
    for _ in range(6):
        try:
            _, out, ref = _run_cluster_case(*CLUSTER_CASES[2], rng)
        except emu.EmuError:
            caught += 1
            continue
        caught += fails_check(out, ref, "float16")
    assert caught


def test_emulator_catches_partial_sums_in_the_wrong_slot(plant, rng):
    plant("cluster_map(r.recv + (b - b_lo - 1) * r.slot_f4,", "cluster_map(r.recv,")
    _, out, ref = _run_cluster_case(*CLUSTER_CASES[2], rng)  # 3 contributors a tile
    assert fails_check(out, ref, "float16")


def test_emulator_catches_remote_store_outside_the_cluster(plant, rng):
    # a contributor addressing a rank past its cluster (mapa) is an error, not a stray write
    plant("(u32)(b_lo % RED_CLUSTER))};", "(u32)(b_lo % RED_CLUSTER) + RED_CLUSTER)};")
    with pytest.raises(emu.EmuError, match="rank outside the cluster"):
        _run_cluster_case(*CLUSTER_CASES[0], rng)


# Every quant type on the emulator: (qtype, group, act, path profile, m)
QTYPE_CASES = [
    ("uint4", 128, "float16", "h100", 9),
    ("uint4", -1, "bfloat16", "a100", 17),
    ("uint8b128", 64, "float16", "h100", 9),
    ("uint8b128", -1, "bfloat16", "h100", 3),
    ("uint8b128", 128, "bfloat16", "h100", 12),
    ("float8_e4m3fn", 64, "bfloat16", "h100", 16),
    ("uint8", 32, "bfloat16", "l4", 33),
    ("uint8", -1, "float16", "h100", 5),
    ("float8_e4m3fn", 128, "float16", "h100", 9),
    ("float8_e4m3fn", -1, "bfloat16", "h100", 2),
    ("nvfp4", 16, "float16", "h100", 9),
    ("nvfp4", 16, "bfloat16", "rtx4090", 20),
    ("mxfp4", 32, "bfloat16", "h100", 9),
    ("uint8", 64, "float16", "v100", 20),
    ("nvfp4", 16, "float16", "v100", 3),
    ("uint4", 32, "float16", "t4", 7),
    ("float8_e4m3fn", -1, "float16", "t4", 18),
    # groups of 16 of integer codes: GGUF's K-quant sub-blocks (Q6_K, Q3_K, Q2_K) land here
    ("uint8b128", 16, "float16", "h100", 9),
    ("uint4b8", 16, "bfloat16", "h100", 12),
    ("uint4", 16, "float16", "h100", 5),
    ("uint8", 16, "float16", "t4", 7),
    ("uint8b128", 16, "float16", "v100", 3),
]


def _run_qw(qw, m, act, prof_name, rng, sms=3):
    prof = replace(get_profile(prof_name), sms=sms)
    x = rng.standard_normal((m, qw.in_features)).astype(np.float32)
    b = rng.standard_normal(qw.out_features).astype(np.float32)
    pl = plan(prof, Problem(m, qw.n, qw.k, act, qw.qtype, qw.group_size))
    out = emu.run_values(pl, x, qw, bias=b, seed=int(rng.integers(1, 1 << 30)))
    ref = linear_reference(halves.round_to(x, act), qw, halves.round_to(b, act))
    return pl, out, ref


@pytest.mark.parametrize("case", QTYPE_CASES, ids=lambda c: f"{c[0]}-g{c[1]}-{c[2][:2]}-{c[3]}")
def test_every_quant_type_on_emulator(case, rng):
    qtype, group, act, prof, m = case
    w = rng.standard_normal((192, 256)) * 0.05
    qw = quantize(w, qtype, group, scale_dtype=act)
    pl, out, ref = _run_qw(qw, m, act, prof, rng)
    assert pl.spec.qtype == qtype and pl.spec.path == get_profile(prof).path
    check_output(out, ref, act, spec=pl.spec)


def test_padded_shapes_and_float_zero_points_on_emulator(rng):
    from jitmarlin.weights.quant import from_codes

    qw = from_codes("uint4b8", rng.integers(0, 16, (200, 136)), rng.random((1, 200)) * 0.01 + 0.001, -1)
    assert (qw.n, qw.k) == (256, 192)
    pl, out, ref = _run_qw(qw, 5, "float16", "h100", rng)
    assert out.shape == (5, 200)
    check_output(out, ref, "float16", spec=pl.spec)
    qw = from_codes(
        "uint4", rng.integers(0, 16, (72, 200)), rng.random((7, 72)) * 0.01 + 0.001, 32, zeros=rng.random((7, 72)) * 15
    )  # HQQ-style float zero points
    pl, out, ref = _run_qw(qw, 3, "float16", "h100", rng)
    assert out.shape == (3, 72)
    check_output(out, ref, "float16", spec=pl.spec)


def test_three_block_tiles_of_the_nvvm20_targets_on_emulator(rng):
    """sm_100+ plans at most 3 m16 blocks a tile, spread evenly over the M chunks (plan_tm): M = 100
    on rtx-pro-6000 is 3 chunks of 48 rows, the last one 4 rows long; M = 64 two chunks of 32."""
    for m, act, tm, chunks in ((100, "bfloat16", 3, 3), (64, "float16", 2, 2)):
        qw = quantize(rng.standard_normal((192, 256)) * 0.05, "uint4b8", 64, scale_dtype=act)
        pl, out, ref = _run_qw(qw, m, act, "rtx-pro-6000", rng)
        assert (pl.spec.tm, pl.m_chunks) == (tm, chunks), pl.spec.name
        check_output(out, ref, act, spec=pl.spec)


@pytest.mark.parametrize("prof", ["b200", "b300"])
def test_blackwell_datacenter_plans_on_emulator(prof, rng):
    """The sm_100 / sm_103 profiles' own plans (no wgmma there: the decode GEMV, then mma.sync
    Stream-K with at most 3 m16 blocks a tile and stages sized to 228 KB) for decode and prefill
    rows, 4- and 8-bit and fp4 types, both dtypes, against the reference."""
    for qtype, group, act, m in (
        ("uint4b8", 128, "float16", 1),
        ("nvfp4", 16, "bfloat16", 7),
        ("uint4", 64, "bfloat16", 16),
        ("float8_e4m3fn", -1, "float16", 64),
        ("mxfp4", 32, "float16", 100),
        ("uint8b128", 128, "bfloat16", 256),
    ):
        qw = quantize(rng.standard_normal((192, 256)) * 0.05, qtype, group, scale_dtype=act)
        pl, out, ref = _run_qw(qw, m, act, prof, rng, sms=4)
        assert pl.spec.path == "sm80" and not getattr(pl.spec, "wgmma", False), pl.spec.name
        assert getattr(pl.spec, "tm", 1) <= 3, pl.spec.name
        check_output(out, ref, act, spec=pl.spec)


def test_act_order_on_emulator(rng):
    from jitmarlin.weights.quant import from_codes

    g_idx = rng.permutation(np.repeat(np.arange(4), 64))
    qw = from_codes("uint4b8", rng.integers(0, 16, (128, 256)), rng.random((4, 128)) * 0.01 + 0.001, 64, g_idx=g_idx)
    assert qw.perm is not None
    pl, out, ref = _run_qw(qw, 7, "float16", "h100", rng)
    check_output(out, ref, "float16", spec=pl.spec)


# KernelSpec.bulk: a stage's weights as one TMA box on the stage's mbarrier, and with xbox its x too,
# as 64-column boxes with the 128-byte swizzle (the emulator copies a box when a thread first waits
# on its barrier, zeros outside the array, swizzled where the map says so): 256-wide Stream-K tiles
# with an N tail (the last tile three quarters past N), 128 x 512, groups of 64, bf16 raw codes,
# blocks of 4 and of 16 steps.
BULK_CASES = [
    (16, 1088, 1024, 128, "bfloat16", 3, ("sm80", 1, 16, 16, 3)),
    (13, 512, 2048, 64, "float16", 3, ("sm80", 1, 8, 32, 2)),
    (9, 1024, 1024, 128, "float16", 4, ("sm80", 1, 16, 16, 4)),
    (9, 1024, 2048, 128, "float16", 2, ("sm80", 1, 16, 16, 3)),
]  # 16 steps a block, 3 stages


@pytest.mark.parametrize("xbox", [False, True], ids=["w", "wx"])
@pytest.mark.parametrize("case", BULK_CASES, ids=lambda c: f"m{c[0]}n{c[1]}{c[4][:2]}tn{c[6][2]}tk{c[6][3]}")
def test_bulk_weight_boxes_on_emulator(case, xbox, rng):
    pl, out, ref = _run_case(*case, rng, bulk=True, xbox=xbox)
    assert pl.spec.bulk and pl.spec.xbox == xbox
    check_output(out, ref, case[4], spec=pl.spec)


def test_x_boxes_past_in_features_on_emulator(rng):
    # in_features 1000 of K 1024: the last box of x covers columns 960..1023, 24 of them past x's
    # rows (the emulator faults a read past x's buffer and fills the box's outside part with zeros)
    from jitmarlin.weights.quant import from_codes

    qw = from_codes("uint4b8", rng.integers(0, 16, (512, 1000)), rng.random((1, 512)) * 0.01 + 0.001, -1)
    assert (qw.k, qw.in_features) == (1024, 1000)
    spec = KernelSpec("sm80", "uint4b8", "bfloat16", -1, 1, 8, 16, 3, bulk=True, xbox=True)
    pl = plan(replace(get_profile("h100"), sms=2), Problem(11, qw.n, qw.k, "bfloat16", "uint4b8", -1), spec)
    x = rng.standard_normal((11, 1000)).astype(np.float32)
    out = emu.run_values(pl, x, qw, seed=int(rng.integers(1, 1 << 30)))
    assert out.shape == (11, 512)
    check_output(out, linear_reference(halves.round_to(x, "bfloat16"), qw), "bfloat16", spec=pl.spec)


@pytest.mark.parametrize(
    "old,new,xbox",
    [
        # the step computes its stage without waiting for the stage's box
        ("      mbar_wait(wbar + t % STAGES, (wphase >> (t % STAGES)) & 1u);", "", False),
        # the wait's parity never flips (waits on a phase already complete)
        ("      wphase ^= 1u << (t % STAGES);\n", "", False),
        # the boxes' bytes announced short (more land than the phase expects): the weights', x's
        (
            "mbar_expect_tx(wbar + stage, ((X_TMA ? A_STAGE : 0) + B_STAGE) * 16);",
            "mbar_expect_tx(wbar + stage, ((X_TMA ? A_STAGE : 0) + B_STAGE / 2) * 16);",
            False,
        ),
        (
            "mbar_expect_tx(wbar + stage, ((X_TMA ? A_STAGE : 0) + B_STAGE) * 16);",
            "mbar_expect_tx(wbar + stage, B_STAGE * 16);",
            True,
        ),
        # the box read from the wrong K rows (every stage the tile's first)
        (
            "tma_load_2d(sB, &bmap, nt * 16 * TN * QI, kt * TK, wbar + stage, w_pol);",
            "tma_load_2d(sB, &bmap, nt * 16 * TN * QI, 0, wbar + stage, w_pol);",
            False,
        ),
        # x's boxes: every one from the K tile's first 64 columns, or stored in the wrong order
        (
            "tma_load_2d(sA + s * TILE_M * 8, &xmap, kt * TILE_K + 64 * s,",
            "tma_load_2d(sA + s * TILE_M * 8, &xmap, kt * TILE_K,",
            True,
        ),
        ("tma_load_2d(sA + s * TILE_M * 8, &xmap,", "tma_load_2d(sA + (TK / 4 - 1 - s) * TILE_M * 8, &xmap,", True),
    ],
    ids=["no-wait", "stale-parity", "short-expect", "x-short-expect", "wrong-rows", "x-first-columns", "x-box-order"],
)
def test_emulator_catches_planted_bulk_slips(plant, rng, old, new, xbox):
    # 16 steps a block through 3 stages: every stage's barrier goes through several phases
    assert _caught(plant, old, new, rng, case=BULK_CASES[3], bulk=True, xbox=xbox)


# ---- planted slips that a whole-matrix figure misses (issue: one wrong output element) ----------
# Each drops or skips a few output elements; ||out - ref|| / ||ref|| barely moves (a bias element
# off in ~1/1000 outputs adds ~1e-3), so only the element-wise bound catches them. The checker must
# fail and name a row and a column.


def _dropped(m: int, n: int) -> int:
    """How many outputs the hashed bias drop below touches: (131 row + 7 col) % 997 == 0."""
    r, c = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    return int(((131 * r + 7 * c) % 997 == 0).sum())


def _assert_named_failure(out, ref, act):
    with pytest.raises(AssertionError, match=r"row \d+, column \d+"):
        check_output(out, ref, act, what="planted", record=False)


_GEMM_DROP_SOME = [
    # the bias left out of outputs (row, col) with (131 row + 7 col) % 997 == 0: ~1/1000
    (
        "          row[0] = act_pack2(c.r[0] * s0 + b0, c.r[1] * s1 + b1);\n"
        "          row[8 * STAGE_ROW] = act_pack2(c.r[2] * s0 + b0, c.r[3] * s1 + b1);",
        "          const int hr = (mc * TILE_M + i * 16 + g) * 131 + col * 7;\n"
        "          row[0] = act_pack2(c.r[0] * s0 + (hr % 997 == 0 ? 0.f : b0), c.r[1] * s1 + ((hr + 7) % 997 == 0 ? 0.f : b1));\n"
        "          row[8 * STAGE_ROW] = act_pack2(c.r[2] * s0 + ((hr + 1048) % 997 == 0 ? 0.f : b0),\n"
        "                                         c.r[3] * s1 + ((hr + 1055) % 997 == 0 ? 0.f : b1));",
    )
]


# K = 128: a unit-variance bias is ~9% of an output's scale (the audit saw 6-10%)
@pytest.mark.parametrize(
    "case",
    [
        (33, 512, 128, 128, "float16", 3, ("sm80", 2, 16, 4, 3)),
        (33, 512, 128, 64, "bfloat16", 3, ("sm80", 2, 16, 4, 3)),
        (40, 512, 128, 128, "float16", 3, ("sm75", 1, 16, 8, 2)),
        (40, 512, 128, 32, "float16", 3, ("sm70", 2, 16, 8, 2)),
    ],
    ids=["sm80-fp16", "sm80-bf16", "sm75", "sm70"],
)
def test_checker_catches_bias_dropped_on_one_output_in_a_thousand(plant, rng, case):
    assert _dropped(case[0], case[1]) >= 15
    plant(*_GEMM_DROP_SOME[0])
    _, out, ref = _run_case(*case, rng)
    _assert_named_failure(out, ref, case[4])


@pytest.mark.parametrize(
    "case",
    [(5, 448, 128, 64, "bfloat16", 3, ("sm80", 1, 8, 8, 3)), (13, 192, 128, 128, "bfloat16", 2, ("sm80", 1, 4, 8, 2))],
    ids=["n448", "n192"],
)
def test_checker_catches_bias_dropped_on_the_last_8_columns_in_bf16(plant, rng, case):
    plant(
        "        if (bias && col < n_out) {\n          const u32 bv = bias[col >> 1];",
        "        if (bias && col < n_out - 8) {\n          const u32 bv = bias[col >> 1];",
    )
    _, out, ref = _run_case(*case, rng)
    _assert_named_failure(out, ref, "bfloat16")


def test_checker_catches_bias_dropped_in_the_decode_kernel(plant, rng):
    # the gemv epilogue: every 1009th (row, column) pair of a store loses its bias
    plant(
        "        b0 = act_lo(bv);\n        b1 = act_hi(bv);\n      }\n      packed[q]",
        "        b0 = (row * 131 + (col + 2 * q) * 7) % 997 == 0 ? 0.f : act_lo(bv);\n"
        "        b1 = (row * 131 + (col + 2 * q) * 7 + 7) % 997 == 0 ? 0.f : act_hi(bv);\n      }\n      packed[q]",
    )
    w = rng.standard_normal((2048, 512)) * 0.05
    qw = quantize(w, "uint4b8", 128, scale_dtype="float16")
    assert _dropped(4, 2048) >= 8
    pl, out, ref = _run_qw(qw, 4, "float16", "h100", rng, sms=8)
    assert type(pl.spec).__name__ == "GemvSpec", pl.spec.name
    _assert_named_failure(out, ref, "float16")


@pytest.mark.parametrize("case", [QTYPE_CASES[0], QTYPE_CASES[6], QTYPE_CASES[13]], ids=lambda c: f"{c[0]}-{c[3]}")
def test_checker_catches_an_unwritten_output_row(plant, rng, case):
    # test_every_quant_type's path: the last row of every M chunk is never stored (the output
    # starts NaN, so the element is named as non-finite)
    plant("&& grow < M && gcol < n_out)", "&& grow < M && (grow + 1) % TILE_M != 0 && grow != M - 1 && gcol < n_out)")
    qtype, group, act, prof, m = case
    qw = quantize(rng.standard_normal((192, 256)) * 0.05, qtype, group, scale_dtype=act)
    _, out, ref = _run_qw(qw, m, act, prof, rng)
    with pytest.raises(AssertionError, match=r"non-finite .* row \d+, column \d+"):
        check_output(out, ref, act, record=False)
