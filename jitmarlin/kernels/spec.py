"""Kernel specs: everything that changes the generated code, and nothing else (frozen, hashable).

KernelSpec is the fused mixed-precision GEMM's (the mma.sync and wgmma families). The other
families define theirs in their folders (GemvSpec: kernels/gemv/spec.py, DequantSpec:
kernels/dequant/spec.py, MoESpec: kernels/moe/spec.py); this module re-exports the first two and
the registry (kernels/spec_base.py) for the callers that take any kind.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import ClassVar, Union

from jitmarlin.kernels.spec_base import (  # noqa: F401  (re-exported: the registry and shared parts)
    FAMILY_KINDS,
    PATHS,
    ROUTE_KINDS,
    SPEC_KINDS,
    THREADS,
    WARPS,
    _Tiles,
    _WeightFormat,
    kind_of_canonical,
    register_kind,
    spec_from_canonical,
    spec_kind,
)
from jitmarlin.weights.qtypes import ACT_DTYPES


def wgmma_threads(tn: int) -> int:
    """Threads of the wgmma kernel (KernelSpec.threads) for tiles of 16 tn features: 384 (three
    warpgroups of one 64-feature slab) for tn 12, else 256 (two warpgroups)."""
    return 384 if tn == 12 else THREADS


@dataclass(frozen=True)
class KernelSpec(_Tiles, _WeightFormat):
    """One specialised GEMM kernel.

    path: instruction path ('sm70', 'sm75', 'sm80': mma.sync kernels; 'sm90': the Hopper
    warpgroup (wgmma) kernel, compiled for sm_90a); qtype, act: weight and activation types;
    group_blocks: scale group size in units of 16 along K; -1: one scale per output channel,
    applied to the fp32 sums; 0: one scale (and offset) per output channel applied in the K loop
    (zero-point types, whose offsets cannot move past the sum);
    tm, tn, tk: tile size in 16-element blocks along M, N and K (tk 4, 8 or 16; 32 on the sm80
    path, whose decode plans of 64-wide whole tiles take it); stages: shared-memory pipeline depth;
    occupancy: blocks resident per SM (1 or 2; with 2, registers are capped at 128 a thread and
    the grid has two blocks per SM, so one block's dequantisation overlaps the other's MMAs);
    cluster: blocks per thread-block cluster (1, 2, 4 or 8; sm_90+): the blocks that share an
    output tile are in one cluster and add their partial sums through distributed shared memory
    instead of the global workspace. The wgmma kernel takes 2 only, for half-tile plans
    (planner._half_tiles): the two blocks of a cluster hold the two halves of a split tile and
    each writes out half of it (one warpgroup's features; with three warpgroups, half the tokens).
    pdl: built for programmatic dependent launch (griddepcontrol on sm_90+): the kernel waits for
    the grid ahead of it before touching x, the output or the workspace (launch.PdlLaunch).
    whole (mma.sync kernel, no clusters): the plan gives every block whole output tiles (no tile
    split over blocks, so no partial sums meet in the workspace), as many blocks as that takes
    instead of one an SM; the autotuner weighs it against Stream-K (the kernel is the same).
    late (mma.sync kernel, one m16 row block, no clusters): a block that shares a split tile and
    goes on to another one publishes its partial sums after its next step (one thread's fence,
    while the other warps compute) instead of holding the whole block at a fence at the switch.
    tail (wgmma kernel): built for a last row block short of the tile: that block reads x in boxes
    of just its rows (a second tensor map), the rest of each stage zeroed. Without it such a block
    reads whole-tile boxes that reach past x's last row (the TMA unit fills them with zeros), which
    made K = 4096 layers up to 1.35x slower at M = 136..184 on H100 (tools/PERF.md entry 75).
    bulk (sm80 path built for sm_90+, no clusters, at most 256 8-byte words a k16 row of the tile): a
    stage's weights arrive as one TMA box (a tensor map of the packed weights) that one thread issues
    and every thread waits for on the stage's mbarrier, instead of every thread's cp.asyncs; x and the
    scales keep cp.async.
    xbox (with bulk; one m16 row block, K tiles a multiple of 64): the stage's x arrives by TMA too,
    as K-tile / 64 boxes of 16 rows x 64 halves with the 128-byte swizzle (x's map, kept per x
    buffer by launch.py), on the same mbarrier; the stages start on 1024-byte boundaries. H200 at M =
    12 and 16 (tools/PERF.md entry 93): bf16 0.5-4% faster, fp16 up to 2.6% slower.
    On 'sm90', M is the wgmma N side (tm in 1, 2, 4, 8, 16: 16..256 tokens), N is split into
    64-feature slabs over two warpgroups (tn 8 or 16, threads 256) or three (tn 12, threads 384,
    one block an SM, at most 128 tokens) and tk is 4 (one 128-byte swizzled x row per stage).
    """

    route: ClassVar[str] = "fused"

    path: str
    qtype: str
    act: str
    group_blocks: int
    tm: int
    tn: int
    tk: int
    stages: int
    threads: int = THREADS
    occupancy: int = 1
    cluster: int = 1
    pdl: bool = False
    whole: bool = False
    late: bool = False
    tail: bool = False
    bulk: bool = False
    xbox: bool = False

    def kernel_spec(self) -> "KernelSpec":
        """The spec of the compiled kernel: `whole` chooses a plan, not code, so a whole-tile
        plan runs (and caches) the Stream-K plan's kernel."""
        return replace(self, whole=False) if self.whole else self

    # ---- derived geometry (the same numbers the template computes) ----
    @property
    def warps_n(self) -> int:
        """Warps side by side along N; each owns 64 output columns."""
        return self.tn // 4

    @property
    def warps_k(self) -> int:
        """Warps that split the tile's K range and are reduced through shared memory."""
        return WARPS // self.warps_n

    @property
    def sub_steps(self) -> int:
        """k16 steps each warp performs per pipeline stage."""
        return self.tk // self.warps_k

    @property
    def grouped(self) -> bool:
        """Scales are applied in the K loop (grouped, or per-channel with offsets)."""
        return self.group_blocks >= 0

    @property
    def scale_rows(self) -> int:
        """Scale rows fetched per stage (one per group that starts inside the K tile); the
        offsets of affine types add as many rows again."""
        if not self.grouped:
            return 0
        rows = 1 if self.group_blocks == 0 else max(1, self.tk // self.group_blocks)
        return rows * (2 if self.affine else 1)

    @property
    def scale_sums(self) -> bool:
        """Whether the mma.sync kernel applies the group scale to a group's fp32 sums instead of
        to every weight: symmetric types with groups of at least 64 along K, one m16 row block,
        on the paths whose accumulators already have the common C layout (not sm70's)."""
        return self.path in ("sm75", "sm80") and self.tm == 1 and self.group_blocks >= 4 and not self.affine

    @property
    def raw_codes(self) -> bool:
        """Whether the mma.sync kernel multiplies the codes with their magic offsets left in (128 + q
        in bf16: exact) and takes the offsets out of each run's sums with one more MMA a k16 step,
        of x with a constant fragment, instead of an fma a weight pair: scale_sums kernels of
        uint4b8 with bf16 activations on the sm80 path whose warps' runs under one scale row are
        at least 8 k16 steps (256-wide tiles, groups of 128 or more). H100, M = 9 / 16
        (tools/PERF.md entry 60): 1-3% faster there; with runs of 2 or 4 steps (64- and 128-wide
        tiles) the correction a run costs more than it saves (2-5% slower), and in fp16 no gain."""
        run = min(self.group_blocks, self.tk * self.tn // 32)  # SCALE_RUN of gemm.cu.j2
        return (
            self.path == "sm80" and self.scale_sums and self.qtype == "uint4b8" and self.act == "bfloat16" and run >= 8
        )

    @property
    def wgmma(self) -> bool:
        """The Hopper warpgroup kernel (templates/wgmma.cu.j2), built for sm_90a."""
        return self.path == "sm90"

    @property
    def warpgroups(self) -> int:
        """Warpgroups of the wgmma kernel: 3 for 192-feature tiles (tn 12, one 64-feature slab
        each, 384 threads), else 2 (tn / 8 slabs each)."""
        return wgmma_threads(self.tn) // 128 if self.wgmma else 2

    @property
    def hybrid_loop(self) -> bool:
        """Whether the kernel is built to take hybrid plans (whole tiles, then a Stream-K range:
        planner._hybrid): the wgmma kernel of 256-token tiles at one block an SM."""
        return self.wgmma and self.tm == 16 and self.occupancy == 1

    def stage_bytes(self) -> int:
        bits = self.bits
        a = self.tile_m * self.tile_k * 2
        b = self.tile_k * self.tile_n * bits // 8
        s = self.scale_rows * self.tile_n * 2
        if self.wgmma or self.xbox:  # stages start on 1024-byte boundaries (the swizzle period)
            return -(-(a + b + s) // 1024) * 1024
        return a + b + s

    def reduce_bytes(self) -> int:
        """Shared memory for the in-block reduction of one m16 row block across K-warps."""
        if self.wgmma:
            return 0
        return (self.warps_k - 1) * self.warps_n * 8 * 32 * 16

    def epilogue_bytes(self) -> int:
        """Shared memory for staging one finished output tile (16 bytes of padding per row)."""
        return self.tile_m * (self.tile_n * 2 + 16)

    def slot_bytes(self) -> int:
        """One block's fp32 partial sums of a split output tile, bytes (float4 per lane, per n8
        sub-tile, per m16 block, per N-warp)."""
        return self.warps_n * self.tm * 8 * 32 * 16

    def cluster_bytes(self) -> int:
        """Shared memory where a cluster's finishing block receives the other blocks' partial
        sums (cluster - 1 slots) plus its 8-byte mbarrier; the wgmma kernel: the other block's
        fp32 sums for the half of the tile this block writes out, plus 16 bytes of alignment; 0
        without clusters."""
        if self.cluster == 1:
            return 0
        if self.wgmma:
            return self.tile_m * self.tile_n * 2 + 16
        return (self.cluster - 1) * self.slot_bytes() + 16

    def smem_bytes(self) -> int:
        """Dynamic shared memory the kernel needs, bytes (the largest of its three uses, plus
        the cluster receive area; the wgmma kernel adds 1 KB of slack to align its stages, one
        8-byte mbarrier a stage and 16 bytes for its tile range; with TMA weight boxes the mma.sync
        kernel adds one mbarrier a stage and 128 bytes of slack to align them, 1024 with x's
        swizzled boxes)."""
        used = max(self.stages * self.stage_bytes(), self.reduce_bytes(), self.epilogue_bytes())
        # KernelSpec.bulk: the stages' mbarriers, and slack to align the TMA boxes' stages
        bars = 8 * self.stages + (1024 if self.xbox else 128) if self.bulk else 0
        return used + self.cluster_bytes() + bars + (1024 + 8 * self.stages + 16 if self.wgmma else 0)

    def smem_per_sm(self) -> int:
        """Shared memory its resident blocks take from one SM, bytes (each block also costs the
        1 KB the driver reserves)."""
        return self.occupancy * (self.smem_bytes() + 1024)

    def check(self) -> None:
        """Raise ValueError when the fields do not describe a buildable kernel."""
        if self.pdl not in (False, True):
            raise ValueError(f"pdl must be a bool, got {self.pdl!r}")
        if self.whole not in (False, True):
            raise ValueError(f"whole must be a bool, got {self.whole!r}")
        if self.whole and (self.wgmma or self.cluster > 1):
            raise ValueError(
                "whole-tile plans (whole=True) are for the mma.sync kernel without clusters "
                "(the wgmma planner takes whole tiles by itself)"
            )
        if self.late not in (False, True):
            raise ValueError(f"late must be a bool, got {self.late!r}")
        if self.late and (self.wgmma or self.cluster > 1 or self.tm != 1 or self.whole):
            raise ValueError(
                "late publishing (late=True) is for the mma.sync kernel's Stream-K plans of one "
                "m16 row block (tm=1), without clusters"
            )
        if self.tail not in (False, True):
            raise ValueError(f"tail must be a bool, got {self.tail!r}")
        if self.tail and not self.wgmma:
            raise ValueError("short-row-block x boxes (tail=True) are for the wgmma kernel")
        if self.bulk not in (False, True):
            raise ValueError(f"bulk must be a bool, got {self.bulk!r}")
        if self.bulk and (self.path != "sm80" or self.cluster > 1 or self.tile_n * self.bits // 4 > 256):
            raise ValueError(
                "TMA weight boxes (bulk=True) are for the sm80-path kernel without clusters, "
                "at most 256 8-byte words a k16 row of the tile, built for sm_90 or later"
            )
        if self.xbox not in (False, True):
            raise ValueError(f"xbox must be a bool, got {self.xbox!r}")
        if self.xbox and (not self.bulk or self.tm != 1 or self.tk % 4):
            raise ValueError(
                "x by TMA boxes (xbox=True) needs TMA weight boxes (bulk=True), one m16 row "
                "block (tm=1) and K tiles a multiple of 64 (tk a multiple of 4)"
            )
        self.check_types(("sm70", "sm75", "sm80", "sm90"))
        if self.wgmma and self.threads != 128 * self.warpgroups:
            raise ValueError(
                f"the wgmma kernel with tn={self.tn} uses {128 * self.warpgroups} threads "
                f"({self.warpgroups} warpgroups), got {self.threads}"
            )
        if not self.wgmma and self.threads != THREADS:
            raise ValueError("kernels use 256 threads")
        if self.occupancy not in (1, 2):
            raise ValueError(f"occupancy (blocks per SM) must be 1 or 2, got {self.occupancy}")
        if self.cluster not in (1, 2, 4, 8):
            raise ValueError(f"cluster (blocks per thread-block cluster) must be 1, 2, 4 or 8, got {self.cluster}")
        if self.cluster > 1 and self.path not in ("sm80", "sm90"):
            raise ValueError(
                "thread-block clusters are built into the sm80-path (mma.sync) and sm90 (wgmma) kernels only"
            )
        if self.cluster > 1 and self.wgmma and (self.cluster != 2 or self.occupancy != 1):
            raise ValueError("the wgmma kernel takes clusters of 2 (half-tile plans), one block an SM")
        if self.wgmma:
            self._check_wgmma()
            return
        if self.tn not in (4, 8, 16):
            raise ValueError(f"tn must be 4, 8 or 16 (got {self.tn})")
        if not 1 <= self.tm <= (2 if self.path == "sm70" else 4):
            raise ValueError(f"tm must be 1..4 (1..2 on sm70), got {self.tm}")
        if self.tk not in (4, 8, 16) and not (self.tk == 32 and self.path == "sm80"):
            raise ValueError(f"tk must be 4, 8 or 16, or 32 on the sm80 path (got {self.tk})")
        if self.tk % self.warps_k or self.sub_steps < 1:
            raise ValueError(f"tk={self.tk} cannot be split over {self.warps_k} K-warps")
        if self.group_blocks > 0 and self.tk % self.group_blocks and self.group_blocks % self.tk:
            raise ValueError("group size and K tile must divide one another")
        if self.group_blocks < 0 and self.affine:
            raise ValueError("zero-point types apply per-channel scales in the K loop (group_blocks 0)")
        if self.path != "sm80" and self.stages != 2:
            raise ValueError("register-staged paths (sm70, sm75) use 2 stages")
        if self.stages < 2:
            raise ValueError("at least 2 pipeline stages")

    def _check_wgmma(self) -> None:
        if self.tk != 4:
            raise ValueError("the wgmma kernel takes K tiles of 64 (tk=4)")
        if self.tn not in (8, 12, 16):
            raise ValueError(
                f"the wgmma kernel takes tn 8 or 16 (two warpgroups of 64-feature slabs) or 12 "
                f"(three warpgroups of one slab), got {self.tn}"
            )
        if self.tm not in (1, 2, 4, 8, 16):
            raise ValueError(f"the wgmma kernel takes tm 1, 2, 4, 8 or 16 (16..256 tokens), got {self.tm}")
        # fp32 sums a thread holds: slabs a warpgroup x tokens / 2. Three warpgroups leave a thread
        # 168 registers (384 threads), two 255.
        sums, most = self.tn // (4 * self.warpgroups) * 8 * self.tm, 64 if self.warpgroups == 3 else 128
        if sums > most:
            raise ValueError(
                f"wgmma tile too large: {sums} fp32 sums per thread (at most {most} with {self.warpgroups} warpgroups)"
            )
        if self.warpgroups == 3 and self.occupancy != 1:
            raise ValueError("the three-warpgroup wgmma kernel (tn=12) runs one block an SM")
        if self.group_blocks > 0 and self.tk % self.group_blocks and self.group_blocks % self.tk:
            raise ValueError("group size and K tile must divide one another")
        if self.group_blocks < 0 and self.affine:
            raise ValueError("zero-point types apply per-channel scales in the K loop (group_blocks 0)")
        if not 2 <= self.stages <= 8:
            raise ValueError("the wgmma kernel uses 2..8 stages")

    # ---- identity ----
    def canonical(self) -> str:
        """Stable text form (sorted JSON) used in cache keys. `cluster` appears only when it is
        not 1, `pdl`, `whole`, `late`, `tail`, `bulk` and `xbox` only when set, so specs (and
        bundles, tuned choices) from before them keep their text."""
        d = asdict(self)
        if d["cluster"] == 1:
            del d["cluster"]
        for flag in ("pdl", "whole", "late", "tail", "bulk", "xbox"):
            if not d[flag]:
                del d[flag]
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def name(self) -> str:
        """Kernel symbol, readable in profilers: jm_sm80_uint4b8_f16_g128_m1n8k8s4."""
        return (
            f"jm_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"
            f"_m{self.tm}n{self.tn}k{self.tk}s{self.stages}"
            + (f"o{self.occupancy}" if self.occupancy > 1 else "")
            + (f"c{self.cluster}" if self.cluster > 1 else "")
            + ("p" if self.pdl else "")
            + ("w" if self.whole else "")
            + ("l" if self.late else "")
            + ("t" if self.tail else "")
            + ("b" if self.bulk else "")
            + ("x" if self.xbox else "")
        )


register_kind(KernelSpec)

# the other families' specs (defined in their folders), for callers that take any kind
from jitmarlin.kernels.dequant.spec import DequantSpec  # noqa: E402
from jitmarlin.kernels.gemv.spec import HYBRID_MAX_SHARERS, HYBRID_SLOT_WORDS, GemvSpec  # noqa: E402,F401

AnySpec = Union[KernelSpec, DequantSpec, GemvSpec]
