"""What every family's plan rules share: the Plan value (a spec plus its launch geometry), the
problem checks, each code path's quant types, activations and pipeline limits, and the fused
tile helpers (shared memory fit, deepest pipeline). Pure: no GPU, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import AnySpec, KernelSpec
from jitmarlin.weights.qtypes import ACT_DTYPES, GROUP_SIZES, get_qtype

# Quant types each code path implements. Every type is dequantised with integer bit tricks and
# packed half arithmetic (sm_53+), so the FP8/FP4 formats, whose own MMAs need sm_89+/sm_100+,
# run on every generation here.
ALL_QTYPES = ("uint4b8", "uint4", "uint8b128", "uint8", "float8_e4m3fn", "nvfp4", "mxfp4")
PATH_QTYPES = {"sm70": ALL_QTYPES, "sm75": ALL_QTYPES, "sm80": ALL_QTYPES, "sm90": ALL_QTYPES}
# Activation dtypes each path implements (Volta and Turing tensor cores have no bf16).
PATH_ACTS = {
    "sm70": ("float16",),
    "sm75": ("float16",),
    "sm80": ("float16", "bfloat16"),
    "sm90": ("float16", "bfloat16"),
}
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
        raise UnsupportedError(f"group_size must be one of {GROUP_SIZES} (-1 = per output channel), got {p.group_size}")
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


# NVRTC (12.9 and 13.0 alike) compiles sm_100 and later through its NVVM 20 front end, sm_90 and
# earlier through NVVM 7, and the mma.sync kernel's NVVM 20 PTX needs more registers: with four m16
# blocks (128 fp32 sums and 32 A-fragment registers a thread) every planned kernel spills 100-112
# bytes under NVRTC 13.0 on sm_100 and sm_120, and one of 88 spills 4 bytes on sm_100 under 12.9,
# where the same kernels' NVVM 7 PTX for sm_89 takes 253 registers and no spills. ptxas 13.0
# assembles 12.9's sm_120 PTX without spills: the extra registers come from the front end. With
# three blocks the bench plans' kernels (every quant type) take at most 252 registers on sm_100 and
# 248 on sm_120 under either version. (The MoE kernel's tiles of four compile clean there.)
NVVM20_CC = (10, 0)
NVVM20_MAX_TM = 3


def plan_tm(profile: DeviceProfile, p: Problem) -> int:
    """m16 blocks a tile of the mma.sync kernel for `p`: all of M up to max_tm. Where NVVM20_MAX_TM
    caps it, the fewest M chunks of at most that many blocks, the blocks spread evenly over them
    (M = 64: two chunks of 32 rows, not 48 + 16: the same weight passes, fewer padded MMAs)."""
    blocks = -(-p.m // 16)
    cap = max_tm(profile.path, p)
    if profile.cc < NVVM20_CC or cap <= NVVM20_MAX_TM:
        return min(cap, blocks)
    return -(-blocks // -(-blocks // NVVM20_MAX_TM))


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


def _deepest_fused(
    profile: DeviceProfile, p: Problem, tm: int, tn: int, tk: int, max_stages: int, cluster: int = 1
) -> KernelSpec | None:
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
    return spec.smem_bytes() <= profile.smem_per_block and (
        getattr(spec, "occupancy", 1) == 1 or spec.smem_per_sm() <= profile.smem_per_sm
    )


def _check_spec_matches(spec: AnySpec, p: Problem) -> None:
    if (spec.qtype, spec.act, spec.group_blocks) != (p.qtype, p.act, group_blocks(p)):
        raise InputError(f"{spec.name} is not a kernel for {p.qtype} x {p.act} with group size {p.group_size}")
