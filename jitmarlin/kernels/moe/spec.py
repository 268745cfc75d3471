"""MoE kernel specs: the grouped expert GEMM (MoESpec) and the routing module (MoERouteSpec).

A MoESpec is one grouped GEMM over the experts' stacked weights: its tile geometry, pipeline and
dequantisation are those of the dense mma.sync kernel (a KernelSpec with the same fields, whose
checks and shared-memory sums it reuses); what differs is where rows come from (the routing's
sorted pair list), which expert's weight a block streams, and the epilogue (`stage`):
'up' (w13: gate and up interleaved in blocks of 8 columns, the activation fused, the result of
width I written per routed pair) or 'down' (w2: each pair's row times its router weight).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import ClassVar

from jitmarlin.kernels.spec import THREADS, KernelSpec, _Tiles, _WeightFormat
from jitmarlin.weights.qtypes import ACT_DTYPES

ACTIVATIONS = ("silu", "gelu", "swigluoai")
STAGES_MOE = ("up", "down")


def check_stage(stage: str, activation: str) -> None:
    """The stage and activation fields every MoE GEMM spec shares: w13 ('up') fuses one of
    ACTIVATIONS, w2 ('down') none. ValueError otherwise."""
    if stage not in STAGES_MOE:
        raise ValueError(f"stage must be 'up' or 'down', got {stage!r}")
    if stage == "up" and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if stage == "down" and activation != "":
        raise ValueError("the down stage fuses no activation (activation='')")


ROUTE_THREADS = 1024  # the alignment kernel is one block
# The GEMV kind: warps streaming weights at once that its plans aim for, and the 16-byte loads a
# lane and batch that fit the 128 registers a thread this leaves (more spilled: MoEGemvSpec.occupancy)
GEMV_WARPS_PER_SM = 16
GEMV_BOUNDED_LOADS = 4


@dataclass(frozen=True)
class MoESpec(_Tiles, _WeightFormat):
    """One grouped expert GEMM.

    path, qtype, act, group_blocks, tm, tn, tk, stages: as KernelSpec's (mma.sync paths sm70,
    sm75, sm80); a block computes one tile of 16 tm routed rows (one expert's) by 16 tn weight
    columns over the whole of K. stage: 'up' or 'down'; activation: the gated activation the
    'up' stage fuses ('silu', 'gelu', 'swigluoai'; '' for 'down').
    """

    route: ClassVar[str] = "moe"

    path: str
    qtype: str
    act: str
    group_blocks: int
    tm: int
    tn: int
    tk: int
    stages: int
    stage: str = "up"
    activation: str = "silu"
    threads: int = THREADS

    def dense(self) -> KernelSpec:
        """The dense kernel with this tile geometry (its checks and sizes hold here too)."""
        return KernelSpec(self.path, self.qtype, self.act, self.group_blocks, self.tm, self.tn, self.tk, self.stages)

    @property
    def gated(self) -> bool:
        return self.stage == "up"

    @property
    def act_kernel(self) -> bool:
        """Whether the source holds the split up stage's activation kernel (<name>_act)."""
        return self.gated

    @property
    def warps_n(self) -> int:
        return self.dense().warps_n

    @property
    def warps_k(self) -> int:
        return self.dense().warps_k

    @property
    def sub_steps(self) -> int:
        return self.dense().sub_steps

    @property
    def wgmma(self) -> bool:
        return False

    @property
    def occupancy(self) -> int:
        return 1

    @property
    def cluster(self) -> int:
        return 1

    @property
    def pdl(self) -> bool:
        return False

    def smem_bytes(self) -> int:
        """The dense kernel's pipeline, reduction and staging area, plus the tile's routed row
        ids and their router weights (8 bytes a row)."""
        d = self.dense()
        used = max(d.stages * d.stage_bytes(), d.reduce_bytes(), d.epilogue_bytes())
        return used + 8 * self.tile_m

    def smem_per_sm(self) -> int:
        return self.smem_bytes() + 1024

    def check(self) -> None:
        """Raise ValueError when the fields do not describe a buildable kernel."""
        if self.path not in ("sm70", "sm75", "sm80"):
            raise ValueError(f"MoE GEMMs run on the mma.sync paths sm70, sm75, sm80 (got {self.path!r})")
        self.dense().check()
        check_stage(self.stage, self.activation)

    def canonical(self) -> str:
        d = asdict(self)
        d["family"] = "moe"
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def name(self) -> str:
        """Kernel symbol: jm_moe_up_silu_sm80_uint4b8_f16_g128_m1n8k8s4."""
        what = f"up_{self.activation}" if self.stage == "up" else "down"
        return (
            f"jm_moe_{what}_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"
            f"_m{self.tm}n{self.tn}k{self.tk}s{self.stages}"
        )


@dataclass(frozen=True)
class MoEGemvSpec(_WeightFormat):
    """One grouped expert GEMM for decode (templates/moe_gemv.cu.j2): the dense GEMV kernel's way
    of streaming weights (each warp takes a run of one 64-column block's K range straight into
    registers, the product computed transposed on the tensor cores with the routed rows as the n8
    operand, the K-warps' sums added in shared memory), over blocks of 8 routed rows of one expert.

    path: 'sm80' only (sm_80+); qtype, act, group_blocks: as KernelSpec's. warps: warps a block;
    kwarps: those of them that split one column block's K (a block covers warps / kwarps column
    blocks); unroll: k16 rows a warp loads a batch (two batches in flight). stage, activation: as
    MoESpec's. No K splits: every block sums the whole of K, so the up stage's activation stays
    fused and the down stage needs no partial sums. direct: one token (T = 1) without the
    alignment kernel: row block b is pair b alone, its expert read from topk_ids (and expert_map)
    by the kernel itself, which takes them as four more arguments (part of the name and, when
    set, of the canonical form; off, both are as before the field existed). pdl: built for
    programmatic dependent launch (sm_90+; names end in `p`): the up stage lets the w2 grid
    start once its K loop is done; the down stage, launched behind it, requests its first
    weights before waiting for the up grid (H) and lets the combine start in turn. rows: routed
    rows a block, 8 (one n8 token block) or 16 (two: an expert's weights streamed once for up to
    16 rows; names end in `r16`, by override only).
    """

    route: ClassVar[str] = "moe"

    path: str
    qtype: str
    act: str
    group_blocks: int
    warps: int
    kwarps: int
    unroll: int
    stage: str = "up"
    activation: str = "silu"
    direct: bool = False
    pdl: bool = False
    rows: int = 8

    @property
    def gated(self) -> bool:
        return self.stage == "up"

    @property
    def act_kernel(self) -> bool:
        return False

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def col_blocks(self) -> int:
        return self.warps // self.kwarps

    @property
    def scale_sums(self) -> bool:
        """The group scale goes on a group's sums (symmetric types, groups of 64 or more along K),
        as in GemvSpec."""
        return self.group_blocks >= 4 and not self.affine

    # the tile vocabulary of MoEPlan: 8 or 16 routed rows, the block's columns, a batch of K
    @property
    def tile_m(self) -> int:
        return self.rows

    @property
    def tile_n(self) -> int:
        return 64 * self.col_blocks

    @property
    def tile_k(self) -> int:
        return 16 * self.unroll

    @property
    def wgmma(self) -> bool:
        return False

    @property
    def occupancy(self) -> int:
        """Blocks an SM the kernel is built for (its launch bounds): 8-row blocks with up to four
        16-byte loads a lane and batch as many as make 16 warps, so at most 128 registers a
        thread. Unbounded, the compiler gave 4- and 8-warp blocks of the 4-bit types 141-192
        registers (sm_90): one 8-warp block an SM, half the warps the plans count on to stream
        weights. Larger batches (8-bit types at unroll 4) and 16-row blocks need more: one."""
        return GEMV_WARPS_PER_SM // self.warps if self.rows == 8 and self.batch_loads <= GEMV_BOUNDED_LOADS else 1

    @property
    def batch_loads(self) -> int:
        """16-byte loads a lane issues a batch: `unroll` k16 rows of bits / 4 each."""
        return self.unroll * self.bits // 4

    @property
    def cluster(self) -> int:
        return 1

    def smem_bytes(self) -> int:
        """Each warp's sums: `rows` rows x 64 fp32 columns, plus 16 bytes of padding."""
        return 4 * self.warps * (self.rows * 64 + 4)

    def smem_per_sm(self) -> int:
        return self.occupancy * (self.smem_bytes() + 1024)

    def check(self) -> None:
        """Raise ValueError when the fields do not describe a buildable kernel."""
        self.check_types(("sm80",), "MoE gemv")
        if self.warps not in (4, 8, 16):
            raise ValueError(f"warps must be 4, 8 or 16, got {self.warps}")
        if self.kwarps not in (1, 2, 4, 8, 16) or self.warps % self.kwarps:
            raise ValueError(f"kwarps={self.kwarps} must be a power of two dividing warps={self.warps}")
        if self.unroll not in (1, 2, 4, 8) or self.batch_loads > 8:
            raise ValueError(f"unroll must be 1, 2, 4 or 8 with at most 8 16-byte loads a batch, got {self.unroll}")
        if self.warps == 16 and self.batch_loads > GEMV_BOUNDED_LOADS:
            raise ValueError(
                f"16 warps a block take at most {GEMV_BOUNDED_LOADS} 16-byte loads a batch "
                "(more spill at 128 registers)"
            )
        if self.group_blocks > 0 and self.unroll % self.group_blocks and self.group_blocks % self.unroll:
            raise ValueError("group size and batch (unroll) must divide one another")
        if self.group_blocks < 0 and self.affine:
            raise ValueError("zero-point types apply per-channel scales in the K loop (group_blocks 0)")
        check_stage(self.stage, self.activation)
        for flag in ("direct", "pdl"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if self.rows not in (8, 16) or isinstance(self.rows, bool):
            raise ValueError(f"rows must be 8 or 16 (one or two n8 token blocks), got {self.rows!r}")
        if self.rows == 16 and self.direct:
            raise ValueError("a direct block is one pair: rows must be 8")
        if self.rows == 16 and self.warps > 8:
            raise ValueError("16 rows a block take at most 8 warps (two token blocks' sums need > 128 registers)")

    def canonical(self) -> str:
        d = asdict(self)
        for flag in ("direct", "pdl"):  # (off: cache keys and tuned records stay as they were)
            if not d[flag]:
                del d[flag]
        if d["rows"] == 8:
            del d["rows"]
        d["family"] = "moe_gemv"
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def name(self) -> str:
        """Kernel symbol: jm_moe_gemv_up_silu_sm80_uint4b8_f16_g128_w16k4u4 (direct: ..._w16k4u4d,
        pdl: ...u4p, both: ...u4dp)."""
        what = f"up_{self.activation}" if self.stage == "up" else "down"
        return (
            f"jm_moe_gemv_{what}_{self.path}_{self.qtype}_{ACT_DTYPES[self.act]}_{self.group_tag}"
            f"_w{self.warps}k{self.kwarps}u{self.unroll}{'d' if self.direct else ''}{'p' if self.pdl else ''}"
            + (f"r{self.rows}" if self.rows != 8 else "")
        )


@dataclass(frozen=True)
class MoERouteSpec:
    """The routing module: the alignment kernel (routed pairs sorted by expert, each expert's
    rows padded to whole blocks of `block_m`) and the combine kernel (each token's k rows summed
    in slot order, in fp32, rounded to `act`). pdl: the combine is built for programmatic
    dependent launch behind the down GEMM (it waits for that grid before reading its rows; names
    end in `p`)."""

    route: ClassVar[str] = "moe_route"

    act: str
    block_m: int
    path: str = "sm80"  # picks the half-precision partial (sm70 has no bf16 instructions)
    pdl: bool = False

    @property
    def threads(self) -> int:
        return ROUTE_THREADS

    @property
    def cluster(self) -> int:
        return 1

    def kernel_spec(self) -> MoERouteSpec:
        return self

    def check(self) -> None:
        if self.act not in ACT_DTYPES:
            raise ValueError(f"unknown activation dtype {self.act!r}")
        if self.block_m not in (8, 16, 32, 48, 64, 128, 256):
            raise ValueError(
                f"block_m must be 8 or 16 (the gemv stages), 16, 32, 48, 64, 128 or 256 (the mma.sync and "
                f"wgmma stages), got {self.block_m}"
            )
        if self.path not in ("sm70", "sm75", "sm80"):
            raise ValueError(f"unknown code path {self.path!r}")
        if self.path != "sm80" and self.act == "bfloat16":
            raise ValueError(f"{self.path} has no bfloat16 tensor-core path")
        if not isinstance(self.pdl, bool):
            raise ValueError(f"pdl must be a bool, got {self.pdl!r}")

    def canonical(self) -> str:
        d = asdict(self)
        if not self.pdl:  # (off: the cache keys stay as they were)
            del d["pdl"]
        d["family"] = "moe_route"
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_canonical(cls, text: str) -> MoERouteSpec:
        d = json.loads(text)
        d.pop("family", None)
        return cls(**d)

    @property
    def name(self) -> str:
        return f"jm_moe_align_{ACT_DTYPES[self.act]}_m{self.block_m}_{self.path}" + ("p" if self.pdl else "")

    @property
    def combine_name(self) -> str:
        return f"jm_moe_combine_{ACT_DTYPES[self.act]}_m{self.block_m}_{self.path}" + ("p" if self.pdl else "")
