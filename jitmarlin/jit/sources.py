"""What the store needs from the kernel families, registered from above.

jit knows no kernel family: a spec is opaque to it beyond the Buildable protocol below. The
kernels layer registers one KernelSource at import (jitmarlin.kernels.source), which renders a
spec's CUDA source, parses a stored spec's canonical form back, names the templates' digest and
decides a spec's NVRTC target. The store (jitmarlin.jit.cache) keys, memoises, compiles and
verifies through it.
"""

from __future__ import annotations

from typing import Protocol


class Buildable(Protocol):
    """A kernel the store can build: its kernel symbol `name`, a canonical text form (part of
    the cache key) and kernel_spec(), the spec whose code is compiled (plan-only fields
    dropped)."""

    name: str

    def canonical(self) -> str: ...

    def kernel_spec(self) -> Buildable: ...


class KernelSource(Protocol):
    def render(self, spec: Buildable) -> str:
        """CUDA C++ source of `spec` for NVRTC."""

    def parse(self, canonical: str) -> Buildable:
        """The spec a stored canonical form describes (ValueError if none)."""

    def digest(self) -> str:
        """A digest of everything render() reads besides the spec (the templates)."""

    def target_arch(self, spec: Buildable, arch: str) -> str:
        """The NVRTC target of `spec` on a GPU of `arch` (e.g. sm_90 -> sm_90a)."""

    def check_target(self, spec: Buildable, arch: str) -> None:
        """Raise UnsupportedError when `spec` cannot be built for `arch`."""


_source: KernelSource | None = None


def register_source(source: KernelSource) -> None:
    global _source
    _source = source


def source() -> KernelSource:
    if _source is None:
        raise RuntimeError("no kernel source registered with jitmarlin.jit (import jitmarlin)")
    return _source


def render(spec: Buildable) -> str:
    return source().render(spec)


def parse(canonical: str) -> Buildable:
    return source().parse(canonical)


def templates_digest() -> str:
    return source().digest()
