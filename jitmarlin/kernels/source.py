"""The kernel families' side of the store (jitmarlin.jit.sources): how a spec is rendered,
parsed back from its canonical form, and targeted. Registered with jit when jitmarlin.kernels
is imported; jit itself knows no family."""

from __future__ import annotations

from jitmarlin.errors import UnsupportedError
from jitmarlin.jit.sources import register_source
from jitmarlin.kernels import render as _render
from jitmarlin.kernels.spec import spec_from_canonical


class FamilySource:
    """The KernelSource of jitmarlin's families (mma.sync, wgmma, GEMV, dequant)."""

    def render(self, spec) -> str:
        return _render.render(spec)

    def parse(self, canonical: str):
        return spec_from_canonical(canonical)

    def digest(self) -> str:
        return _render.templates_digest()

    def target_arch(self, spec, arch: str) -> str:
        """Kernels that use arch-specific instructions (wgmma) build for the 'a' variant
        (sm_90 -> sm_90a), whose cubins load on that compute capability only."""
        if getattr(spec, "wgmma", False) and not arch.endswith("a"):
            return arch + "a"
        return arch

    def check_target(self, spec, arch: str) -> None:
        """Clusters, and a GEMV pair's 128-bit atomics, need sm_90 or newer."""
        if getattr(spec, "cluster", 1) > 1 and int(arch[3:].rstrip("af")) < 90:
            what = "128-bit atomic exchanges (a pair plan)" if getattr(spec, "pair", False) else "thread-block clusters"
            raise UnsupportedError(f"{spec.name} uses {what}, which need sm_90 or newer (not {arch})")


SOURCE = FamilySource()
register_source(SOURCE)
