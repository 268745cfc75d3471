"""The decode GEMV kernel's spec (templates/gemv.cu.j2)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import ClassVar

from jitmarlin.kernels.spec_base import _WeightFormat, register_kind
from jitmarlin.weights.qtypes import ACT_DTYPES

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
        """Whether the kernel applies the group scale (and offset) to a group's sums instead of
        to every weight: groups of at least 64 along K, one token block (max_m 8), not hybrid
        (tools/PERF.md entries 47, 135)."""
        return self.group_blocks >= 4 and self.max_m == 8 and self.spread != 2

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
        self.check_types(("sm80",), "gemv")
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
            raise ValueError(
                f"occupancy {self.occupancy} x {self.warps} warps: at most 16 warps of 128 registers an SM"
            )
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
        return (
            f"jm_gemv_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"
            f"_m{self.max_m}w{self.warps}k{self.kwarps}u{self.unroll}"
            + (f"c{self.cluster}" if self.cluster > 1 else "")
            + ("x" if self.pair else "")
            + (f"o{self.occupancy}" if self.occupancy > 1 else "")
            + ("", "s", "h")[int(self.spread)]
            + ("p" if self.pdl else "")
        )


register_kind(GemvSpec, family="gemv")
