"""Problem stage: a GEMM described by shapes and types (frozen), validated before anything else."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One GEMM: out (m, n) = x (m, k) @ W.T, W (n, k) quantized as `qtype` with `group_size`
    (-1: per output channel), activations `act` ('float16' or 'bfloat16')."""

    m: int
    n: int
    k: int
    act: str
    qtype: str
    group_size: int
