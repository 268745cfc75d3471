"""wgmma plan rules (sm_90a, from WGMMA_MIN_M rows): tile shapes, pipeline depths, occupancy,
tall unsplit and 128 x 192 tiles. Their plans' geometry is the Stream-K one (mma/plan.py). Pure."""

from __future__ import annotations

from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.mma.plan import HALF_TILES_MIN_FILL, _half_cluster_spec, plan_spec
from jitmarlin.kernels.plan_base import _fits, group_blocks
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import KernelSpec, wgmma_threads


def _wgmma_specs(profile: DeviceProfile, p: Problem) -> list[KernelSpec]:
    """wgmma kernels for `p` in order of preference (tools/sweep on H100, tools/PERF.md): at
    M <= 64, one tile of 32 tokens (M <= 32) or 64, two blocks per SM and 4 stages where each
    block still gets enough K-steps (wgmma_occupancy; always with 32 tokens), 256 features wide
    where it gets many more (WGMMA_WIDE_MIN_STEPS);
    with too few K-steps for two blocks, 128 wide, one block, 8 stages (its warpgroups overlap
    dequant and wgmmas; WGMMA_SMALL_DEPTH). Up to 128 rows, 128 x 128 tiles, 4 stages; above,
    256 x 128, 4 stages (128 x 128 with 6 stages where 256 x 128 tiles leave a block fewer than
    WGMMA_TALL_MIN_STEPS K-steps, or, up to 256 rows, WGMMA_TALL_MIN_STEPS_256). With one
    64-feature slab per warpgroup and >= 4 stages the kernel dequantises one step while the
    wgmmas of the step before run (sweeps, session 4: M = 128 0.60-0.91x the time of 128 x 256
    tiles; M = 256 0.74-0.86x the time of 3 stages). Ahead of them, from 129 to 512 rows, 128 x
    192 tiles on three warpgroups where N and the plan suit them (_wide3).
    """
    if p.m <= 64:
        tm = 2 if p.m <= 32 else 4
        steps = _wgmma_steps_per_block(profile, p, 64, 128, 2)
        if wgmma_occupancy(profile, p) == 1 and tm == 4:
            tiles = [(tm, 8, WGMMA_SMALL_DEPTH, 1), (tm, 16, WGMMA_SMALL_DEPTH, 1)]
        elif steps >= WGMMA_WIDE_MIN_STEPS:
            tiles = [(tm, 16, 4, 2), (tm, 8, 4, 2)]
        else:
            tiles = [(tm, 8, 4, 2), (tm, 16, 4, 2)]
    elif p.m <= 128:
        tiles = [(8, 8, 4, 1), (8, 16, 4, 1), (4, 16, 4, 1)]
    else:
        bar = WGMMA_TALL_MIN_STEPS_256 if p.m <= 256 else WGMMA_TALL_MIN_STEPS
        tall = _wgmma_steps_per_block(profile, p, 256, 128) >= bar or _tall_unsplit(profile, p)
        tiles = [(16, 8, 4, 1), (8, 16, 4, 1), (8, 8, 4, 1)] if tall else [(8, 8, 6, 1), (16, 8, 4, 1)]
    out = [wide3] if (wide3 := _wide3(profile, p)) else []  # (above 128 rows only)
    for tm, tn, depth, occ in tiles:
        spec = _deepest_wgmma(profile, p, tm, tn, depth, occ) if occ > 1 else None
        spec = spec or _deepest_wgmma(profile, p, tm, tn, depth, 1)
        if spec:
            out.append(spec)
    return out


def _deepest_wgmma(
    profile: DeviceProfile, p: Problem, tm: int, tn: int, depth: int, occupancy: int
) -> KernelSpec | None:
    """The wgmma tile (tm, tn) with the deepest pipeline, at most `depth`, that fits `profile`
    with `occupancy` blocks per SM; two blocks only with at least 4 stages each."""
    for stages in range(depth, 3 if occupancy > 1 else 1, -1):
        spec = KernelSpec(
            "sm90", p.qtype, p.act, group_blocks(p), tm, tn, 4, stages, occupancy=occupancy, threads=wgmma_threads(tn)
        )
        if _fits(profile, spec):
            return spec
    return None


