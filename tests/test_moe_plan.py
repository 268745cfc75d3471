"""MoE plans for the six models' expert shapes on every profile: shared memory within the GPU's
limit, grids sized for the worst routing, and (slow) every planned kernel compiled by NVRTC for
the profile's arch without spills."""
from __future__ import annotations

import pytest

from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import default_cache
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.moe import MoEProblem, MoESpec, plan_moe
from jitmarlin.weights.qtypes import kernel_dims

# model: experts, top-k, hidden, intermediate, quant type, group, activation
MODELS = {
    "mixtral-8x7b": (8, 2, 4096, 14336, "uint4b8", 128, "silu"),
    "qwen3-30b-a3b": (128, 8, 2048, 768, "uint4b8", 128, "silu"),
    "qwen3-235b-a22b": (128, 8, 4096, 1536, "uint4b8", 128, "silu"),
    "deepseek-v2-lite": (64, 6, 2048, 1408, "uint4b8", 128, "silu"),
    "gpt-oss-20b": (32, 4, 2880, 2880, "mxfp4", 32, "swigluoai"),
    "gpt-oss-120b": (128, 4, 2880, 2880, "mxfp4", 32, "swigluoai"),
}
PROFILES = [("v100", "float16"), ("t4", "float16"), ("a100", "bfloat16"), ("h100", "float16"),
            ("h100", "bfloat16"), ("rtx-pro-6000", "bfloat16"), ("b200", "float16")]
TOKENS = (1, 16, 256, 4096)


def _problem(model: str, tokens: int, act: str) -> MoEProblem:
    e, k, hidden, inter, qtype, group, activation = MODELS[model]
    n13, k13 = kernel_dims(2 * inter, hidden, group)
    n2, k2 = kernel_dims(hidden, inter, group)
    return MoEProblem(tokens, k, e, n13, k13, n2, k2, inter, hidden, act, qtype, group, activation)


def _plans(profile: str, act: str):
    prof = get_profile(profile)
    for model in MODELS:
        for t in TOKENS:
            yield model, t, plan_moe(prof, _problem(model, t, act))


@pytest.mark.parametrize("profile,act", PROFILES)
def test_moe_plans_fit(profile, act):
    prof = get_profile(profile)
    for model, t, plan in _plans(profile, act):
        p = plan.problem
        for spec in (plan.up, plan.down):
            spec.check()
            assert spec.smem_bytes() <= prof.smem_per_block, (model, t, spec.name)
            assert spec.path == prof.path
        assert plan.route.threads * 2 * 4 <= prof.smem_per_block
        assert p.experts <= plan.route.threads
        # worst routing: every expert gets pairs, each a partly filled block
        assert plan.max_blocks * plan.block_m >= p.pairs + min(p.experts, p.pairs) * (plan.block_m - 1)
        assert plan.grid_up == plan.max_blocks * -(-p.n13 // plan.up.tile_n)
        assert p.k13 % plan.up.tile_k == 0 and p.k2 % plan.down.tile_k == 0


@pytest.mark.slow
@pytest.mark.parametrize("profile,act", PROFILES)
def test_moe_kernels_compile_without_spills(profile, act):
    prof = get_profile(profile)
    if prof.arch not in nvrtc.supported_archs():
        pytest.skip(f"NVRTC {nvrtc.version()} cannot target {prof.arch}")
    specs = {}
    for _, _, plan in _plans(profile, act):
        for spec in (plan.route, plan.up, plan.down):
            specs[spec.canonical()] = spec
    for spec in specs.values():
        art, _, _ = default_cache().get(spec, prof.arch)
        assert art.cubin[:4] == b"\x7fELF"
        r = art.resources
        assert r["registers"] is not None and r["registers"] <= 255, (spec.name, r)
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (spec.name, r)
        if isinstance(spec, MoESpec):
            assert spec.smem_bytes() + r["static_shared_bytes"] <= prof.smem_per_block
            mma = "mma.sync.aligned.m8n8k4" if prof.path == "sm70" else "mma.sync.aligned.m16n8"
            assert mma in art.ptx
