"""Render stage: spec -> CUDA C++ source, from the Jinja templates in templates/.

One main template per kernel family includes one primitive partial per concern; the spec's code
path and types pick which. An architecture difference lives in exactly one partial. This module
holds the shared template environment and renders KernelSpecs (gemm.cu.j2: mma.sync, every GPU;
wgmma.cu.j2: Hopper warpgroup MMA, sm_90a); the other families register their own renderers from
their folders (kernels/gemv/source.py, kernels/dequant/source.py, kernels/moe/source.py).
"""

from __future__ import annotations

import functools
import hashlib
from functools import lru_cache
from pathlib import Path

import jinja2

from jitmarlin._version import __version__
from jitmarlin.kernels.spec import AnySpec, KernelSpec

_PKG = Path(__file__).resolve().parents[1]  # the jitmarlin package folder


def templates_dir() -> Path:
    """templates/ inside an installed wheel (jitmarlin/templates) or at the checkout's top level."""
    for cand in (_PKG / "templates", _PKG.parent / "templates"):
        if (cand / "gemm.cu.j2").is_file():
            return cand
    raise FileNotFoundError("jitmarlin templates not found next to the package or the checkout")


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    # No bytecode cache: Jinja's FileSystemBytecodeCache unpickles/unmarshals files, and one
    # under the (shared) cache root ran planted code. Parsed templates live in this process's
    # Environment only (parsing costs ~20 ms once per process; every later render reuses them).
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        cache_size=-1,  # never drop a parsed template (the default LRU holds 400)
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        # CUDA inline asm writes operand lists as {%0,%1}: statements are `//%` lines instead.
        line_statement_prefix="//%",
        line_comment_prefix="//#",
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
    )


# quant type -> dequant partial family (affine types share their symmetric sibling's bit trick:
# their offsets absorb the implicit bias)
DEQUANT_FAMILY = {
    "uint4b8": "int4",
    "uint4": "int4",
    "uint8b128": "int8",
    "uint8": "int8",
    "float8_e4m3fn": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}


def partials(spec: KernelSpec, target: str = "cuda") -> dict[str, str]:
    """Which primitive partial each concern uses for `spec` (template paths)."""
    legacy = spec.path in ("sm70", "sm75")
    if spec.wgmma:
        return {
            "ptx": f"ptx/{target}.cuh",
            "act": f"act/{spec.act}_sm80.cuh",
            "mma": "mma/sm90.cuh" if target == "cuda" else "mma/sm90_emu.cuh",
            "pipe": "copy/cp_async.cuh",
            "tma": "copy/tma.cuh" if target == "cuda" else "copy/tma_emu.cuh",
            "dequant": f"dequant/{DEQUANT_FAMILY[spec.qtype]}_{spec.act}.cuh",
            "reduce": "reduce/locks.cuh",
        }
    return {
        "ptx": f"ptx/{target}.cuh",
        "act": f"act/{spec.act}_{'sm70' if legacy else 'sm80'}.cuh",
        "mma": f"mma/{spec.path}.cuh",
        "ldsm": "ldsm/quadpair.cuh" if spec.path == "sm70" else "ldsm/native.cuh",
        "pipe": "copy/register_staged.cuh" if legacy else "copy/cp_async.cuh",
        "dequant": f"dequant/{DEQUANT_FAMILY[spec.qtype]}_{spec.act}.cuh",
        "reduce": "reduce/cluster.cuh" if spec.cluster > 1 else "reduce/locks.cuh",
        "tma": "copy/tma.cuh" if target == "cuda" else "copy/tma_emu.cuh",
    }


def main_template(spec: KernelSpec) -> str:
    """The main template of a KernelSpec (the mma.sync or the wgmma kernel)."""
    return "wgmma.cu.j2" if spec.wgmma else "gemm.cu.j2"


# Families in folders of their own (kernels/moe/) register how their specs render: spec class ->
# fn(spec, target, env) -> source.
RENDERERS: dict[type, object] = {}


def register_renderer(cls: type, fn) -> None:
    RENDERERS[cls] = fn


def env() -> jinja2.Environment:
    """The shared template environment (parsed templates are kept per process)."""
    return _env()


def render_main(template: str, spec, target: str, partials: dict[str, str], **extra) -> str:
    """A family's main template with what every weight-reading family passes it: the spec, the
    target ('cuda' or 'emu'), the jitmarlin version, the partials, the PTX suffix of the
    activation type, the weight code bits and whether the type has offsets; `extra` adds a
    family's own values."""
    return (
        _env()
        .get_template(template)
        .render(
            spec=spec,
            target=target,
            version=__version__,
            partials=partials,
            act_ptx="bf16" if spec.act == "bfloat16" else "f16",
            bits=spec.bits,
            affine=spec.affine,
            **extra,
        )
    )


def render(spec: AnySpec, target: str = "cuda") -> str:
    """CUDA C++ source of `spec` (either kind). target 'cuda' for NVRTC, 'emu' for the CPU
    emulator."""
    if target not in ("cuda", "emu"):
        raise ValueError(f"unknown render target {target!r}")
    spec.check()
    own = RENDERERS.get(type(spec))
    if own is not None:
        return own(spec, target)
    spec = spec.kernel_spec()  # without plan-only fields (KernelSpec.whole)
    return render_main(main_template(spec), spec, target, partials(spec, target))


@functools.lru_cache(maxsize=1)
def templates_digest() -> str:
    """Hash of every template file (part of the source-digest memo's key and `jitmarlin info`);
    computed once a process, like the parsed templates."""
    h = hashlib.sha256()
    root = templates_dir()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()
