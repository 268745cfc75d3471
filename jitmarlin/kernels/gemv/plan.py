"""GEMV plan rules: decode (M <= 16) without cross-block partial sums on sm_80+, its column
blocks, clusters, spread and hybrid plans (GemvSpec). Pure."""

from __future__ import annotations

from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.plan_base import _fits, group_blocks
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import HYBRID_MAX_SHARERS, GemvSpec
from jitmarlin.weights.qtypes import get_qtype

# ---- decode without cross-block partial sums (sm_80+, M <= 16) ------------------------------------
# gemv.cu.j2: each warp streams one 64-column block's weights over a K range into registers, with
# no shared-memory pipeline and no barrier until the end; a column block's K-warps (and, on sm_90,
# the two blocks of a cluster) add their sums on chip, so no output tile is split over blocks that
# meet in L2 (the Stream-K kernel's ~2 us a call, tools/PERF.md entry 22). A block or cluster owns
# whole column blocks, so the plan needs N / 64 column blocks to fill the GPU in one wave: taken
# where the busiest plan of blocks fills at least GEMV_MIN_FILL of the SMs (H100, M = 1, entry 39),
# up to GEMV_PLAN_MAX_M rows (one n8 token block). The 16-row kernel (two token blocks, half the
# batch) is an autotuner candidate: 2-9% faster than Stream-K on small layers at M = 16 on H100
# when it was built (entry 39), 15-50% slower on every benchmark layer since the Stream-K kernel's
# later changes (entry 51: 8B o 9.8 against 8.2 us).
GEMV_MAX_M = 16
GEMV_PLAN_MAX_M = 8
GEMV_MIN_FILL = 0.7
# A whole-column-block plan whose kernel puts the group scale on the sums (GemvSpec.scale_sums; the
# hybrid kernel does not) is taken instead of a hybrid one down to this fill (H100, 70B qkv, 160
# column blocks as 80 blocks of two, fill 0.61: 17.5 us at M = 1 against 18.7 hybrid, 18.75
# against 20.3 at M = 8, bf16 alike; tools/PERF.md entry 47).
GEMV_SCALED_MIN_FILL = 0.6
# Column blocks a block of a whole-column-block plan. Eight (two K-warps each) give 70B gate_up's
# 896 a one-wave plan of 112 blocks, whose weight stream reads 5% faster than the round-robin
# spread over all 132 SMs (H100, bare reads 78.2 against 82.1 us; M = 1: 82.0 -> 80.2 us, M = 8:
# 86.3 -> 81.1; tools/PERF.md entry 61).
GEMV_COL_BLOCKS = (1, 2, 4, 8)
# Pair plans (GemvSpec.pair, sm_90+: 128-bit atomics): two plain blocks a column block that meet
# in the workspace, where a cluster of two adds its sums through distributed shared memory behind
# two cluster barriers. The planner takes them instead of the cluster plans on sm_90 up to
# GEMV_PAIR_MAX_M rows (H100, 8B o / 8B down, tools/PERF.md entry 59: 0.3-0.5 us faster at M = 1
# and 2, a tie at 4, 0.5-0.6 us slower at 8, where the exchanges of 8 rows' sums queue at L2's
# atomic units); on sm_120 they are autotuner candidates only (not measured).
GEMV_PAIR = True
GEMV_PAIR_MAX_M = 4


def _gemv_shape(p: Problem) -> tuple[int, int, int]:
    """(warps, unroll, max_m) of the gemv kernel for `p`: 16 warps a block (128 registers a
    thread); one n8 token block up to 8 rows, two up to 16; batches of four k16 rows (four
    16-byte loads a lane) for 4-bit codes (nvfp4: its four scale rows a batch fit in 128 registers
    since the e2m1 decode is a byte-table lookup, except in hybrid plans, hybrid_unroll; zero-point
    types with at most two scale and offset rows a batch), else two rows (8-bit codes keep more
    values live: ptxas spills at 128 with four), halved again for two token blocks."""
    max_m = 8 if p.m <= 8 else 16
    return 16, (4 if _gemv_batch4(p) else 2) // (max_m // 8), max_m


def _gemv_batch4(p: Problem) -> bool:
    """Four k16 rows a batch: 4-bit codes without zero points (but integer codes with group-16
    scales), or with zero points and at most one scale and one offset row a batch (groups of 64+
    or per channel; groups of 32 spill under NVRTC 12.9 and 13.0 for sm_80 / 89 / 90 / 100 / 120)."""
    gb = group_blocks(p)
    if get_qtype(p.qtype).zero_points:
        return get_qtype(p.qtype).bits == 4 and (gb <= 0 or gb >= 4)
    return _gemv_light(p) or _fp4_g16(p)


