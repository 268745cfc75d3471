"""The GEMV family's template glue (templates/gemv.cu.j2), registered with the shared renderer."""

from __future__ import annotations

from jitmarlin.kernels import render as _render
from jitmarlin.kernels.gemv.spec import HYBRID_MAX_SHARERS, GemvSpec


def gemv_partials(spec: GemvSpec, target: str = "cuda") -> dict[str, str]:
    """The partials of the decode GEMV kernel: sm80 instructions, no copy pipeline, no
    cross-block reduction."""
    return {
        "ptx": f"ptx/{target}.cuh",
        "act": f"act/{spec.act}_sm80.cuh",
        "mma": "mma/sm80.cuh",
        "dequant": f"dequant/{_render.DEQUANT_FAMILY[spec.qtype]}_{spec.act}.cuh",
    }


def render_gemv(spec: GemvSpec, target: str) -> str:
    return _render.render_main(
        "gemv.cu.j2", spec, target, gemv_partials(spec, target), hybrid_max_sharers=HYBRID_MAX_SHARERS
    )


_render.register_renderer(GemvSpec, render_gemv)
