"""The dequantisation kernel's template glue (templates/dequant.cu.j2), registered with the shared
renderer."""

from __future__ import annotations

from jitmarlin.kernels import render as _render
from jitmarlin.kernels.dequant.spec import DequantSpec


def dequant_partials(spec: DequantSpec, target: str = "cuda") -> dict[str, str]:
    """The partials the dequantisation kernel uses: instructions, half arithmetic and the quant
    type's bit trick, the same files the fused GEMM includes."""
    legacy = spec.path in ("sm70", "sm75")
    return {
        "ptx": f"ptx/{target}.cuh",
        "act": f"act/{spec.act}_{'sm70' if legacy else 'sm80'}.cuh",
        "dequant": f"dequant/{_render.DEQUANT_FAMILY[spec.qtype]}_{spec.act}.cuh",
    }


def render_dequant(spec: DequantSpec, target: str) -> str:
    return _render.render_main("dequant.cu.j2", spec, target, dequant_partials(spec, target))


_render.register_renderer(DequantSpec, render_dequant)
