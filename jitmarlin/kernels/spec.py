"""Kernel specs: everything that changes the generated code, and nothing else (frozen, hashable).

Two kinds: KernelSpec (the fused mixed-precision GEMM: mma.sync or, on Hopper, wgmma) and
DequantSpec (the kernel that expands a packed weight into a dense one for the large-M dequant +
cuBLAS route). `spec.route` tells them apart; spec_from_canonical() rebuilds either from its
canonical text.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import ClassVar, Union

from jitmarlin.weights.qtypes import ACT_DTYPES, QTYPES, get_qtype

THREADS = 256          # 8 warps per block
WARPS = THREADS // 32


def wgmma_threads(tn: int) -> int:
    """Threads of the wgmma kernel (KernelSpec.threads) for tiles of 16 tn features: 384 (three
    warpgroups of one 64-feature slab) for tn 12, else 256 (two warpgroups)."""
    return 384 if tn == 12 else THREADS


class _WeightFormat:
    """What a spec's quant type and group field imply (shared by every spec kind)."""

    @property
    def bits(self) -> int:
        return QTYPES[self.qtype].bits

    @property
    def affine(self) -> bool:
        """Weights carry an offset per group and column (zero points): w = decode(q) * s + m."""
        return QTYPES[self.qtype].zero_points

    @property
    def group_size(self) -> int:
        return -1 if self.group_blocks <= 0 else 16 * self.group_blocks

    @property
    def group_tag(self) -> str:
        """The group part of kernel names: gc (per-channel), gk (per-channel with offsets), g128."""
        return {-1: "gc", 0: "gk"}.get(self.group_blocks, f"g{16 * self.group_blocks}")

    def kernel_spec(self):
        """The spec of the compiled kernel (render() and the kernel cache take it): the spec
        itself, less any field that picks a plan rather than code (KernelSpec.whole)."""
        return self

    @classmethod
    def from_canonical(cls, text: str):
        """The spec whose canonical() is `text` (fields it does not have are ignored; use
        spec_from_canonical(), which also checks the text round-trips)."""
        d = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class _Tiles:
    """Tile sizes in elements of a spec with tm, tn, tk (16-element blocks)."""

    @property
    def tile_m(self) -> int:
        return 16 * self.tm

    @property
    def tile_n(self) -> int:
        return 16 * self.tn

    @property
    def tile_k(self) -> int:
        return 16 * self.tk


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
        return (self.path in ("sm75", "sm80") and self.tm == 1 and self.group_blocks >= 4
                and not self.affine)

    @property
    def raw_codes(self) -> bool:
        """Whether the mma.sync kernel multiplies the codes with their magic offsets left in (128 + q
        in bf16: exact) and takes the offsets out of each run's sums with one more MMA a k16 step,
        of x with a constant fragment, instead of an fma a weight pair: scale_sums kernels of
        uint4b8 with bf16 activations on the sm80 path whose warps' runs under one scale row are
        at least 8 k16 steps (256-wide tiles, groups of 128 or more). H100, M = 9 / 16
        (tools/PERF.md entry 60): 1-3% faster there; with runs of 2 or 4 steps (64- and 128-wide
        tiles) the correction a run costs more than it saves (2-5% slower), and in fp16 no gain."""
        run = min(self.group_blocks, self.tk * self.tn // 32)      # SCALE_RUN of gemm.cu.j2
        return (self.path == "sm80" and self.scale_sums and self.qtype == "uint4b8" and self.act == "bfloat16"
                and run >= 8)

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
        if self.wgmma or self.xbox:   # stages start on 1024-byte boundaries (the swizzle period)
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
            raise ValueError("whole-tile plans (whole=True) are for the mma.sync kernel without clusters "
                             "(the wgmma planner takes whole tiles by itself)")
        if self.late not in (False, True):
            raise ValueError(f"late must be a bool, got {self.late!r}")
        if self.late and (self.wgmma or self.cluster > 1 or self.tm != 1 or self.whole):
            raise ValueError("late publishing (late=True) is for the mma.sync kernel's Stream-K plans of one "
                             "m16 row block (tm=1), without clusters")
        if self.tail not in (False, True):
            raise ValueError(f"tail must be a bool, got {self.tail!r}")
        if self.tail and not self.wgmma:
            raise ValueError("short-row-block x boxes (tail=True) are for the wgmma kernel")
        if self.bulk not in (False, True):
            raise ValueError(f"bulk must be a bool, got {self.bulk!r}")
        if self.bulk and (self.path != "sm80" or self.cluster > 1 or self.tile_n * self.bits // 4 > 256):
            raise ValueError("TMA weight boxes (bulk=True) are for the sm80-path kernel without clusters, "
                             "at most 256 8-byte words a k16 row of the tile, built for sm_90 or later")
        if self.xbox not in (False, True):
            raise ValueError(f"xbox must be a bool, got {self.xbox!r}")
        if self.xbox and (not self.bulk or self.tm != 1 or self.tk % 4):
            raise ValueError("x by TMA boxes (xbox=True) needs TMA weight boxes (bulk=True), one m16 row "
                             "block (tm=1) and K tiles a multiple of 64 (tk a multiple of 4)")
        if self.path not in ("sm70", "sm75", "sm80", "sm90"):
            raise ValueError(f"unknown code path {self.path!r}")
        if self.qtype not in QTYPES:
            raise ValueError(f"unknown quant type {self.qtype!r}")
        if self.act not in ACT_DTYPES:
            raise ValueError(f"unknown activation dtype {self.act!r}")
        if self.wgmma and self.threads != 128 * self.warpgroups:
            raise ValueError(f"the wgmma kernel with tn={self.tn} uses {128 * self.warpgroups} threads "
                             f"({self.warpgroups} warpgroups), got {self.threads}")
        if not self.wgmma and self.threads != THREADS:
            raise ValueError("kernels use 256 threads")
        if self.occupancy not in (1, 2):
            raise ValueError(f"occupancy (blocks per SM) must be 1 or 2, got {self.occupancy}")
        if self.cluster not in (1, 2, 4, 8):
            raise ValueError(f"cluster (blocks per thread-block cluster) must be 1, 2, 4 or 8, got {self.cluster}")
        if self.cluster > 1 and self.path not in ("sm80", "sm90"):
            raise ValueError("thread-block clusters are built into the sm80-path (mma.sync) and sm90 (wgmma) "
                             "kernels only")
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
            raise ValueError(f"the wgmma kernel takes tn 8 or 16 (two warpgroups of 64-feature slabs) or 12 "
                             f"(three warpgroups of one slab), got {self.tn}")
        if self.tm not in (1, 2, 4, 8, 16):
            raise ValueError(f"the wgmma kernel takes tm 1, 2, 4, 8 or 16 (16..256 tokens), got {self.tm}")
        # fp32 sums a thread holds: slabs a warpgroup x tokens / 2. Three warpgroups leave a thread
        # 168 registers (384 threads), two 255.
        sums, most = self.tn // (4 * self.warpgroups) * 8 * self.tm, 64 if self.warpgroups == 3 else 128
        if sums > most:
            raise ValueError(f"wgmma tile too large: {sums} fp32 sums per thread "
                             f"(at most {most} with {self.warpgroups} warpgroups)")
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


PATHS = ("sm70", "sm75", "sm80")


@dataclass(frozen=True)
class DequantSpec(_WeightFormat):
    """The dequantisation kernel of the large-M route: packed weight -> dense W (N x K, row-major,
    `act` dtype), then cuBLAS computes out = x @ W.T.

    path, qtype, act, group_blocks: as in KernelSpec (group_blocks -1: per-channel scales in
    natural order; 0: per-channel scales and offsets in the permuted layout; > 0: groups of
    16 * group_blocks along K). Each warp expands one 16 x 64 (k x n) block of the packed layout;
    a block of `threads` threads takes threads / 32 consecutive such blocks along K.
    """

    route: ClassVar[str] = "dequant"
    WARP_K: ClassVar[int] = 16      # weights along K that one warp expands
    WARP_N: ClassVar[int] = 64      # weights along N that one warp expands

    path: str
    qtype: str
    act: str
    group_blocks: int
    threads: int = THREADS

    @property
    def wgmma(self) -> bool:
        """Never: the dequantisation kernel builds for the plain arch (no sm_90a)."""
        return False

    def grid(self, n: int, k: int) -> int:
        """Blocks that cover a padded N x K weight (one warp per 16 x 64 block)."""
        units = (k // self.WARP_K) * (n // self.WARP_N)
        warps = self.threads // 32
        return max(1, -(-units // warps))

    def smem_bytes(self) -> int:
        return 0

    def check(self) -> None:
        """Raise ValueError when the fields do not describe a buildable kernel."""
        if self.path not in PATHS:
            raise ValueError(f"unknown code path {self.path!r}")
        if self.qtype not in QTYPES:
            raise ValueError(f"unknown quant type {self.qtype!r}")
        if self.act not in ACT_DTYPES:
            raise ValueError(f"unknown activation dtype {self.act!r}")
        if self.act == "bfloat16" and self.path != "sm80":
            raise ValueError("bfloat16 arithmetic (fma.bf16x2) needs the sm80 path")
        if self.threads != THREADS:
            raise ValueError("kernels use 256 threads")
        if self.group_blocks < -1:
            raise ValueError(f"group_blocks must be >= -1, got {self.group_blocks}")
        if self.group_blocks < 0 and self.affine:
            raise ValueError("zero-point types keep per-channel scales in the permuted layout (group_blocks 0)")
        if self.group_blocks == 0 and not self.affine:
            raise ValueError("symmetric per-channel scales use group_blocks -1")

    def canonical(self) -> str:
        """Stable text form (sorted JSON) used in cache keys; carries "route" so that
        spec_from_canonical() can tell it from a KernelSpec's."""
        d = asdict(self)
        d["route"] = self.route
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def name(self) -> str:
        """Kernel symbol: jm_dq_sm80_uint4b8_f16_g128."""
        return f"jm_dq_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"


# Hybrid gemv plans (GemvSpec.spread == 2): blocks that may share one column block past the grid
# (the finishers' loads a thread grow with it), and the workspace's 64-bit slot words a block
# (its sums of max_m <= 8 rows x 64 columns).
HYBRID_MAX_SHARERS = 8
HYBRID_SLOT_WORDS = 8 * 64


@dataclass(frozen=True)
class GemvSpec(_WeightFormat):
    """The decode kernel of templates/gemv.cu.j2, for M <= 16: no Stream-K partial sums (a hybrid
    plan adds the shares of its column blocks past the grid through tagged workspace slots).

    path: 'sm80' (mma.sync m16n8k16; every sm_80+ GPU); qtype, act, group_blocks: as in
    KernelSpec. warps: warps a block; kwarps: those of them that split the K range of one
    64-column block (a block covers warps / kwarps column blocks); unroll: k16 rows a warp loads
    per batch (two batches in flight, in registers); cluster: blocks of a thread-block cluster
    (sm_90+) that split the same column blocks' K and add their sums through distributed shared
    memory; max_m: rows of x it takes, 8 or 16 (one or two n8 token blocks of the transposed
    product out^T = W x^T); occupancy: blocks resident per SM the kernel is built for (2: at most
    128 registers a thread, 8 warps); spread: False, one cluster per warps / kwarps column
    blocks; True, the grid's clusters are dealt the column blocks round robin (a warp's K run may
    go on into the next column block; the planner sizes the grid to the GPU); 2 ("hybrid"), block
    b owns column block b whole and takes a share of the K range of one of the column blocks past
    the grid, whose shares are added through the workspace (no fence: each value travels with a
    tag) while the blocks still stream. pdl: as in KernelSpec (the first batch's weights are
    requested before the wait). pair: with cluster 2, the two blocks that split a column block's
    K are launched as plain blocks, not a cluster, and meet in the workspace instead of
    distributed shared memory: each swaps its sums, 4 at a time, for what the slot holds (a
    128-bit exchange: sm_90+); whichever comes second finds the other's there, adds them and
    stores the output (no barrier, no waiting for the other block).
    """

    route: ClassVar[str] = "fused"

    path: str
    qtype: str
    act: str
    group_blocks: int
    warps: int
    kwarps: int
    unroll: int
    cluster: int = 1
    max_m: int = 8
    occupancy: int = 1
    spread: bool | int = False
    pdl: bool = False
    pair: bool = False

    @property
    def wgmma(self) -> bool:
        return False

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def scale_sums(self) -> bool:
        """Whether the kernel applies the group scale to a group's sums instead of to every
        weight: symmetric types with groups of at least 64 along K, one token block (max_m 8),
        not hybrid (tools/PERF.md entry 47)."""
        return (self.group_blocks >= 4 and not get_qtype(self.qtype).zero_points and self.max_m == 8
                and self.spread != 2)

    @property
    def col_blocks(self) -> int:
        """64-column blocks a block (or cluster) covers."""
        return self.warps // self.kwarps

    # the tile vocabulary of Plan: an m16 row block, the block's columns, a batch of K
    @property
    def tile_m(self) -> int:
        return 16

    @property
    def tile_n(self) -> int:
        return 64 * self.col_blocks

    @property
    def tile_k(self) -> int:
        return 16 * self.unroll

    def smem_bytes(self) -> int:
        """The warps' sums (max_m rows x 64 fp32 columns, 16 bytes of padding; spread: two a
        warp, as a run can cover two column blocks; hybrid: also a counter), plus, with clusters and
        whole column blocks, rank
        0's receive area for the other blocks' sums."""
        if self.spread:
            return 4 * self.warps * 2 * (self.max_m * 64 + 4) + (16 if self.spread == 2 else 0)
        receive = 0 if self.pair else (self.cluster - 1) * self.col_blocks * self.max_m * 64
        return 4 * (self.warps * (self.max_m * 64 + 4) + receive)

    def smem_per_sm(self) -> int:
        return self.occupancy * (self.smem_bytes() + 1024)

    def tagged_words(self, grid: int) -> int:
        """64-bit workspace words a launch of `grid` blocks uses: a hybrid plan HYBRID_SLOT_WORDS a
        block, a pair plan two a piece of 4 sums (max_m x 16 pieces a column block), other plans
        none."""
        if self.spread == 2:
            return grid * HYBRID_SLOT_WORDS
        if self.pair:
            return grid // 2 * self.col_blocks * self.max_m * 16 * 2
        return 0

    def check(self) -> None:
        """Raise ValueError when the fields do not describe a buildable kernel."""
        if self.pdl not in (False, True):
            raise ValueError(f"pdl must be a bool, got {self.pdl!r}")
        if self.pair not in (False, True):
            raise ValueError(f"pair must be a bool, got {self.pair!r}")
        if self.pair and (self.cluster != 2 or self.spread):
            raise ValueError("a pair plan is two blocks a column block (cluster 2) of whole column blocks (no spread)")
        if self.path != "sm80":
            raise ValueError(f"the gemv kernel is built for the sm80 path (sm_80+), not {self.path!r}")
        if self.qtype not in QTYPES:
            raise ValueError(f"unknown quant type {self.qtype!r}")
        if self.act not in ACT_DTYPES:
            raise ValueError(f"unknown activation dtype {self.act!r}")
        if self.warps not in (4, 8, 16):
            raise ValueError(f"warps must be 4, 8 or 16, got {self.warps}")
        if self.kwarps < 1 or self.warps % self.kwarps:
            raise ValueError(f"kwarps={self.kwarps} must divide warps={self.warps}")
        if self.spread not in (0, 1, 2):
            raise ValueError(f"spread must be False, True (round robin) or 2 (hybrid), got {self.spread!r}")
        if self.spread and self.kwarps != self.warps:
            raise ValueError("a spread layout sets its column blocks at run time: kwarps must equal warps")
        if self.spread == 2 and (self.cluster != 1 or self.occupancy != 1 or self.max_m != 8):
            raise ValueError("hybrid gemv plans are single blocks, one an SM, of one token block (max_m 8)")
        if self.unroll not in (1, 2, 4, 8) or self.unroll * self.bits // 4 > 8:
            raise ValueError(f"unroll must be 1, 2, 4 or 8 with at most 8 16-byte loads a batch, got {self.unroll}")
        if self.occupancy not in (1, 2) or self.occupancy * self.warps > 16:
            raise ValueError(f"occupancy {self.occupancy} x {self.warps} warps: at most 16 warps of 128 "
                             "registers an SM")
        if self.max_m not in (8, 16):
            raise ValueError(f"max_m (rows of x) must be 8 or 16, got {self.max_m}")
        if self.cluster not in (1, 2):
            raise ValueError(f"cluster (blocks per thread-block cluster) must be 1 or 2, got {self.cluster}")
        if self.group_blocks > 0 and self.unroll % self.group_blocks and self.group_blocks % self.unroll:
            raise ValueError("group size and batch (unroll) must divide one another")
        if self.group_blocks < 0 and self.affine:
            raise ValueError("zero-point types apply per-channel scales in the K loop (group_blocks 0)")

    def canonical(self) -> str:
        """Stable text form (sorted JSON) used in cache keys; carries "family": "gemv" so that
        spec_from_canonical() can tell it from a KernelSpec's; `pdl` and `pair` only when set."""
        d = asdict(self)
        d["family"] = "gemv"
        for flag in ("pdl", "pair"):
            if not d[flag]:
                del d[flag]
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def name(self) -> str:
        """Kernel symbol: jm_gemv_sm80_uint4b8_f16_g128_m8w16k16u4c2 (pair: ...u4c2x)."""
        return (f"jm_gemv_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"
                f"_m{self.max_m}w{self.warps}k{self.kwarps}u{self.unroll}"
                + (f"c{self.cluster}" if self.cluster > 1 else "")
                + ("x" if self.pair else "")
                + (f"o{self.occupancy}" if self.occupancy > 1 else "") + ("", "s", "h")[int(self.spread)]
                + ("p" if self.pdl else ""))


AnySpec = Union[KernelSpec, DequantSpec, GemvSpec]


# ---- spec kinds ----------------------------------------------------------------------------------
# Every kind of spec a plan can carry, by the name stored next to its canonical text (tuned
# choices, bundles). A new kind (another code path, a library route) registers its class here;
# it needs canonical(), a classmethod from_canonical(text) and a `name`.
SPEC_KINDS: dict[str, type] = {"KernelSpec": KernelSpec, "DequantSpec": DequantSpec, "GemvSpec": GemvSpec}
# The kind a canonical text names through its "route" field (a KernelSpec's has none).
ROUTE_KINDS = {"dequant": "DequantSpec"}
# The kind a canonical text names through its "family" field (families in folders of their own
# register theirs with register_kind).
FAMILY_KINDS = {"gemv": "GemvSpec"}


def register_kind(cls: type, family: str) -> None:
    """Register a spec class whose canonical text carries `"family": family` (a kernel family
    in a folder of its own, e.g. kernels/moe/): stored specs of it parse back."""
    SPEC_KINDS[cls.__name__] = cls
    FAMILY_KINDS[family] = cls.__name__


def spec_kind(spec) -> str:
    """The registered kind name of `spec` (raises ValueError for an unregistered class)."""
    for kind, cls in SPEC_KINDS.items():
        if type(spec) is cls:
            return kind
    raise ValueError(f"{type(spec).__name__} is not a registered spec kind ({', '.join(SPEC_KINDS)})")


def kind_of_canonical(text: str) -> str:
    """The kind whose canonical form `text` is, read from its "family" field (GemvSpec) or its
    "route" field (KernelSpec when it has neither). Raises ValueError for text that is not a JSON
    object or names an unknown route."""
    try:
        d = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a spec: {exc}") from None
    if not isinstance(d, dict):
        raise ValueError(f"not a spec: {text[:120]!r}")
    family = d.get("family")
    if family is not None:
        if family not in FAMILY_KINDS:
            raise ValueError(f"not a kernel spec: unknown family {family!r}")
        return FAMILY_KINDS[family]
    route = d.get("route")
    if route is None:
        return "KernelSpec"
    if route not in ROUTE_KINDS:
        raise ValueError(f"not a kernel spec: unknown route {route!r}")
    return ROUTE_KINDS[route]


def spec_from_canonical(text: str, kind: str | None = None):
    """The spec of kind `kind` whose canonical() is exactly `text`: the one place stored specs are
    read back. Without `kind`, the kind the text itself names (kind_of_canonical). Raises
    ValueError for an unknown kind, or text that is not that kind's canonical form (unknown or
    missing fields, other values)."""
    if kind is None:
        kind = kind_of_canonical(text)
    cls = SPEC_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown spec kind {kind!r} (known: {', '.join(SPEC_KINDS)})")
    try:
        spec = cls.from_canonical(text)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a {kind}: {exc}") from None
    if spec.canonical() != text:
        raise ValueError(f"not the canonical form of a {kind}: {text[:120]!r}")
    return spec