# Two wgmma blocks per SM at M <= 64: while one block dequantises its weights the other's
# warpgroup MMAs run. H100, M = 64 (tools/PERF.md entries 11 and 20), with every stage loaded by
# TMA: two blocks win from 27 K-steps of a 64 x 128 x 64 tile a block (70B o, 31 steps: 26.6 vs
# 29.0 us; 70B qkv 33.1 vs 34.6; 8B down, 27 steps, a tie) and lose at 12 (8B qkv 15.7 vs 14.5,
# 8B o 13.6 vs 11.2). 256-feature tiles (two slabs a warpgroup) win from 54 steps (70B down 75.7
# vs 78.4 us, 70B gate_up 135.6 vs 148.4; 8B gate_up, 54 steps, a tie) and lose at 39.
WGMMA_OCC2_MIN_STEPS = 20
WGMMA_WIDE_MIN_STEPS = 48
# Below that the two-block 64 x 128 kernel. Session 13 (tools/PERF.md entry 34) gave 70B o and
# qkv (31 and 39 steps) one block of 64 x 256 tiles with 6 stages whose warpgroups split each
# step's wgmmas in two halves (wgmma.cu.j2, SPLIT_MMA); on the later kernels the autotuner timed
# the two-block 64 x 128 kernel 6-11% faster there (entry 54: 70B o 21.9 against 23.8 us, 70B qkv
# 27.0 against 28.7), so the planner no longer takes the split kernel (the tuner still tries it).
# One block where two would get too few steps (8B qkv, 8B o): 8 stages, 5-7% faster than the 5
# of session 4's sweeps (entry 54: 8B o 10.04 against 10.73 us, 8B qkv 12.80 against 13.57).
# Not with 32-token tiles (M <= 32), whose steps are half the MMAs: two blocks there too (entry
# 55, M = 32: 8B qkv 11.13 against 11.81 us for one block of 8 stages, 8B o a tie).
WGMMA_SMALL_DEPTH = 8
# Above 128 rows, 256 x 128 tiles need this many K-steps per block (SMs x blocks); with fewer,
# each tile is split over several blocks whose 128 KB partial sums dominate, and 128 x 128 tiles
# with 6 stages win (H100/H200 sweeps, M = 256: 8B o, 15.5 steps, 0.90-0.97x the time;
# tools/PERF.md entry 19). Up to 256 rows (one 256-row tile: 128-row tiles dequantise each
# weight tile only twice) the bar is higher (H100 sweeps, entry 42; M = 256, 128 x 128 x 6
# against 256 x 128 x 4): 8B qkv (23 steps) 0.94 / 0.95x (fp16 / bf16), 70B o (62) 0.94x on
# average, 8B down (54) a tie (0.92-1.01x over six passes); 256 x 128 keeps its lead from 78
# steps (70B qkv: 1.01 / 1.11x). At M = 512 / 1024, 128-row tiles lose from 46 / 62 steps
# (8B qkv 1.02x, 8B o 1.13x).
WGMMA_TALL_MIN_STEPS = 20
WGMMA_TALL_MIN_STEPS_256 = 70


# Up to 256 rows, 256 x 128 tiles below that bar too where their plan leaves no tile split over
# a chain of blocks: whole tiles a block, or a half-tile plan in clusters of two (_half_tiles,
# _half_cluster_spec: two blocks a tile, each half its K-steps, the sums traded through
# distributed shared memory), with at least TALL_UNSPLIT_MIN_STEPS K-steps a block. The bar above
# was measured against Stream-K plans of those tiles. H100, us, fp16 / bf16, 128 x 128 tiles ->
# 256 x 128 (tools/PERF.md entry 74, two passes each):
#   70B o (8192 x 8192), M = 256, halves, 64 steps   55.3, 55.4 -> 50.5, 51.8 / 58.8, 58.9 -> 52.5, 53.7
#   the same, M = 160                               69.3, 63.7 -> 47.3, 48.3 / 70.7, 64.2 -> 44.6, 46.4
#   K x N = 4096 x 16384, M = 256, whole, 64 steps  55.5, 58.9 -> 49.7, 50.4 / 59.3, 58.6 -> 48.3, 49.1
#   6144 x 8192, M = 256, halves, 48 steps          37.7, 40.6 -> 39.8, 40.3 / 42.6, 43.0 -> 39.6, 41.3
#   4096 x 8192, M = 160, halves, 32 steps          33.5, 33.2 -> 34.2, 34.2 / 33.8, 33.1 -> 34.1, 34.2
TALL_UNSPLIT = True
TALL_UNSPLIT_MIN_STEPS = 48


