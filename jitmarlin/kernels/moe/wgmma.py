"""The MoE family's Hopper kind: grouped expert GEMMs on warpgroup MMAs (templates/moe_wgmma.cu.j2,
sm_90a). Spec, plan rules (pure), template glue and the weights' tensor maps.

As in the dense wgmma kernel the tensor cores compute out^T = W x^T: an expert's dequantised
weights are the register operand (64 features a warpgroup slab), the routed rows of x the
shared-memory operand (the wgmma N side: one row block of 32, 64 or 128 rows). A block takes one
row block (one expert's) by one column tile over the whole of K, like moe.cu.j2, so the up
stage's activation stays fused; the down stage may split K (MoEPlan.splits, a launch argument:
fp32 partial sums that the combine kernel adds, as moe.cu.j2's). x rows are
gathered by per-thread cp.async into the 128-byte swizzled layout; the expert's packed weights
and scales arrive as TMA boxes of 2-D maps over all experts' stacked arrays (expert e's rows
start at e * rows-an-expert).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import ClassVar

import numpy as np

from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels import render as _render
from jitmarlin.kernels.moe.spec import check_stage
from jitmarlin.kernels.plan_base import group_blocks, wgmma_available
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import THREADS, KernelSpec, _Tiles, _WeightFormat, register_kind
from jitmarlin.weights.qtypes import ACT_DTYPES, QTYPES

# Whether plan_moe takes this kind where its caller does not choose (no wgmma=, gemv=, tm or
# tiles): None follows the rule below; True / False take it always / never on sm_90 GPUs
# (tools/bench --moe-kind and the GPU tests set it for the whole process).
WGMMA_DEFAULT: bool | None = None
# The rule: on sm_90, from WGMMA_MIN_ROWS rows an expert under an even routing. Timed on an H100
# against the mma.sync kind (tools/PERF.md e111): 1.27-1.36x faster at 16 rows an expert, 1.4-2.1x
# from 64; under 16 rows (9-15 unmeasured) the mma.sync kind, up to 8 the GEMV kind.
WGMMA_RULE = True
WGMMA_MIN_ROWS = 16
# The planner's A-operand layouts (tools/PERF.md e132, H100): sorted_h in every plan (2-6% a
# whole block), sorted_x from SORTED_X_MIN_ROWS rows an expert (5-9% more at Mixtral's 64+ rows;
# at 16 rows an expert its row copy costs more than its TMA boxes save). Off until the GPU tests
# of these layouts (tests/test_moe_wgmma.py -k sorted) have passed on a GPU: the CPU emulator
# checks the kernels, not the host's tensor maps of the sorted copies.
SORTED_LAYOUTS = False
SORTED_X_MIN_ROWS = 64


@dataclass(frozen=True)
class MoEWgmmaSpec(_Tiles, _WeightFormat):
    """One grouped expert GEMM on warpgroup MMAs (sm_90a).

    path: 'sm90'; qtype, act, group_blocks: as KernelSpec's. tm: routed rows a block in m16 units
    (2, 4, 8, 16: 32 to 256 rows, 256 by override only; the routing pads each expert's list to
    them); tn: 16 tn weight
    columns a block (8: one 64-feature slab a warpgroup, whose dequant overlaps the previous
    step's wgmmas from 4 stages; 16: two slabs, 4-bit codes only); stages: pipeline depth of
    64-deep K steps; occupancy: blocks an SM (2: at most 128 registers a thread). stage,
    activation: as MoESpec's. tile_major: blocks walk the row blocks of one column tile before
    the next tile (an expert's row blocks read a weight tile side by side, from L2 after the
    first) instead of every column tile of one row block first; names end in `t`. sorted_h (both
    stages of a plan alike): the up stage writes H in the aligned list's row order and the down
    stage reads a row block's H rows as one TMA box instead of gathering them by pair id with
    per-thread copies; H then holds the list's padded rows (MoEPlan.sorted_rows); names end in `h`.
    sorted_x (up stage only): x's rows are first copied into the aligned list's row order by the
    module's `_permute` kernel (padding rows zero), and the up stage reads a row block's rows as
    one TMA box, as the sorted_h down stage reads H; names end in `x`.
    """

    route: ClassVar[str] = "moe"

    path: str
    qtype: str
    act: str
    group_blocks: int
    tm: int
    tn: int
    stages: int
    stage: str = "up"
    activation: str = "silu"
    occupancy: int = 1
    tile_major: bool = False
    sorted_h: bool = False
    sorted_x: bool = False

    @property
    def tk(self) -> int:
        return 4  # one 128-byte swizzled x row a stage

    @property
    def threads(self) -> int:
        return THREADS  # two warpgroups

    @property
    def slabs(self) -> int:
        """64-feature slabs a warpgroup."""
        return self.tn // 8

    @property
    def gated(self) -> bool:
        return self.stage == "up"

    @property
    def act_kernel(self) -> bool:
        return False  # no K splits: the activation is always fused

    @property
    def wgmma(self) -> bool:
        return True  # built for sm_90a (jitmarlin.kernels.source.target_arch)

    @property
    def cluster(self) -> int:
        return 1

    @property
    def pdl(self) -> bool:
        return False

    def dense(self) -> KernelSpec:
        """The dense wgmma kernel of this tile (its partials are this kernel's)."""
        return KernelSpec(
            "sm90", self.qtype, self.act, self.group_blocks, self.tm, self.tn, 4, self.stages, occupancy=self.occupancy
        )

    @property
    def scale_rows(self) -> int:
        """Scale rows a stage (one per group starting in the 64-deep K step), offsets as many again."""
        if self.group_blocks < 0:
            return 0
        rows = 1 if self.group_blocks == 0 else max(1, 4 // self.group_blocks)
        return rows * (2 if self.affine else 1)

    def stage_bytes(self) -> int:
        """x rows, packed weights and scale rows of one stage, on 1024-byte boundaries (the swizzle
        period)."""
        a = self.tile_m * 64 * 2
        b = 64 * self.tile_n * self.bits // 8
        s = self.scale_rows * self.tile_n * 2
        return -(-(a + b + s) // 1024) * 1024

    def epilogue_bytes(self) -> int:
        """The staged output tile: rows of the features written (half the columns when gated), 16
        bytes of padding a row."""
        out_n = self.tile_n // 2 if self.gated else self.tile_n
        return self.tile_m * (out_n * 2 + 16)

    def smem_bytes(self) -> int:
        """Pipeline (or staged outputs), one 8-byte mbarrier a stage (rounded to 16 bytes), the
        tile's pair ids and router weights (8 bytes a row), and 1 KB of slack to align the stages."""
        used = -(-max(self.stages * self.stage_bytes(), self.epilogue_bytes()) // 16) * 16
        return 1024 + used + -(-8 * self.stages // 16) * 16 + 8 * self.tile_m

    def smem_per_sm(self) -> int:
        return self.occupancy * (self.smem_bytes() + 1024)

    def check(self) -> None:
        """Raise ValueError when the fields do not describe a buildable kernel."""
        self.check_types(("sm90",), "MoE wgmma")
        if self.tm not in (2, 4, 8, 16):
            raise ValueError(f"tm must be 2, 4, 8 or 16 (row blocks of 32, 64, 128, 256), got {self.tm}")
        if self.tn not in (8, 16):
            raise ValueError(f"tn must be 8 or 16 (one or two 64-feature slabs a warpgroup), got {self.tn}")
        if 16 * self.tn * self.bits // 4 > 256:
            raise ValueError(
                "a stage's weights are one TMA box of at most 256 8-byte words a k16 row "
                f"(tn={self.tn} with {self.bits}-bit codes has {16 * self.tn * self.bits // 4})"
            )
        if self.occupancy not in (1, 2):
            raise ValueError(f"occupancy must be 1 or 2, got {self.occupancy}")
        sums = self.slabs * 8 * self.tm
        if sums > (64 if self.occupancy == 2 else 128):
            raise ValueError(f"wgmma tile too large: {sums} fp32 sums a thread with {self.occupancy} block(s) an SM")
        if not 2 <= self.stages <= 8:
            raise ValueError("the MoE wgmma kernel uses 2..8 stages")
        if self.group_blocks > 0 and 4 % self.group_blocks and self.group_blocks % 4:
            raise ValueError("group size and the 64-deep K step must divide one another")
        if self.group_blocks < 0 and self.affine:
            raise ValueError("zero-point types apply per-channel scales in the K loop (group_blocks 0)")
        for flag in ("tile_major", "sorted_h", "sorted_x"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if self.sorted_x and not self.gated:
            raise ValueError("sorted_x is a layout of the up stage's x (the down stage reads H: sorted_h)")
        check_stage(self.stage, self.activation)

    @property
    def tma_x(self) -> bool:
        """The A rows (x or H) come as TMA boxes of a row-sorted copy (sorted_x, sorted_h)."""
        return self.sorted_x if self.gated else self.sorted_h

    def canonical(self) -> str:
        d = asdict(self)
        for flag in ("tile_major", "sorted_h", "sorted_x"):  # (the defaults' keys and tuned records stay as they were)
            if not d[flag]:
                del d[flag]
        d["family"] = "moe_wgmma"
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def name(self) -> str:
        """Kernel symbol: jm_moe_wgmma_up_silu_sm90_uint4b8_f16_g128_m4n8s4o2 (tile_major: ...o2t)."""
        what = f"up_{self.activation}" if self.stage == "up" else "down"
        return (
            f"jm_moe_wgmma_{what}_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"
            f"_m{self.tm}n{self.tn}s{self.stages}"
            + (f"o{self.occupancy}" if self.occupancy > 1 else "")
            + ("t" if self.tile_major else "")
            + ("h" if self.sorted_h else "")
            + ("x" if self.sorted_x else "")
        )


def render_moe_wgmma(spec: MoEWgmmaSpec, target: str) -> str:
    """moe_wgmma.cu.j2 with the dense wgmma kernel's partials (instructions, wgmma, TMA, dequant;
    target 'emu': the emulator's)."""
    return _render.render_main("moe_wgmma.cu.j2", spec, target, _render.partials(spec.dense(), target))


register_kind(MoEWgmmaSpec, "moe_wgmma")
_render.register_renderer(MoEWgmmaSpec, render_moe_wgmma)


# ---- plan rules (pure) ------------------------------------------------------------------------


def rows_per_expert(pairs: int, experts: int) -> int:
    """Rows each expert gets under an even routing."""
    return -(-pairs // max(1, min(experts, pairs)))


def wgmma_default(profile: DeviceProfile, pairs: int, experts: int) -> bool:
    """Whether plan_moe takes this kind when its caller does not choose (WGMMA_DEFAULT, WGMMA_RULE)."""
    if not wgmma_available(profile):
        return False
    if WGMMA_DEFAULT is not None:
        return WGMMA_DEFAULT
    return WGMMA_RULE and rows_per_expert(pairs, experts) >= WGMMA_MIN_ROWS


def wgmma_tm(pairs: int, experts: int) -> int:
    """m16 blocks a row block: 32 rows up to 16 an expert, 64 up to 64, then 128. tools/bench
    --moe --sweep on an H100 (tools/PERF.md e115): gpt-oss-20b at 32 rows an expert ran 15% faster
    in 64-row blocks than in 32 (skewed routing 1.07x its uniform time). Mixtral at 64 rows ran
    14% faster in 128-row blocks, but its skewed routing (half the tokens on one expert) 30%
    slower, so 64 rows keep 64-row blocks; at 16 rows 32-row blocks won."""
    rows = rows_per_expert(pairs, experts)
    return 2 if rows <= 16 else 4 if rows <= 64 else 8


def fits(profile: DeviceProfile, spec: MoEWgmmaSpec) -> bool:
    try:
        spec.check()
    except ValueError:
        return False
    return spec.smem_bytes() <= profile.smem_per_block and spec.smem_per_sm() <= profile.smem_per_sm


def wgmma_stage_spec(profile: DeviceProfile, dense: Problem, tm: int, stage: str, activation: str) -> MoEWgmmaSpec:
    """The planner's tile of one grouped GEMM: one slab a warpgroup (128 columns), two for a 4-bit
    w13 up to 64 rows (e115); up to 64 rows two blocks an SM with 4 stages, 128 rows one block
    with 4 (deeper where shared memory allows none of those)."""
    gb = group_blocks(dense)
    act = activation if stage == "up" else ""
    tries = [(2, 8, 4), (1, 8, 6), (1, 8, 4)] if tm <= 4 else [(1, 8, 4)]
    tries += [(1, 8, s) for s in (3, 2)]
    if stage == "up" and tm <= 4 and QTYPES[dense.qtype].bits == 4:
        # two slabs a warpgroup for 4-bit w13 up to 64 rows (e115, whole block, H100: Mixtral 64 rows
        # 806 -> 729 us, 16 rows 366 -> 349; Qwen3-30B 64 rows 351 -> 335, 16 rows 172 -> 166)
        tries = [(2, 16, 4) if tm == 4 else (1, 16, 6)] + tries
    for occ, tn, stages in tries:
        spec = MoEWgmmaSpec("sm90", dense.qtype, dense.act, gb, tm, tn, stages, stage, act, occ)
        if fits(profile, spec):
            return spec
    raise ValueError(f"no MoE wgmma tile of {16 * tm} rows fits {profile.name} for {dense.qtype}")


def sorted_layouts(pairs: int, experts: int, up: MoEWgmmaSpec, down: MoEWgmmaSpec) -> tuple:
    """The planner's (up, down) tiles with its A-operand layouts (where SORTED_LAYOUTS): sorted_h
    on both, sorted_x on the up stage from SORTED_X_MIN_ROWS rows an expert (even routing). Shared
    memory is the same with or without them (the layouts change where rows come from, not the
    stages)."""
    if not SORTED_LAYOUTS:
        return up, down
    sx = rows_per_expert(pairs, experts) >= SORTED_X_MIN_ROWS
    return replace(up, sorted_h=True, sorted_x=sx), replace(down, sorted_h=True)


def wgmma_candidates(profile: DeviceProfile, dense: Problem, tm: int, stage: str, activation: str) -> list:
    """Every buildable tile of one grouped GEMM with `tm` m16 blocks a row block that fits
    `profile` (the sweep's and autotuner's candidates)."""
    gb = group_blocks(dense)
    act = activation if stage == "up" else ""
    out = []
    for tn in (8, 16):
        for occ in (1, 2):
            for stages in range(3, 9):
                spec = MoEWgmmaSpec("sm90", dense.qtype, dense.act, gb, tm, tn, stages, stage, act, occ)
                if fits(profile, spec):
                    out.append(spec)
    return out


# ---- launch glue ------------------------------------------------------------------------------


def weight_maps(
    spec: MoEWgmmaSpec, experts: int, n: int, k: int, packed_ptr: int, scales_ptr: int, offsets_ptr: int
) -> tuple:
    """(B, S, Z) tensor maps of a stacked MoEWeight on the device, over all experts at once: B as
    E K/16 rows of N bits/4 8-byte words (boxes of the tile's words x 4 rows, expert e's rows from
    e K/16), S and Z as E G rows of N halves (G scale rows an expert: K / group, or 1; boxes of the
    tile's features x a stage's rows). Per-channel scales (read in the epilogue) and absent
    offsets get an empty map. Host-only (the driver encodes them)."""
    from jitmarlin.jit import launch as jl

    empty = np.zeros((), dtype=jl.TENSOR_MAP)[()]
    words = n * spec.bits // 4
    bmap = jl.tensor_map_2d(packed_ptr, 8, (words, experts * k // 16), words * 8, (spec.tile_n * spec.bits // 4, 4))
    if spec.group_blocks < 0:
        return bmap, empty, empty
    rows = 1 if spec.group_blocks == 0 else k // (16 * spec.group_blocks)
    box_rows = spec.scale_rows // (2 if spec.affine else 1)
    maps = [
        jl.tensor_map_2d(ptr, 2, (n, experts * rows), n * 2, (spec.tile_n, box_rows)) if ptr else empty
        for ptr in (scales_ptr, offsets_ptr)
    ]
    return (bmap, *maps)
