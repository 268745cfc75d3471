"""The planner: DeviceProfile + problem shape -> Plan (a spec + launch geometry).

Two routes: below a per-architecture M threshold the fused mixed-precision kernel (KernelSpec);
at or above it, dequantise the weight into a dense workspace and run one cuBLAS GEMM
(DequantSpec). Pure functions of frozen values: no GPU, no I/O. Prewarm, inspect and the tests
call it for any profile.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.kernels.problem import Problem
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.weights.qtypes import ACT_DTYPES, GROUP_SIZES, get_qtype
from jitmarlin.kernels.spec import HYBRID_MAX_SHARERS, AnySpec, DequantSpec, GemvSpec, KernelSpec, wgmma_threads

# Quant types each code path implements. Every type is dequantised with integer bit tricks and
# packed half arithmetic (sm_53+), so the FP8/FP4 formats, whose own MMAs need sm_89+/sm_100+,
# run on every generation here.
ALL_QTYPES = ("uint4b8", "uint4", "uint8b128", "uint8", "float8_e4m3fn", "nvfp4", "mxfp4")
PATH_QTYPES = {"sm70": ALL_QTYPES, "sm75": ALL_QTYPES, "sm80": ALL_QTYPES, "sm90": ALL_QTYPES}
# Activation dtypes each path implements (Volta and Turing tensor cores have no bf16).
PATH_ACTS = {"sm70": ("float16",), "sm75": ("float16",), "sm80": ("float16", "bfloat16"),
             "sm90": ("float16", "bfloat16")}
PATH_MAX_STAGES = {"sm70": 2, "sm75": 2, "sm80": 8, "sm90": 8}
# m16 blocks per tile: sm70 keeps 8 accumulators per n8 sub-tile (the m8n8k4 layout), so at most
# two m16 blocks fit in registers; larger M takes more M chunks.
PATH_MAX_TM = {"sm70": 2, "sm75": 4, "sm80": 4}

# Hopper (sm_90) runs the warpgroup (wgmma) kernel from this many rows of x: its tensor cores
# take the activations as a 16..256-wide operand and read them from shared memory themselves,
# where the mma.sync kernel spends issue slots on every fragment (and from 17 rows keeps only
# 2 stages in its registers). H100, fp16 and bf16 (tools/PERF.md entry 55): at M = 20 and 32
# the 32-token tiles take 0.77-0.87x the mma.sync kernel's time on all eight bench layers (fp16
# M = 32: 8B down 22.0 -> 17.3 us, 70B gate_up 123 -> 95), at M = 48 the 64-token ones
# 0.74-0.88x; at M = 16 the 16-token tiles lose (1.0-1.5x: too little work a K-step for its
# barrier and TMA round).
WGMMA_MIN_M = 17


def wgmma_available(profile: DeviceProfile) -> bool:
    """The GPU has wgmma (sm_90 / sm_90a: H100, H200, GH200)."""
    return profile.cc == (9, 0)


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
    out = [wide3] if (wide3 := _wide3(profile, p)) else []   # (above 128 rows only)
    for tm, tn, depth, occ in tiles:
        spec = _deepest_wgmma(profile, p, tm, tn, depth, occ) if occ > 1 else None
        spec = spec or _deepest_wgmma(profile, p, tm, tn, depth, 1)
        if spec:
            out.append(spec)
    return out


def _deepest_wgmma(profile: DeviceProfile, p: Problem, tm: int, tn: int, depth: int,
                   occupancy: int) -> KernelSpec | None:
    """The wgmma tile (tm, tn) with the deepest pipeline, at most `depth`, that fits `profile`
    with `occupancy` blocks per SM; two blocks only with at least 4 stages each."""
    for stages in range(depth, 3 if occupancy > 1 else 1, -1):
        spec = KernelSpec("sm90", p.qtype, p.act, group_blocks(p), tm, tn, 4, stages, occupancy=occupancy,
                          threads=wgmma_threads(tn))
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
    pl = plan(profile, p, spec)
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
    if (not WIDE3 or not 128 < p.m <= WIDE3_MAX_M or p.qtype not in WIDE3_QTYPES or p.group_size != 128
            or p.n % 192):
        return None
    spec = _deepest_wgmma(profile, p, 8, 12, WIDE3_STAGES if p.m % 128 == 0 else WIDE3_TAIL_STAGES, 1)
    if spec is None:
        return None
    spec = _half_cluster_spec(profile, p, spec)
    pl = plan(profile, p, spec)
    whole = not pl.whole and pl.iters % pl.k_tiles == 0
    if (spec.cluster == 2 or whole) and pl.grid >= HALF_TILES_MIN_FILL * profile.sms:
        return spec
    return None


def _wgmma_steps_per_block(profile: DeviceProfile, p: Problem, tokens: int, features: int,
                           occupancy: int = 1) -> float:
    """64-deep K-steps of (tokens x features) wgmma tiles each of SMs x occupancy blocks gets."""
    return -(-p.m // tokens) * -(-p.n // features) * (p.k // 64) / (profile.sms * occupancy)


def wgmma_occupancy(profile: DeviceProfile, p: Problem) -> int:
    """Blocks per SM for the M <= 64 wgmma kernel: 2 when each of 2 x SMs blocks still gets
    WGMMA_OCC2_MIN_STEPS K-steps of a 64 x 128 x 64 tile, else 1."""
    return 2 if _wgmma_steps_per_block(profile, p, 64, 128, 2) >= WGMMA_OCC2_MIN_STEPS else 1


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


HYBRID_ROUTE_MIN_STEPS = 128   # see dequant_route


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
    if not (p.m >= dequant_min_m(profile) or (
            p.m >= DEQUANT_CANDIDATE_MIN_M and 2 * p.m * p.k > profile.l2_bytes)):
        return False
    if wgmma_available(profile) and p.m >= WGMMA_MIN_M:
        spec = choose_fused_spec(profile, p)
        _, iters = _geometry(profile, p, spec)
        k_tiles = p.k // spec.tile_k
        if iters % k_tiles == 0 or (_hybrid(profile, p, spec) and k_tiles >= HYBRID_ROUTE_MIN_STEPS):
            return False
    return True


@dataclass(frozen=True)
class Plan:
    """A spec plus how to launch it.

    Fused route (KernelSpec): `grid` blocks, each taking `iters` consecutive K-tiles of the
    striped (Stream-K) work list of m_chunks x n_tiles x k_tiles tiles (those properties are the
    fused route's only). A hybrid plan (wgmma kernel, `whole` > 0): block b first takes tiles
    b whole .. b whole + whole - 1 whole, and its `iters` K-tiles are striped over the tiles past
    grid x whole. Dequant route (DequantSpec): `grid` blocks of the dequantisation kernel, iters
    1, no shared memory; the GEMM itself is cuBLAS's.
    """

    spec: AnySpec
    problem: Problem
    grid: int
    iters: int
    smem_bytes: int
    whole: int = 0

    @property
    def route(self) -> str:
        """'fused' or 'dequant'."""
        return self.spec.route

    @property
    def m_chunks(self) -> int:
        return -(-self.problem.m // self.spec.tile_m)

    @property
    def n_tiles(self) -> int:
        return -(-self.problem.n // self.spec.tile_n)

    @property
    def k_tiles(self) -> int:
        return self.problem.k // self.spec.tile_k

    @property
    def total_iters(self) -> int:
        return self.m_chunks * self.n_tiles * self.k_tiles

    def block_ranges(self, b: int) -> list[tuple[int, int]]:
        """Fused route: the [start, end) runs of the work list (tile-major, K-tiles inner) that
        block b takes, in order, as the kernels deal them; empty runs left out."""
        kt, total = self.k_tiles, self.total_iters
        runs = [(b * self.whole * kt, (b + 1) * self.whole * kt)] if self.whole else []
        sk0 = self.whole * self.grid * kt
        runs.append((min(sk0 + b * self.iters, total), min(sk0 + (b + 1) * self.iters, total)))
        return [(s, e) for s, e in runs if s < e]


def check_problem(profile: DeviceProfile, p: Problem) -> None:
    """Raise a clear error when `p` cannot run on `profile`."""
    path = profile.path
    q = get_qtype(p.qtype)
    if p.act not in ACT_DTYPES:
        raise InputError(f"activation dtype must be float16 or bfloat16, got {p.act}")
    if p.act not in PATH_ACTS[path]:
        raise UnsupportedError(
            f"{p.act} activations are not supported on {profile.arch} ({profile.name}): "
            f"its tensor cores take {' or '.join(PATH_ACTS[path])} only"
        )
    if p.qtype not in PATH_QTYPES[path]:
        raise UnsupportedError(
            f"quant type {p.qtype} is not implemented on the {path} path ({profile.arch}); "
            f"supported there: {', '.join(PATH_QTYPES[path])}"
        )
    if p.group_size not in GROUP_SIZES + (16,):
        raise UnsupportedError(
            f"group_size must be one of {GROUP_SIZES} (-1 = per output channel), got {p.group_size}"
        )
    if q.fixed_group and p.group_size != q.fixed_group:
        raise InputError(f"{q.name} uses groups of {q.fixed_group}, got {p.group_size}")
    if p.m < 1:
        raise InputError(f"M (rows of x) must be >= 1, got {p.m}")
    if p.n % 64:
        raise InputError(f"N (out_features) must be a multiple of 64, got {p.n}")
    if p.k % 64:
        raise InputError(f"K (in_features) must be a multiple of 64, got {p.k}")
    if p.group_size > 0 and p.k % p.group_size:
        raise InputError(f"K={p.k} is not a multiple of group_size={p.group_size}")


# Above this many weight bytes per SM a layer is "big": wide 256x256 weight tiles with a short
# pipeline win; below it, 128 x 256 (N x K) tiles with a deep pipeline (more bytes in flight per
# SM and fewer blocks sharing each output tile). Measured with tools/sweep on H100
# (tools/PERF.md).
BIG_LAYER_BYTES_PER_SM = 192 * 1024


def max_tm(path: str, p: Problem) -> int:
    """Most m16 blocks per tile: register-staged paths also hold a stage of 8-bit codes (twice
    the chunks of 4-bit ones) in registers, which leaves room for two m16 blocks only."""
    if path == "sm75" and get_qtype(p.qtype).bits == 8:
        return 2
    return PATH_MAX_TM[path]


def group_blocks(p: Problem) -> int:
    """The spec's group_blocks: -1 per-channel (scales applied to the fp32 sums), 0 per-channel
    with zero points (scales and offsets applied in the K loop), else group_size / 16."""
    if p.group_size > 0:
        return p.group_size // 16
    return 0 if get_qtype(p.qtype).zero_points else -1


def _preferences(profile: DeviceProfile, p: Problem) -> list[tuple[int, int, int]]:
    """(tn, tk, max stages) in order of preference for problem `p`."""
    big = p.n * p.k * get_qtype(p.qtype).bits // 8 >= BIG_LAYER_BYTES_PER_SM * profile.sms
    if profile.path != "sm80":
        # Register-staged pipelines hold a stage's chunks in registers: K tiles of 128 keep that
        # small next to the accumulators (256-wide ones spill with group-32 scales).
        return [(8, 8, 2), (16, 8, 2), (4, 8, 2), (16, 4, 2), (8, 4, 2), (4, 16, 2)]
    if p.m <= 16:  # decode: stream weights, one m16 block
        wide, narrow = (16, 16, 3), (8, 16, 8)
        rest = [(16, 8, 6), (8, 8, 8), (4, 16, 8), (4, 8, 8), (16, 4, 8), (8, 4, 8)]
    else:
        wide, narrow = (16, 16, 2), (8, 16, 4)
        rest = [(16, 8, 4), (8, 8, 4), (4, 16, 4), (4, 8, 4), (16, 4, 4), (8, 4, 4)]
    return ([wide, narrow] if big else [narrow, wide]) + rest


def _deepest_fused(profile: DeviceProfile, p: Problem, tm: int, tn: int, tk: int, max_stages: int,
                   cluster: int = 1) -> KernelSpec | None:
    """The mma.sync kernel (profile's path) with that tile and the deepest pipeline, at most
    `max_stages`, that fits `profile`; None if none does."""
    for stages in range(min(max_stages, PATH_MAX_STAGES[profile.path]), 1, -1):
        spec = KernelSpec(profile.path, p.qtype, p.act, group_blocks(p), tm, tn, tk, stages, cluster=cluster)
        if _fits(profile, spec):
            return spec
    return None


def _fits(profile: DeviceProfile, spec: KernelSpec) -> bool:
    """`spec` is a buildable kernel and its shared memory fits `profile`."""
    try:
        spec.check()
    except ValueError:
        return False
    return (spec.smem_bytes() <= profile.smem_per_block
            and (getattr(spec, "occupancy", 1) == 1 or spec.smem_per_sm() <= profile.smem_per_sm))


# ---- decode with thread-block clusters (sm_90+) ---------------------------------------------------
# Stream-K splits output tiles over blocks anywhere on the GPU, and their partial sums meet in L2
# (store, fence, count, wait, load): ~2 us a call at decode on H100 (tools/PERF.md entry 22).
# Where whole tiles can be dealt to clusters with (almost) the busiest block's load of the
# Stream-K plan, the blocks that share a tile sit in one cluster and add their sums through
# distributed shared memory instead (reduce/cluster.cuh). A cluster of C blocks takes T whole
# tiles and runs Stream-K over their T x k_tiles steps with C x iters = T x k_tiles, so block b's
# range is still [b iters, (b + 1) iters) and no tile crosses a cluster. 64-wide tiles are left
# out: their small pipeline steps stream weights ~1.35x slower (entry 29).
# Off by default (entry 29, H100): with the same 128-wide tile the cluster reduction beats the
# global one (70B down M = 1: 51.9 vs 57.5 us), but those layers fit clusters only with 128-wide
# tiles, which stream slower than Stream-K's 256-wide ones by more than that (70B down 45.8 us,
# gate_up 90.6 vs 101.7, o 17.5 vs 18.5). The kernels stay buildable for the autotuner and tests.
CLUSTER_DECODE = False
CLUSTER_SIZES = (2, 4, 8)
CLUSTER_MAX_LOAD = 1.03   # a cluster plan's busiest block against Stream-K's, in weight bytes
CLUSTER_MAX_M = 16        # decode (one m16 block)


def cluster_tiles(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> int:
    """Whole tiles each cluster of `spec.cluster` blocks takes: the fewest that spread the tiles
    over the clusters the GPU holds at once (profile.cluster_capacity, else SMs / size) and split
    into `cluster` equal block ranges."""
    c = spec.cluster
    tiles = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n)
    k_tiles = p.k // spec.tile_k
    t = -(-tiles // (profile.cluster_capacity(c) or max(1, profile.sms // c)))
    while (t * k_tiles) % c:
        t += 1
    return t


def _geometry(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> tuple[int, int]:
    """(grid, iters) of the fused kernel `spec` on `p`."""
    if isinstance(spec, GemvSpec):   # a block (a cluster) per spec.col_blocks column blocks, or spread
        if spec.spread == 2:
            return profile.sms, 0
        if spec.spread:
            return spread_clusters(profile, spec.cluster, p.n // 64) * spec.cluster, 0
        return -(-(p.n // 64) // spec.col_blocks) * spec.cluster, 0
    m_chunks = -(-p.m // spec.tile_m)
    n_tiles = -(-p.n // spec.tile_n)
    k_tiles = p.k // spec.tile_k
    total = m_chunks * n_tiles * k_tiles
    if spec.cluster > 1 and not spec.wgmma:
        t = cluster_tiles(profile, p, spec)
        return -(-(m_chunks * n_tiles) // t) * spec.cluster, t * k_tiles // spec.cluster
    if getattr(spec, "whole", False):   # whole tiles a block, as few a block as the GPU allows
        per = -(-(m_chunks * n_tiles) // (profile.sms * spec.occupancy))
        return -(-(m_chunks * n_tiles) // per), per * k_tiles
    # `occupancy` blocks per SM; every block takes an equal run of the striped work list so that
    # all SMs stream weights for the whole kernel. All blocks are resident (the shared memory of
    # `occupancy` blocks fits an SM, launch bounds cap the registers): blocks wait on one another
    # when they share an output tile.
    grid = max(1, min(profile.sms * spec.occupancy, total))
    iters = -(-total // grid)
    whole = _whole_tiles(profile, spec, m_chunks * n_tiles, n_tiles, k_tiles, iters)
    if whole:
        return whole
    halves = _half_tiles(profile, spec, m_chunks * n_tiles, n_tiles, k_tiles, iters)
    if halves and not halves[2]:    # (with whole tiles first it is a hybrid plan: _hybrid)
        return halves[0], halves[1]
    return -(-total // iters), iters


# Whole output tiles a block (no tile split over blocks), for the wgmma kernel, where that costs
# the busiest block at most this many times the K-steps of the Stream-K plan: the tile counts of
# large M are often multiples of 128 (132-SM H100: 128 blocks, 1.03x the steps). No block then
# stores or waits for 128 KB of partial sums, and the blocks run their tiles in step: at any time
# they read the same K-tiles of x and of the weights, which L2 serves to all of them, where
# Stream-K's ranges start at scattered K offsets and read both again and again.
WHOLE_TILES_MAX_LOAD = 1.035


def tiles_in_step(per: int, n_tiles: int) -> bool:
    """Whether blocks of `per` consecutive tiles of the work list (row blocks x n_tiles weight
    columns, row-major) work on the same weight columns at the same time in every row block, so
    that a column's K-tiles come from DRAM once and L2 serves them to all its row blocks: `per`
    divides n_tiles, or n_tiles divides `per`. (70B gate_up at M = 4096: 7168 tiles of 448
    columns dealt 55 a block read the weights again for each of the 16 row blocks; PERF.md 57.)"""
    return n_tiles % per == 0 or per % n_tiles == 0


def _whole_tiles(profile: DeviceProfile, spec: KernelSpec, tiles: int, n_tiles: int, k_tiles: int,
                 stream_iters: int) -> tuple[int, int] | None:
    """(grid, iters) with whole tiles a block, or None where that loads the busiest block more
    than WHOLE_TILES_MAX_LOAD x `stream_iters` (or the kernel is not the wgmma one). Of the tile
    counts a block within that load, the fewest that keep the blocks in step (tiles_in_step),
    else the fewest."""
    if not spec.wgmma or spec.cluster > 1:
        return None
    per = -(-tiles // (profile.sms * spec.occupancy))
    most = int(WHOLE_TILES_MAX_LOAD * stream_iters) // k_tiles
    if per > most:
        return None
    per = next((q for q in range(per, most + 1) if tiles_in_step(q, n_tiles)), per)
    return -(-tiles // per), per * k_tiles


# Half tiles a block for the wgmma kernel: where the tiles cannot be dealt whole, every tile of
# the last wave (or every tile, with no whole wave) goes to two blocks, the first and the second
# half of its K-steps (iters = k_tiles / 2), on a grid of G <= SMs blocks such that the tiles are
# G x (whole + 1/2). Both halves of a tile then start and end together, so one partial-sum
# exchange a split tile is all that is left of the reduction: no block lies inside a tile with
# partners on both sides, no chain of contributors, and the whole tiles run in step. The price is
# the busiest block's extra K-steps over the even Stream-K share (and SMs left idle). H100, fp16,
# us, Stream-K or hybrid plan -> half tiles (tools/PERF.md entry 73, two passes):
#   8B qkv M = 1024 (+2 steps)    83.6, 85.5 -> 79.4, 78.6     8B down M = 256 (+3)  53.4, 53.3 -> 49.7, 50.4
#   70B down M = 256 (+6)        173.1, 173.9 -> 165.4, 172.7   70B qkv M = 1024 (+9) 242.3, 242.5 -> 247.2, 247.2
# so the planner takes them up to HALF_TILES_MAX_EXTRA K-steps over the Stream-K share (and at
# most HALF_TILES_MAX_LOAD x it).
HALF_TILES = True
HALF_TILES_MAX_EXTRA = 6
HALF_TILES_MAX_LOAD = 1.035
HALF_TILES_MIN_FILL = 0.9   # blocks against SMs: below this the idle SMs cost more than the split
HALF_TILES_MIN_TM = 8       # tiles of at least 128 tokens (the ones measured)


def _half_tiles(profile: DeviceProfile, spec: KernelSpec, tiles: int, n_tiles: int, k_tiles: int,
                stream_iters: int) -> tuple[int, int, int] | None:
    """(grid, iters, whole) of a half-tile plan of `spec` (above), or None: not the wgmma kernel at
    one block an SM on tiles of 128 or 256 tokens, an odd K-tile count, no grid between HALF_TILES_MIN_FILL x SMs and SMs that
    makes the tiles a whole number of waves and a half, whole tiles that would not run in step
    (tiles_in_step) or need a kernel without the hybrid loop, or a busiest block over
    `stream_iters` (the Stream-K share) by more than HALF_TILES_MAX_EXTRA steps or
    HALF_TILES_MAX_LOAD x."""
    if not HALF_TILES or not spec.wgmma or spec.occupancy != 1 or spec.tm < HALF_TILES_MIN_TM or k_tiles % 2:
        return None     # (measured on 128- and 256-token tiles only)
    for grid in range(profile.sms, int(HALF_TILES_MIN_FILL * profile.sms) - 1, -1):
        waves, odd = divmod(2 * tiles, grid)
        if odd or waves % 2 == 0:
            continue
        whole = waves // 2
        if whole and not (spec.hybrid_loop and tiles_in_step(whole, n_tiles)):
            continue
        load = whole * k_tiles + k_tiles // 2
        if load - stream_iters > HALF_TILES_MAX_EXTRA or load > HALF_TILES_MAX_LOAD * stream_iters:
            return None     # (smaller grids only load the blocks more)
        return grid, k_tiles // 2, whole
    return None


# A half-tile plan's two blocks of a split tile are 2j and 2j + 1: launched as clusters of two,
# they trade the sums each writes out through distributed shared memory instead of L2
# (KernelSpec.cluster = 2, wgmma.cu.j2). tools/probe/dsmem.py on H100 (66 clusters at once):
# half of a 256 x 128 tile each way in 2.9 us against 5.4 for the whole tile through L2 (store,
# fence, count, wait, load); 1.9 against 3.4 for 128 x 128 (PERF.md entry 73).
HALF_TILES_CLUSTER = True


def is_half_plan(p: Problem, spec: KernelSpec, grid: int, iters: int, whole: int) -> bool:
    """Whether (grid, iters, whole) deals the tiles past the whole ones as two halves each, to the
    blocks 2j and 2j + 1 (whether a half-tile plan or a Stream-K plan that happens to)."""
    tiles = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n)
    k_tiles = p.k // spec.tile_k
    return 2 * iters == k_tiles and 2 * tiles == grid * (2 * whole + 1)


# The wgmma kernel reads a last row block short of its tile in x boxes of just its rows
# (KernelSpec.tail): H100, fp16, us, boxes past x's last row -> within x (tools/PERF.md entry 75):
#   K x N = 4096 x 8192 (128 x 128 tiles)  M = 136 39.1 -> 28.9, 144 37.9 -> 29.2, 168 35.2 -> 28.3
#   4096 x 16384 (256 x 128)               M = 136 60.4 -> 48.4, 144 58.3 -> 51.8, 152 56.7 -> 49.6
# (the probe read real rows past M, which costs power the kernel's zeroed rows do not). Kernels
# for M a multiple of the tile are built without it, so theirs stay what was measured.
TAIL_BOXES = True


def tail_spec(p: Problem, spec: AnySpec) -> AnySpec:
    """`spec` built for p's short last row block (KernelSpec.tail) where it is a wgmma kernel and
    M is not a multiple of its tile, else `spec`."""
    if TAIL_BOXES and getattr(spec, "wgmma", False) and p.m % spec.tile_m and not spec.tail:
        return replace(spec, tail=True)
    return spec


def _half_cluster_spec(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec:
    """`spec` in clusters of two where its plan is a half-tile plan whose clusters the GPU holds
    at once, else `spec`."""
    if (not HALF_TILES_CLUSTER or not spec.wgmma or spec.cluster > 1 or spec.occupancy != 1
            or spec.tm < HALF_TILES_MIN_TM or not profile.cluster_capacity(2)):
        return spec
    pl = plan(profile, p, spec)
    two = replace(spec, cluster=2)
    if (is_half_plan(p, spec, pl.grid, pl.iters, pl.whole) and pl.grid // 2 <= profile.cluster_capacity(2)
            and _fits(profile, two)):
        return two
    return spec


# Hybrid plans for the wgmma kernel (one block an SM) where the plan would otherwise be Stream-K:
# more than one wave of tiles, too far from a whole number of tiles a block for _whole_tiles.
# Stream-K splits nearly every tile over two blocks whose ranges start at scattered K offsets
# (entry 30: 6-14% slower than whole tiles at M = 1024). A hybrid plan runs the full waves as
# whole tiles on every SM, in step (tiles_in_step), and stripes only the last wave's tiles over
# all blocks: the busiest block gets the same share, and only those tiles have partial sums, at
# the end of the kernel. H100, M = 1024 (PERF.md entry 57): 70B qkv and 8B qkv 0-3% faster.
# Not in place of whole-tile plans on 128 of 132 SMs (their idle SMs cost nothing at the power
# cap and their blocks are in step; hybrid plans were 2-12% slower there), and not up to 256
# rows (8B gate_up, 224 tiles: 3-5% slower).
HYBRID_PLANS = True
HYBRID_MIN_M = 512


def _hybrid(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> tuple[int, int, int] | None:
    """(grid, iters, whole) of the hybrid plan of `spec` on `p`, or None where the planner keeps
    the plain one: a kernel not built for them (KernelSpec.hybrid_loop), fewer than HYBRID_MIN_M
    rows, at most one wave of tiles, whole tiles a block that would not keep the blocks in step,
    or a whole-tile plan (_whole_tiles) at hand."""
    if not (HYBRID_PLANS and getattr(spec, "hybrid_loop", False) and p.m >= HYBRID_MIN_M):
        return None
    n_tiles = -(-p.n // spec.tile_n)
    tiles = -(-p.m // spec.tile_m) * n_tiles
    k_tiles = p.k // spec.tile_k
    whole, rest = divmod(tiles, profile.sms)
    stream = -(-tiles * k_tiles // profile.sms)
    if (whole == 0 or rest == 0 or not tiles_in_step(whole, n_tiles)
            or _whole_tiles(profile, spec, tiles, n_tiles, k_tiles, stream)):
        return None
    halves = _half_tiles(profile, spec, tiles, n_tiles, k_tiles, stream)
    if halves and halves[2]:
        return halves
    return profile.sms, -(-rest * k_tiles // profile.sms), whole


def _block_bytes(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> int:
    """Weight bytes the busiest block of `spec`'s plan streams."""
    return _geometry(profile, p, spec)[1] * spec.tile_n * spec.tile_k * spec.bits // 8


def _cluster_spec(profile: DeviceProfile, p: Problem, base: KernelSpec) -> KernelSpec | None:
    """The decode kernel with clusters whose busiest block streams at most CLUSTER_MAX_LOAD x
    the weight bytes of `base`'s Stream-K plan (the lightest such; ties in preference order), or
    None."""
    if (not CLUSTER_DECODE or not profile.clusters or profile.cc < (9, 0) or base.path != "sm80"
            or base.cluster > 1 or p.m > CLUSTER_MAX_M):
        return None
    limit = CLUSTER_MAX_LOAD * _block_bytes(profile, p, base)
    best, best_bytes = None, None
    for tn, tk, max_stages in _preferences(profile, p):
        if tn < 8 or p.k % (16 * tk):
            continue
        for c in CLUSTER_SIZES:
            if not profile.cluster_capacity(c):
                continue
            spec = _deepest_fused(profile, p, base.tm, tn, tk, max_stages, cluster=c)
            if spec is None:
                continue
            b = _block_bytes(profile, p, spec)
            if b <= limit and (best_bytes is None or b < best_bytes):
                best, best_bytes = spec, b
    return best


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
    16-byte loads a lane) for 4-bit codes without zero points and with at most two scale rows a
    batch, else two rows (8-bit codes, offsets, or nvfp4's scale row per k16 row keep more values
    live: ptxas spills at 128 with four), halved again for two token blocks."""
    max_m = 8 if p.m <= 8 else 16
    return 16, (4 if _gemv_light(p) else 2) // (max_m // 8), max_m


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
        return (f"each of the {cols - g} column blocks past the grid would be shared by more than "
                f"{HYBRID_MAX_SHARERS} blocks")
    if p.k // (16 * unroll) < 2 * warps:
        return f"K={p.k} gives a warp less than two batches of its block's column block"
    return None


def _gemv_fill(profile: DeviceProfile, spec: GemvSpec, cols: int) -> float:
    """Column blocks an SM on average over the most any SM streams: 1.0 where every SM has the
    same share."""
    if spec.spread == 2:   # an owned column block plus at most 1 / (G // R) of a shared one
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
        if (cl == 1 and _gemv_light(p) and cols > 1 and -(-cols // g) <= warps * cl
                and cols // g * (p.k // (16 * unroll)) >= 2 * warps * cl):
            cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps, unroll, cl, max_m, spread=True))
    # Pairs: two blocks a column block without a cluster, one block an SM (sm_90+).
    # (at most four column blocks a block: the workspace's pair slots, launch.PAIR_SLOT_WORDS, are
    # sized for that)
    for cb in [c for c in GEMV_COL_BLOCKS if c <= 4] if profile.cc >= (9, 0) else ():
        if -(-cols // cb) * 2 <= profile.sms:
            cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps // cb, unroll, 2, max_m, pair=True))
    if max_m == 8 and hybrid_fits(profile, p, warps, unroll) is None:
        cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps, warps, unroll, 1, max_m, spread=2))
    # More column blocks than SMs (up to two per SM): 8-warp blocks, two resident an SM, one
    # column block each, so that every SM streams (H100, 70B qkv, 160 column blocks: 0.93x the
    # Stream-K kernel's time, where 16-warp blocks of two column blocks fill 80 SMs: 1.07x).
    if profile.sms < cols <= 2 * profile.sms:
        cands.append(GemvSpec(profile.path, p.qtype, p.act, gb, warps // 2, warps // 2, unroll, 1, max_m,
                              occupancy=2))
    ranked = [(_gemv_fill(profile, s, cols), s) for s in cands if _fits(profile, s)]
    # at equal fill a pair plan before the cluster plan of the same blocks where the planner takes
    # pairs (_pair_planned), after every other plan elsewhere
    pairs_first = _pair_planned(profile, p.m)
    ranked.sort(key=lambda t: (-round(t[0], 6), t[1].spread, t[1].occupancy, t[1].col_blocks,
                               t[1].pair != pairs_first, t[1].cluster))
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


def dequant_spec(profile: DeviceProfile, p: Problem) -> DequantSpec:
    """The dequantisation kernel of the large-M route for problem `p` on `profile`."""
    check_problem(profile, p)
    return DequantSpec(profile.path, p.qtype, p.act, group_blocks(p))


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
    tm = min(max_tm(profile.path, p), -(-p.m // 16))
    fitting = [s for tn, tk, max_stages in _preferences(profile, p) if p.k % (16 * tk) == 0
               and (s := _deepest_fused(profile, p, tm, tn, tk, max_stages))]
    if not fitting:
        raise UnsupportedError(
            f"no tile configuration fits {profile.name} ({profile.smem_per_block} bytes of shared "
            f"memory per block) for M={p.m} N={p.n} K={p.k}"
        )
    # Prefer a tile width that divides N (no idle columns); keep preference order otherwise.
    spec = next((s for s in fitting if p.n % s.tile_n == 0), fitting[0])
    return bulk_spec(profile, _cluster_spec(profile, p, spec) or _whole_decode(profile, p, spec)
                     or _narrow_deep_decode(profile, p, spec) or _late_spec(profile, p, spec))


# TMA weight boxes at decode (KernelSpec.bulk): on sm_90 the mma.sync kernel takes a stage's weights
# as one tensor-map box that one thread issues, instead of every thread working out and issuing its
# cp.asyncs (about half of a step's ~150 fetch instructions a warp, all issued between the block
# barrier and the step's first MMA). H200 at M = 16 (tools/PERF.md entry 88, with the raw-code
# kernels' offsets MMAs in four chains): where a stage's weights are at least BULK_MIN_STAGE_BYTES
# (256-wide tiles of K 256, 128-wide of K 512), 2-6% faster on four bench layers and 0-2% on two,
# in both dtypes; the 16 KB stages of 8B o and qkv 2-3% slower. One m16 row block on sm_90 only
# (other GPUs are not measured).
BULK_DECODE = True
BULK_MIN_STAGE_BYTES = 32 * 1024


def bulk_fits(spec: KernelSpec) -> bool:
    """Whether `spec` can take its weights by TMA boxes (KernelSpec.bulk's limits)."""
    return (spec.path == "sm80" and spec.cluster == 1 and spec.tm == 1
            and spec.tile_n * spec.bits // 4 <= 256)


# x by TMA boxes too (KernelSpec.xbox), for bf16 only: H200 at M = 12 and 16, A/B in one process
# (tools/PERF.md entry 93), the six layers with boxed weights 0.5-4% faster in bf16, while fp16's
# were up to 2.6% slower on three of them (70B down, 70B gate_up, 8B gate_up): its shorter step
# gains less from the fetch instructions x's boxes save than it loses waiting on one barrier for x
# and the weights.
XBOX_ACTS = ("bfloat16",)


def xbox_fits(spec: KernelSpec) -> bool:
    """Whether `spec` (with bulk) can take x by TMA boxes too (KernelSpec.xbox's limits)."""
    return spec.bulk and spec.tm == 1 and spec.tk % 4 == 0


def bulk_spec(profile: DeviceProfile, spec: KernelSpec) -> KernelSpec:
    """`spec` with TMA weight boxes (and x's, in bf16) where the rules above take them, else `spec`."""
    if (not BULK_DECODE or profile.cc != (9, 0) or spec.route != "fused" or spec.wgmma
            or not bulk_fits(spec) or spec.tile_k * spec.tile_n * spec.bits // 8 < BULK_MIN_STAGE_BYTES):
        return spec
    bulk = replace(spec, bulk=True)
    if not _fits(profile, bulk):
        return spec
    xbox = replace(bulk, xbox=True)
    return xbox if spec.act in XBOX_ACTS and xbox_fits(bulk) and _fits(profile, xbox) else bulk


# Narrow, deep tiles at decode: where a Stream-K plan of 256-wide tiles splits each tile over
# NARROW_DEEP_MIN_SHARERS blocks or more (few column tiles, a long K), tiles half as wide and twice
# as deep (128 x 512, NARROW_DEEP_STAGES stages) halve the blocks a tile and the partial sums they
# trade, for the same steps a block. On H100 at M = 12 and 16 (entry 80) that is Llama-3-8B down
# (eight blocks a tile): 3-5% faster in both dtypes; at four sharers or fewer (70B down, o, qkv) it
# was even or up to 4% slower. sm_90 only (other GPUs are not measured).
NARROW_DEEP_DECODE = True
NARROW_DEEP_MIN_SHARERS = 8
NARROW_DEEP_STAGES = 3


def _narrow_deep_decode(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec | None:
    """The 128 x 512 Stream-K tile where the rule above takes it, else None."""
    if (not NARROW_DEEP_DECODE or profile.cc != (9, 0) or spec.path != "sm80" or spec.tm != 1
            or spec.tn != 16 or spec.tk != 16 or spec.cluster > 1 or spec.whole or p.k % 512):
        return None
    iters = _geometry(profile, p, spec)[1]
    if p.k // spec.tile_k < NARROW_DEEP_MIN_SHARERS * iters:
        return None
    deep = replace(spec, tn=8, tk=32, stages=NARROW_DEEP_STAGES)
    return deep if _fits(profile, deep) and p.n % deep.tile_n == 0 else None


# Late publish (KernelSpec.late) for decode plans of short runs: a block that shares a split tile
# and goes on to another one holds its whole block at a device-scope fence at the switch; with
# `late`, one thread fences after the next step while the warps compute. On H100 at M = 16 (the
# only GPU measured, tools/PERF.md entries 51 and 58) that took 0.2-0.6 us off the plans of 6-10
# steps a block (8B and 70B qkv) and cost 0.3-0.6 us on 8B gate_up's 14, so the planner takes it
# up to LATE_MAX_ITERS steps a block, on sm_90 only (other GPUs are not measured), where some
# block continues past a split tile.
LATE_PUBLISH = True
LATE_MAX_ITERS = 12


def late_contributors(p: Problem, spec: KernelSpec, grid: int, iters: int) -> int:
    """Blocks of a Stream-K plan (`grid` blocks of `iters` K-steps) that share a split tile and go on
    to another tile afterwards: the ones KernelSpec.late changes."""
    k_tiles = p.k // spec.tile_k
    total = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n) * k_tiles
    count = 0
    for b in range(1, grid):
        first, end = b * iters, min((b + 1) * iters, total)
        # a split tile's contributor that starts inside it and ends past it
        if first < end and first % k_tiles and (first // k_tiles + 1) * k_tiles < end:
            count += 1
    return count


# Whole tiles at decode: where every block of the mma.sync kernel can take one whole output tile
# (no tile split over blocks, so no partial sums meet in L2: ~2 us a call at M = 16, tools/PERF.md
# entry 51) of the planner's width or a narrower one, for at most WHOLE_DECODE_MAX_LOAD x the
# busiest Stream-K block's weight bytes, and the tile is at most WHOLE_DECODE_MAX_STEPS K-steps
# deep, the plan is whole tiles (KernelSpec.whole: the same kernel as that tile's Stream-K plan).
# On H100 at M = 9 and 16 (entry 58): N = 28672 (112 tiles of 256 columns over 132 SMs, 1.14x the
# bytes) K = 2048 10-12% faster, K = 4096 (Llama-3-8B gate_up) 2-5%, but K = 8192 and 14336 mixed
# in fp16 and 2-4% slower in bf16, whose heavier dequantisation misses the idle SMs once streaming
# outweighs the sums; Llama-3-8B qkv on 96 tiles of 64 columns (1.33x the bytes) 2-5% faster
# (entries 51, 53 and 58). sm_90 only (other GPUs are not measured).
WHOLE_DECODE = True
WHOLE_DECODE_MAX_LOAD = 1.35
WHOLE_DECODE_MAX_STEPS = 16
# A whole plan of 64-wide tiles takes K-tiles of 512 (tk 32) in WHOLE_DECODE_TK32_STAGES stages
# where K allows: a 64 x 256 step is too little work for its fixed cost (a block barrier, the
# fetch, a scale run's flush, the pipeline's refill), and halving the steps takes 5-7% off
# Llama-3-8B qkv at M = 12 and 16 in both dtypes (entry 79: 10.2-10.6 -> 9.6-9.9 us). Wider tiles
# with K-tiles of 512 fit 2-4 stages and were slower or even on the other seven layers. Six stages
# (the most that fit 227 KB) take another 2-3.5% off it in both dtypes (entry 80).
WHOLE_DECODE_TK32 = True
WHOLE_DECODE_TK32_STAGES = 6


def _whole_decode(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec | None:
    """A plan of one whole tile a block where the rule above takes it (the planner's tile, else a
    narrower one of the same depth that divides N), else None."""
    if (not WHOLE_DECODE or profile.cc != (9, 0) or spec.path != "sm80" or spec.tm != 1
            or spec.cluster > 1 or spec.whole):
        return None
    k_tiles = p.k // spec.tile_k
    iters = _geometry(profile, p, spec)[1]
    if iters % k_tiles == 0 or k_tiles > WHOLE_DECODE_MAX_STEPS:
        return None      # (Stream-K already deals whole tiles, or the tiles are deep)
    busiest = iters * spec.tile_n              # Stream-K's busiest block, in K-step columns
    for tn in (spec.tn, 8, 4):
        if tn > spec.tn or (tn < spec.tn and p.n % (16 * tn)):
            continue
        cand = spec if tn == spec.tn else _deepest_fused(profile, p, 1, tn, spec.tk, PATH_MAX_STAGES["sm80"])
        if cand is None or -(-p.n // cand.tile_n) > profile.sms:
            continue
        if k_tiles * cand.tile_n <= WHOLE_DECODE_MAX_LOAD * busiest:
            if WHOLE_DECODE_TK32 and cand.tn == 4 and p.k % 512 == 0:
                deep = replace(cand, tk=32, stages=WHOLE_DECODE_TK32_STAGES, whole=True)
                if _fits(profile, deep):
                    return deep
            return replace(cand, whole=True)
    return None


def _late_spec(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec:
    """`spec` with late publishing where the rule above takes it, else `spec`."""
    if (not LATE_PUBLISH or profile.cc != (9, 0) or spec.path != "sm80" or spec.tm != 1
            or spec.cluster > 1 or spec.whole):
        return spec
    grid, iters = _geometry(profile, p, spec)
    if iters > LATE_MAX_ITERS or not late_contributors(p, spec, grid, iters):
        return spec
    return replace(spec, late=True)


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
    tm = min(max_tm(path, p), -(-p.m // 16))
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
                        spec = tail_spec(p, KernelSpec("sm90", p.qtype, p.act, gb, tm, tn, 4, st, occupancy=occ,
                                                       threads=wgmma_threads(tn)))
                        if _fits(profile, spec):
                            out.append(spec)
                            # and in clusters of two where its plan halves the split tiles
                            two = _half_cluster_spec(profile, p, spec)
                            if two is not spec:
                                out.append(two)
    if p.m >= DEQUANT_CANDIDATE_MIN_M:
        out.append(dequant_spec(profile, p))
    return out


def _check_spec_matches(spec: AnySpec, p: Problem) -> None:
    if (spec.qtype, spec.act, spec.group_blocks) != (p.qtype, p.act, group_blocks(p)):
        raise InputError(f"{spec.name} is not a kernel for {p.qtype} x {p.act} with group "
                         f"size {p.group_size}")


def plan(profile: DeviceProfile, p: Problem, spec: AnySpec | None = None) -> Plan:
    """Plan problem `p` on `profile`; `spec` (either kind) overrides the planner's route and
    kernel choice (tuning)."""
    if spec is None:
        spec = choose_spec(profile, p)
    else:
        check_problem(profile, p)
        spec.check()
        # (the code path may differ: the CPU emulator runs sm70/sm75 kernels on any profile)
        _check_spec_matches(spec, p)
        if isinstance(spec, GemvSpec):
            if p.m > spec.max_m:
                raise InputError(f"{spec.name} takes at most {spec.max_m} rows of x, got M={p.m}")
            why = hybrid_fits(profile, p, spec.warps, spec.unroll) if spec.spread == 2 else None
            if why:
                raise UnsupportedError(f"{spec.name}: a hybrid plan does not fit {profile.name}: {why}")
            if spec.spread == 1 and -(-(p.n // 64) // spread_clusters(profile, spec.cluster, p.n // 64)) > spec.threads // 32 * spec.cluster:
                raise UnsupportedError(f"{spec.name}: a spread plan takes at most one 64-column block a warp "
                                       f"of a cluster; N={p.n} on {profile.name} needs more")
            if profile.path != "sm80":
                raise UnsupportedError(f"{spec.name} needs the sm80 path (sm_80+); {profile.name} is {profile.arch}")
        if getattr(spec, "bulk", False) and profile.cc < (9, 0):
            raise UnsupportedError(f"{spec.name} takes its weights by TMA (bulk), which needs sm_90 or newer; "
                                   f"{profile.name} is {profile.arch}")
        if spec.wgmma and not wgmma_available(profile):
            raise UnsupportedError(f"{spec.name} is a wgmma (sm_90a) kernel; {profile.name} is {profile.arch}")
        if getattr(spec, "cluster", 1) > 1 and profile.cc < (9, 0):
            what = "128-bit atomic exchanges (a pair plan)" if getattr(spec, "pair", False) else "thread-block clusters"
            raise UnsupportedError(f"{spec.name} uses {what}, which need sm_90 or newer; "
                                   f"{profile.name} is {profile.arch}")
        if spec.route == "fused":
            if p.k % spec.tile_k:
                raise InputError(f"K={p.k} is not a multiple of the kernel's K tile {spec.tile_k}")
            if not _fits(profile, spec):
                raise UnsupportedError(f"{spec.name} needs more shared memory than {profile.name} has "
                                       f"({spec.occupancy} block(s) of {spec.smem_bytes()} bytes per SM)")
    if spec.route == "dequant":
        return Plan(spec=spec, problem=p, grid=spec.grid(p.n, p.k), iters=1, smem_bytes=0)
    hybrid = _hybrid(profile, p, spec)
    grid, iters, whole = hybrid or (*_geometry(profile, p, spec), 0)
    if spec.wgmma and spec.cluster > 1 and not (
            is_half_plan(p, spec, grid, iters, whole) and grid // 2 <= profile.cluster_capacity(2)):
        raise UnsupportedError(f"{spec.name} runs half-tile plans only (two blocks a split tile, in clusters "
                               f"of two); M={p.m} N={p.n} K={p.k} on {profile.name} has none")
    return Plan(spec=spec, problem=p, grid=grid, iters=iters, smem_bytes=spec.smem_bytes(), whole=whole)