def _tall_unsplit(profile: DeviceProfile, p: Problem) -> bool:
    """Whether 256 x 128 wgmma tiles on `p` (at most 256 rows) run whole tiles a block or a
    half-tile plan in clusters of two, with at least TALL_UNSPLIT_MIN_STEPS K-steps a block."""
    if not TALL_UNSPLIT or p.m > 256:
        return False
    spec = _deepest_wgmma(profile, p, 16, 8, 4, 1)
    if spec is None:
        return False
    spec = _half_cluster_spec(profile, p, spec)
    pl = plan_spec(profile, p, spec)
    whole = not pl.whole and pl.iters % pl.k_tiles == 0
    return (spec.cluster == 2 or whole) and pl.iters >= TALL_UNSPLIT_MIN_STEPS


# 128 x 192 tiles (tn 12: three warpgroups of one 64-feature slab each, 384 threads) from 129 to
# WIDE3_MAX_M rows where N is a multiple of 192 and their plan leaves no tile split over a chain
# of blocks: a half-tile plan in clusters of two, or whole tiles a block, on at least
# HALF_TILES_MIN_FILL x SMs blocks. 8B qkv (N = 6144) at M = 256 has 96 tiles of 128 x 128 and 48
# of 256 x 128, neither a plan without chains on 132 SMs; in 128 x 192 tiles it has 64, two
# halves each on 128 blocks. H100, us, fp16 / bf16, planner (128 x 128 x 6, Stream-K) -> 128 x
# 192 x 6 (tools/PERF.md entry 78; runs 2 and 3 of session 39):
#   M = 192 (halves)   24.14, 24.55 -> 22.83 / 24.97, 25.28 -> 23.58
#   M = 256 (halves)   25.70, 25.62, 26.06, 26.35 -> 23.94, 24.12, 24.38
#                      / 26.37, 26.35, 26.33, 26.64 -> 24.33, 24.53, 23.95
#   M = 512 (whole)    44.64, 46.58 -> 42.71 / 46.01, 47.87 -> 43.47
# 4 and 7 stages were slower than 6 at M = 256 (5 mixed; at M = 192 5 stages 23.56 / 24.30). With
# a short last row block (KernelSpec.tail) the 6-stage kernel in clusters spills a register under
# the 168 a thread that 384 threads leave; those take 5 stages, which do not. At M = 1024 / 4096
# the 128-token tiles lose to the planner's 256 x 128 (1.03-1.17x), which dequantise each weight
# half as often. Measured for 4-bit integer codes in groups of 128 only (other types and groups of
# 64 spill a few registers in clusters).
WIDE3 = True
WIDE3_MAX_M = 512
WIDE3_STAGES = 6
WIDE3_TAIL_STAGES = 5
WIDE3_QTYPES = ("uint4b8", "uint4")


def _wide3(profile: DeviceProfile, p: Problem) -> KernelSpec | None:
    """The 128 x 192 wgmma kernel for `p` (above), in clusters of two where its plan is a
    half-tile plan, or None."""
    if not WIDE3 or not 128 < p.m <= WIDE3_MAX_M or p.qtype not in WIDE3_QTYPES or p.group_size != 128 or p.n % 192:
        return None
    spec = _deepest_wgmma(profile, p, 8, 12, WIDE3_STAGES if p.m % 128 == 0 else WIDE3_TAIL_STAGES, 1)
    if spec is None:
        return None
    spec = _half_cluster_spec(profile, p, spec)
    pl = plan_spec(profile, p, spec)
    whole = not pl.whole and pl.iters % pl.k_tiles == 0
    if (spec.cluster == 2 or whole) and pl.grid >= HALF_TILES_MIN_FILL * profile.sms:
        return spec
    return None


def _wgmma_steps_per_block(profile: DeviceProfile, p: Problem, tokens: int, features: int, occupancy: int = 1) -> float:
    """64-deep K-steps of (tokens x features) wgmma tiles each of SMs x occupancy blocks gets."""
    return -(-p.m // tokens) * -(-p.n // features) * (p.k // 64) / (profile.sms * occupancy)


def wgmma_occupancy(profile: DeviceProfile, p: Problem) -> int:
    """Blocks per SM for the M <= 64 wgmma kernel: 2 when each of 2 x SMs blocks still gets
    WGMMA_OCC2_MIN_STEPS K-steps of a 64 x 128 x 64 tile, else 1."""
    return 2 if _wgmma_steps_per_block(profile, p, 64, 128, 2) >= WGMMA_OCC2_MIN_STEPS else 1
