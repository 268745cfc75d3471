"""The dequantisation kernel's spec (the large-M dequant + cuBLAS route, templates/dequant.cu.j2)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import ClassVar

from jitmarlin.kernels.spec_base import PATHS, THREADS, _WeightFormat, register_kind
from jitmarlin.weights.qtypes import ACT_DTYPES


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
    WARP_K: ClassVar[int] = 16  # weights along K that one warp expands
    WARP_N: ClassVar[int] = 64  # weights along N that one warp expands

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
        self.check_types(PATHS)
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


register_kind(DequantSpec, route="dequant")
