"""The MoE family's template glue: how its specs render, registered with the shared renderer and
the spec-kind registry (stored specs parse back by their "family" field)."""

from __future__ import annotations

from jitmarlin._version import __version__
from jitmarlin.kernels import render as _render
from jitmarlin.kernels.gemv.source import gemv_partials
from jitmarlin.kernels.moe.spec import MoEGemvSpec, MoERouteSpec, MoESpec
from jitmarlin.kernels.spec import register_kind


def render_moe(spec: MoESpec, target: str) -> str:
    """The grouped GEMM: moe.cu.j2 with the dense kernel's partials for its path and types."""
    return _render.render_main("moe.cu.j2", spec, target, _render.partials(spec.dense(), target))


def render_moe_gemv(spec: MoEGemvSpec, target: str) -> str:
    """The grouped decode GEMM: moe_gemv.cu.j2 with the dense GEMV kernel's partials."""
    return _render.render_main("moe_gemv.cu.j2", spec, target, gemv_partials(spec, target))


def render_route(spec: MoERouteSpec, target: str) -> str:
    """The routing module (alignment and combine kernels): instructions and half arithmetic only."""
    legacy = spec.path in ("sm70", "sm75")
    parts = {"ptx": f"ptx/{target}.cuh", "act": f"act/{spec.act}_{'sm70' if legacy else 'sm80'}.cuh"}
    return (
        _render.env()
        .get_template("moe_route.cu.j2")
        .render(spec=spec, target=target, version=__version__, partials=parts)
    )


register_kind(MoESpec, "moe")
register_kind(MoERouteSpec, "moe_route")
register_kind(MoEGemvSpec, "moe_gemv")
_render.register_renderer(MoESpec, render_moe)
_render.register_renderer(MoERouteSpec, render_route)
_render.register_renderer(MoEGemvSpec, render_moe_gemv)
