"""The planner: DeviceProfile + problem shape -> Plan (a spec + launch geometry).

Two routes: below a per-architecture M threshold the fused mixed-precision kernel (KernelSpec);
at or above it, dequantise the weight into a dense workspace and run one cuBLAS GEMM
(DequantSpec). Pure functions of frozen values: no GPU, no I/O. Prewarm, inspect and the tests
call it for any profile.

This module is the small chooser among the families; each family's plan rules live with it:
mma/plan.py (mma.sync, and the Stream-K geometry of every fused plan), wgmma/plan.py,
gemv/plan.py, dequant/plan.py, and plan_base.py what they share. Their names are re-exported
here (the planner's public surface); a family's tuning switches (e.g. mma.plan.WHOLE_DECODE) are
read from its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.dequant.plan import dequant_spec  # noqa: F401
from jitmarlin.kernels.gemv.plan import (  # noqa: F401
    GEMV_COL_BLOCKS,
    GEMV_MAX_M,
    GEMV_MIN_FILL,
    GEMV_PAIR,
    GEMV_PAIR_MAX_M,
    GEMV_PLAN_MAX_M,
    GEMV_SCALED_MIN_FILL,
    _gemv_choice,
    _gemv_fill,
    _gemv_light,
    _gemv_shape,
    _pair_planned,
    gemv_specs,
    hybrid_fits,
    hybrid_unroll,
    spread_clusters,
)
from jitmarlin.kernels.mma.plan import (  # noqa: F401
    BULK_DECODE,
    BULK_MIN_STAGE_BYTES,
    CLUSTER_DECODE,
    CLUSTER_MAX_LOAD,
    CLUSTER_MAX_M,
    CLUSTER_SIZES,
    HALF_TILES,
    HALF_TILES_CLUSTER,
    HALF_TILES_MAX_EXTRA,
    HALF_TILES_MAX_LOAD,
    HALF_TILES_MIN_FILL,
    HALF_TILES_MIN_TM,
    HYBRID_MIN_M,
    HYBRID_PLANS,
    LATE_MAX_ITERS,
    LATE_PUBLISH,
    NARROW_DEEP_DECODE,
    NARROW_DEEP_MIN_SHARERS,
    NARROW_DEEP_STAGES,
    TAIL_BOXES,
    WHOLE_DECODE,
    WHOLE_DECODE_MAX_LOAD,
    WHOLE_DECODE_MAX_STEPS,
    WHOLE_DECODE_TK32,
    WHOLE_DECODE_TK32_STAGES,
    WHOLE_TILES_MAX_LOAD,
    XBOX_ACTS,
    _block_bytes,
    _cluster_spec,
    _geometry,
    _half_cluster_spec,
    _half_tiles,
    _hybrid,
    _late_spec,
    _narrow_deep_decode,
    _whole_decode,
    _whole_tiles,
    bulk_fits,
    bulk_spec,
    cluster_tiles,
    is_half_plan,
    late_contributors,
    plan_of,
    plan_spec,
    tail_spec,
    tiles_in_step,
    xbox_fits,
)
from jitmarlin.kernels.plan_base import (  # noqa: F401
    ALL_QTYPES,
    BIG_LAYER_BYTES_PER_SM,
    NVVM20_CC,
    NVVM20_MAX_TM,
    PATH_ACTS,
    PATH_MAX_STAGES,
    PATH_MAX_TM,
    PATH_QTYPES,
    WGMMA_MIN_M,
    Plan,
    _check_spec_matches,
    _deepest_fused,
    _fits,
    _preferences,
    check_problem,
    group_blocks,
    max_tm,
    plan_tm,
    wgmma_available,
)
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import HYBRID_MAX_SHARERS, AnySpec, DequantSpec, GemvSpec, KernelSpec, wgmma_threads
from jitmarlin.kernels.wgmma.plan import (  # noqa: F401
    TALL_UNSPLIT,
    TALL_UNSPLIT_MIN_STEPS,
    WGMMA_OCC2_MIN_STEPS,
    WGMMA_SMALL_DEPTH,
    WGMMA_TALL_MIN_STEPS,
    WGMMA_TALL_MIN_STEPS_256,
    WGMMA_WIDE_MIN_STEPS,
    WIDE3,
    WIDE3_MAX_M,
    WIDE3_QTYPES,
    WIDE3_STAGES,
    WIDE3_TAIL_STAGES,
    _deepest_wgmma,
    _tall_unsplit,
    _wgmma_specs,
    _wgmma_steps_per_block,
    _wide3,
    wgmma_occupancy,
)
from jitmarlin.weights.qtypes import ACT_DTYPES, GROUP_SIZES, get_qtype

# ---- route: fused kernel, or dequantise + cuBLAS -------------------------------------------------
# At large M the fused mma.sync kernel is compute-bound and loses to fp16 cuBLAS (H100: 2.5-3x
# slower from M ~ 1024). Expanding the weight once per call (reads N*K/2 bytes for 4-bit codes,
# writes N*K*2) and running one cuBLAS GEMM costs ~1.07-1.3x cuBLAS there, on every generation.
# Problems with M at or above the threshold of their GPU's arch take that route; the fused kernel
# is weakest on Volta/Turing, hence their lower threshold. Set from measurements per arch: on
# Hopper the fused route below the threshold is the wgmma kernel (WGMMA_MIN_M), so sm_90's number
# comes from comparing that with this route (tools/sweep and the autotuner time both).
# sm_90 (H100 sweeps, tools/PERF.md entries 14 and 20): with x loaded by TMA the wgmma kernel
# wins at M = 512 on all eight bench layers (0.64-0.79x the route's time) and at 1024 on seven
# (0.90-0.93x); at 2048 it ties on three and loses on five, at 4096 it loses on all. Those were
# Stream-K plans: with whole tiles a block it wins at 2048 too (dequant_route, entry 30).
DEQUANT_MIN_M = {"sm_70": 256, "sm_72": 256, "sm_75": 256, "sm_90": 2048}
DEQUANT_MIN_M_DEFAULT = 1024
# candidate_specs() offers the dequant route to an autotuner from this M up.
DEQUANT_CANDIDATE_MIN_M = 256


def dequant_min_m(profile: DeviceProfile) -> int:
    """The smallest M that the planner sends to the dequant + cuBLAS route on `profile` whatever
    the layer (see dequant_route for the other case)."""
    return DEQUANT_MIN_M.get(profile.arch, DEQUANT_MIN_M_DEFAULT)


HYBRID_ROUTE_MIN_STEPS = 128  # see dequant_route


def dequant_route(profile: DeviceProfile, p: Problem) -> bool:
    """Whether the planner sends `p` to the dequant + cuBLAS route: from dequant_min_m rows, and
    from DEQUANT_CANDIDATE_MIN_M rows where x (M x K halves) is larger than the L2 cache. The
    fused kernels' Stream-K ranges start their blocks at scattered K offsets of every row block
    at once, so such an x is read from DRAM again and again (H100, 70B down, x 58 MB: wgmma
    972 us vs 902 for the route at M = 1024; 8B down at 2048: 644 vs 361).
    Not where the wgmma kernel's plan has whole tiles a block (_whole_tiles): its blocks then
    run their tiles in step and read x and the weights once through L2, and it beats the route
    at M = 1024 and 2048 on every bench layer and ties at 4096 (tools/PERF.md entry 30), with no
    N x K workspace. Nor where it is a hybrid one (_hybrid: whole tiles but for the last wave)
    with tiles of at least HYBRID_ROUTE_MIN_STEPS K-steps (entry 57, H100, N = 2560 and 5120:
    0.87-0.95x the route's time at K = 8192, 1.03-1.05x at K = 4096, where each tile's pipeline
    fill and the striped tiles' sums weigh more)."""
    if not (p.m >= dequant_min_m(profile) or (p.m >= DEQUANT_CANDIDATE_MIN_M and 2 * p.m * p.k > profile.l2_bytes)):
        return False
    if wgmma_available(profile) and p.m >= WGMMA_MIN_M:
        spec = choose_fused_spec(profile, p)
        _, iters = _geometry(profile, p, spec)
        k_tiles = p.k // spec.tile_k
        if iters % k_tiles == 0 or (_hybrid(profile, p, spec) and k_tiles >= HYBRID_ROUTE_MIN_STEPS):
            return False
    return True


def choose_spec(profile: DeviceProfile, p: Problem) -> AnySpec:
    """Pick the route and kernel for problem `p` on `profile` (raises if none fits): the
    dequant + cuBLAS route where dequant_route(profile, p), else the fused kernel."""
    if dequant_route(profile, p):
        return dequant_spec(profile, p)
    return choose_fused_spec(profile, p)


def choose_fused_spec(profile: DeviceProfile, p: Problem) -> KernelSpec:
    """Pick the fused kernel for problem `p` on `profile` (raises if none fits)."""
    check_problem(profile, p)
    if wgmma_available(profile) and p.m >= WGMMA_MIN_M:
        wg = _wgmma_specs(profile, p)
        if wg:
            return tail_spec(p, _half_cluster_spec(profile, p, wg[0]))
    gemv = _gemv_choice(profile, p)
    if gemv:
        return gemv
    tm = plan_tm(profile, p)
    fitting = [
        s
        for tn, tk, max_stages in _preferences(profile, p)
        if p.k % (16 * tk) == 0 and (s := _deepest_fused(profile, p, tm, tn, tk, max_stages))
    ]
    if not fitting:
        raise UnsupportedError(
            f"no tile configuration fits {profile.name} ({profile.smem_per_block} bytes of shared "
            f"memory per block) for M={p.m} N={p.n} K={p.k}"
        )
    # Prefer a tile width that divides N (no idle columns); keep preference order otherwise.
    spec = next((s for s in fitting if p.n % s.tile_n == 0), fitting[0])
    return bulk_spec(
        profile,
        _cluster_spec(profile, p, spec)
        or _whole_decode(profile, p, spec)
        or _narrow_deep_decode(profile, p, spec)
        or _late_spec(profile, p, spec),
    )


# Whole-tile plans of the mma.sync kernel the autotuner tries (KernelSpec.whole): those whose
# busiest block streams at most this many times the K-steps of the Stream-K plan. No partial sums
# meet in L2, which at decode saves up to ~2 us a call (tools/PERF.md entries 22, 51); the planner
# itself keeps Stream-K, which is faster on most layers (entry 51: 8B qkv M = 16 is the exception
# measured, 10.53 -> 9.96 us on 96 blocks of 64-wide tiles, 1.33x the steps).
WHOLE_CANDIDATE_MAX_LOAD = 1.5


def candidate_specs(profile: DeviceProfile, p: Problem) -> list[AnySpec]:
    """Every kernel that can run problem `p` on `profile` (fused: tile shapes x pipeline depths;
    from DEQUANT_CANDIDATE_MIN_M rows up, last, the dequant + cuBLAS route's DequantSpec): the
    search space of the autotuner. Pure."""
    check_problem(profile, p)
    path = profile.path
    tm = plan_tm(profile, p)
    gb = group_blocks(p)
    stages = (2,) if path != "sm80" else (2, 3, 4, 5, 6, 8)
    out = []
    for tn in (4, 8, 16):
        # K-tiles of 512 on the sm80 path at decode (one m16 row block): entry 79
        for tk in (4, 8, 16, 32) if path == "sm80" and tm == 1 else (4, 8, 16):
            if p.k % (16 * tk):
                continue
            for st in stages:
                spec = KernelSpec(path, p.qtype, p.act, gb, tm, tn, tk, st)
                if _fits(profile, spec):
                    out.append(spec)
                    # the same kernel on a plan of whole tiles, where that loads its busiest
                    # block at most WHOLE_CANDIDATE_MAX_LOAD x the Stream-K plan's K-steps
                    whole = replace(spec, whole=True)
                    if _geometry(profile, p, whole)[1] <= WHOLE_CANDIDATE_MAX_LOAD * _geometry(profile, p, spec)[1]:
                        out.append(whole)
                    # and with late publishing, where a block goes on past a split tile
                    if tm == 1 and late_contributors(p, spec, *_geometry(profile, p, spec)):
                        out.append(replace(spec, late=True))
                    # and with TMA weight boxes (sm_90, where they are measured), and x's too
                    bulk = replace(spec, bulk=True)
                    if profile.cc == (9, 0) and bulk_fits(spec) and _fits(profile, bulk):
                        out.append(bulk)
                        if xbox_fits(bulk) and _fits(profile, replace(bulk, xbox=True)):
                            out.append(replace(bulk, xbox=True))
    out.extend(gemv_specs(profile, p))
    if wgmma_available(profile) and p.m >= WGMMA_MIN_M:
        # 16-token tiles are not offered: at M = 16 they lost on every bench layer (entry 55)
        for tm in (2, 4) if p.m <= 32 else (4, 8, 16):
            # 192-feature tiles (three warpgroups, _wide3) where N is a multiple of 192
            for tn in (8, 12, 16) if p.n % 192 == 0 and tm <= 8 else (8, 16):
                for st in (2, 3, 4, 5, 6, 8):
                    # two blocks per SM where the sums leave registers for it (<= 64 a thread;
                    # not with three warpgroups)
                    for occ in (1, 2) if tm * tn <= 64 and tn != 12 else (1,):
                        spec = tail_spec(
                            p,
                            KernelSpec(
                                "sm90", p.qtype, p.act, gb, tm, tn, 4, st, occupancy=occ, threads=wgmma_threads(tn)
                            ),
                        )
                        if _fits(profile, spec):
                            out.append(spec)
                            # and in clusters of two where its plan halves the split tiles
                            two = _half_cluster_spec(profile, p, spec)
                            if two is not spec:
                                out.append(two)
    if p.m >= DEQUANT_CANDIDATE_MIN_M:
        out.append(dequant_spec(profile, p))
    return out


def plan(profile: DeviceProfile, p: Problem, spec: AnySpec | None = None) -> Plan:
    """Plan problem `p` on `profile`; `spec` (either kind) overrides the planner's route and
    kernel choice (tuning)."""
    if spec is None:
        return plan_of(profile, p, choose_spec(profile, p))
    return plan_spec(profile, p, spec)