def _fp4_g16(p: Problem) -> bool:
    return get_qtype(p.qtype).kind == "float" and get_qtype(p.qtype).bits == 4 and group_blocks(p) == 1


def hybrid_unroll(p: Problem, unroll: int) -> int:
    """The batch of a hybrid plan (GemvSpec.spread == 2): `unroll`, halved for nvfp4 (its four
    scale rows a batch) and zero-point types (their offsets), which spill beside the hybrid's
    state (NVRTC 12.9 / 13, sm_80 / sm_86 / sm_90 / sm_120)."""
    heavy = _fp4_g16(p) or get_qtype(p.qtype).zero_points
    return unroll // 2 if heavy and unroll > 2 else unroll


def _gemv_light(p: Problem) -> bool:
    """4-bit codes without zero points, at most two scale rows a batch of four k16 rows."""
    q = get_qtype(p.qtype)
    gb = group_blocks(p)
    return q.bits == 4 and not q.zero_points and (gb <= 0 or gb >= 2)


def spread_clusters(profile: DeviceProfile, cluster: int, cols: int) -> int:
    """Clusters of a spread gemv plan: as many as the GPU holds at once, at most one a column block."""
    cap = profile.cluster_capacity(cluster) if cluster > 1 else profile.sms
    return max(1, min(cap, cols))


# Hybrid plans (GemvSpec.spread == 2): where a layer has between SMs and 2 x SMs column blocks,
# block b of G = SMs owns column block b and takes a share of the K range of one of the R =
# cols - G column blocks past the grid (shared by about G / R blocks, at most HYBRID_MAX_SHARERS:
# the finishers' loads a thread). A warp streams its part of the block's share first; the block's
# sums of it go to the workspace, each value tagged, while its warps still stream; at the end each
# of a shared column block's blocks adds some of its values from the sharers' slots (no fence, no
# counter in global memory). Every SM streams within 1 + R / G of the average instead of twice it
# (H100, 70B qkv, 160 column blocks: 18.65 us at M = 1 against 20.5 for 8-warp blocks two an SM;
# tools/PERF.md entry 41).


def hybrid_fits(profile: DeviceProfile, p: Problem, warps: int, unroll: int) -> str | None:
    """Why a hybrid gemv plan does not fit `p` on `profile` (None where it does)."""
    cols, g = p.n // 64, profile.sms
    if not g < cols < 2 * g:
        return f"it needs between {g} and {2 * g} 64-column blocks (one owned a block), N={p.n} has {cols}"
    if -(-g // (cols - g)) > HYBRID_MAX_SHARERS:
        return (
            f"each of the {cols - g} column blocks past the grid would be shared by more than "
            f"{HYBRID_MAX_SHARERS} blocks"
        )
    if p.k // (16 * unroll) < 2 * warps:
        return f"K={p.k} gives a warp less than two batches of its block's column block"
    return None


def _gemv_fill(profile: DeviceProfile, spec: GemvSpec, cols: int) -> float:
    """Column blocks an SM on average over the most any SM streams: 1.0 where every SM has the
    same share."""
    if spec.spread == 2:  # an owned column block plus at most 1 / (G // R) of a shared one
        busiest = 1 + 1 / (profile.sms // (cols - profile.sms))
    elif spec.spread:
        busiest = -(-cols // spread_clusters(profile, spec.cluster, cols)) / spec.cluster
    else:
        busiest = spec.col_blocks / spec.cluster * (spec.occupancy if cols > profile.sms else 1)
    return cols / profile.sms / busiest


def gemv_specs(profile: DeviceProfile, p: Problem) -> list[GemvSpec]:
    """Every gemv kernel for `p` on `profile` that fits the GPU in one wave, the fullest first
    (_gemv_fill; at equal fill the whole-column-block layouts before the spread ones, fewer column
    blocks a block first); [] where the kernel does not apply."""
    if profile.path != "sm80" or p.m > GEMV_MAX_M:
        return []
    warps, unroll, max_m = _gemv_shape(p)
    if p.k % (16 * unroll):
        return []
    cols = p.n // 64
    clusters = (1, 2) if profile.cc >= (9, 0) and profile.cluster_capacity(2) else (1,)
    gb = group_blocks(p)
    cands = []
    for cl in clusters:
        cap = profile.cluster_capacity(cl) * cl if cl > 1 else profile.sms
        for cb in GEMV_COL_BLOCKS:
            if -(-cols // cb) * cl <= cap:
                cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps // cb, unroll, cl, max_m))
        # Spread: the blocks the GPU holds share the column blocks evenly (a warp's run may cross
        # into the next one; at most two, so a block takes at most one column block a warp).
        # Light types only: with the crossing's pointers, the others spill under NVRTC for sm_120.
        # Runs of at least two batches: shorter ones leave warps idle. Not in clusters: on H100
        # (M = 1) clusters of 2 were 1.04-1.3x the time of single blocks (the gather through
        # distributed shared memory).
        g = spread_clusters(profile, cl, cols)
        if (
            cl == 1
            and _gemv_light(p)
            and cols > 1
            and -(-cols // g) <= warps * cl
            and cols // g * (p.k // (16 * unroll)) >= 2 * warps * cl
        ):
            cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps, unroll, cl, max_m, spread=True))
    # Pairs: two blocks a column block without a cluster, one block an SM (sm_90+).
    # (at most four column blocks a block: the workspace's pair slots, launch.PAIR_SLOT_WORDS, are
    # sized for that)
    for cb in [c for c in GEMV_COL_BLOCKS if c <= 4] if profile.cc >= (9, 0) else ():
        if -(-cols // cb) * 2 <= profile.sms:
            cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps // cb, unroll, 2, max_m, pair=True))
    hu = hybrid_unroll(p, unroll)
    if max_m == 8 and hybrid_fits(profile, p, warps, hu) is None:
        cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps, hu, 1, max_m, spread=2))
    # More column blocks than SMs (up to two per SM): 8-warp blocks, two resident an SM, one
    # column block each, so that every SM streams (H100, 70B qkv, 160 column blocks: 0.93x the
    # Stream-K kernel's time, where 16-warp blocks of two column blocks fill 80 SMs: 1.07x).
    if profile.sms < cols <= 2 * profile.sms:
        cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps // 2, warps // 2, unroll, 1, max_m, occupancy=2))
    ranked = [(_gemv_fill(profile, s, cols), s) for s in cands if _fits(profile, s)]
    # at equal fill a pair plan before the cluster plan of the same blocks where the planner takes
    # pairs (_pair_planned), after every other plan elsewhere
    pairs_first = _pair_planned(profile, p.m)
    ranked.sort(
        key=lambda t: (
            -round(t[0], 6),
            t[1].spread,
            t[1].occupancy,
            t[1].col_blocks,
            t[1].pair != pairs_first,
            t[1].cluster,
        )
    )
    return [s for _, s in ranked]


def _pair_planned(profile: DeviceProfile, m: int) -> bool:
    """Whether the planner itself takes pair gemv plans for `m` rows on `profile` (GEMV_PAIR, sm_90
    only, up to GEMV_PAIR_MAX_M rows)."""
    return GEMV_PAIR and profile.cc == (9, 0) and m <= GEMV_PAIR_MAX_M


def _gemv_choice(profile: DeviceProfile, p: Problem) -> GemvSpec | None:
    """The gemv kernel the planner takes for `p`, or None (Stream-K mma.sync kernel instead): the
    fullest plan of whole column blocks where it fills GEMV_MIN_FILL of the SMs (where a hybrid
    plan is the alternative and the kernel scales the sums, GEMV_SCALED_MIN_FILL), else the hybrid
    one, else the two-blocks-an-SM one, else the fullest spread plan where it fills GEMV_MIN_FILL."""
    specs = gemv_specs(profile, p) if p.m <= GEMV_PLAN_MAX_M else []
    if not _pair_planned(profile, p.m):
        specs = [s for s in specs if not s.pair]
    cols = p.n // 64
    whole = [s for s in specs if not s.spread and s.occupancy == 1]
    if whole and _gemv_fill(profile, whole[0], cols) >= GEMV_MIN_FILL:
        return whole[0]
    hybrid = next((s for s in specs if s.spread == 2), None)
    if hybrid and whole and whole[0].scale_sums and _gemv_fill(profile, whole[0], cols) >= GEMV_SCALED_MIN_FILL:
        return whole[0]
    if hybrid:
        return hybrid
    two = next((s for s in specs if s.occupancy == 2), None)
    if two:
        return two
    # Hybrid plans ahead of two 8-warp blocks an SM: all 16 warps of every SM stream, with runs of
    # nearly one length (H100, 70B qkv M = 1/4/8: 18.65 / 19.2 / 20.25 us against 20.5 / 21.0 /
    # 21.8; bf16 19.1 against 21.15 at M = 1).
    # Spread plans only where no plan of whole column blocks fits: their runs differ in length
    # from block to block, and on H100 at M = 1 they lost to the whole-column-block plans (8B
    # gate_up 24.8 vs 23.5 us, 70B qkv 23.9 vs 20.5; on the same partition, 8B qkv and 70B o,
    # 0.4-0.5 us more) but beat Stream-K on 70B gate_up (896 column blocks, 6-7 a block: 82.4 vs
    # 91.1; tools/PERF.md entry 40).
    spread = [s for s in specs if s.spread == 1]
    if spread and _gemv_fill(profile, spread[0], cols) >= GEMV_MIN_FILL:
        return spread[0]
    return None
