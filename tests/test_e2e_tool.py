"""tools/e2e without a GPU: --dry-run of both models on meta tensors (the configs, which layers become
MarlinLinear / MarlinMoE, the plan), JmQwen3MoeBlock against transformers' own MoE block, and the
ratios, targets and table of synthetic rows. Needs torch and transformers (skipped without them)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "e2e")


def e2e_module():
    loader = importlib.machinery.SourceFileLoader("e2e_tool", TOOL)
    spec = importlib.util.spec_from_loader("e2e_tool", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def dry_run(model: str, *extra: str) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [sys.executable, TOOL, "--dry-run", "--layers", "1", "--models", model, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_dry_run_llama_3_8b():
    out = dry_run("llama-3-8b")
    assert "hidden_size=4096, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8" in out
    assert "intermediate_size=14336, vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192" in out
    for name, shape in [
        ("self_attn.q_proj", (4096, 4096)),
        ("self_attn.k_proj", (1024, 4096)),
        ("self_attn.v_proj", (1024, 4096)),
        ("self_attn.o_proj", (4096, 4096)),
        ("mlp.gate_proj", (14336, 4096)),
        ("mlp.up_proj", (14336, 4096)),
        ("mlp.down_proj", (4096, 14336)),
    ]:
        assert (
            f"MarlinLinear model.layers.0.{name}  (out, in) {shape}  packed ({shape[1] // 16}, {2 * shape[0]})" in out
        )
    assert "kept bf16    lm_head" in out
    assert "7 MarlinLinear, 0 MarlinMoE" in out
    assert "decode  batch 64: 512-token context, 32 a forward; static cache 576" in out
    assert "prefill batch 1: 2048 tokens" in out
    assert "compiled" not in out
    assert "static cache 576; compiled graph of one step x 64" in dry_run("llama-3-8b", "--compile")
    fused = dry_run("llama-3-8b", "--fuse")
    for name, shape in [
        ("self_attn.q_proj.inner", (6144, 4096)),
        ("mlp.gate_proj.inner", (28672, 4096)),
        ("self_attn.o_proj", (4096, 4096)),
        ("mlp.down_proj", (4096, 14336)),
    ]:
        assert f"MarlinLinear model.layers.0.{name}  (out, in) {shape}" in fused
    assert "4 MarlinLinear, 0 MarlinMoE" in fused and "k_proj" not in fused


def test_dry_run_qwen3_30b_a3b():
    out = dry_run("qwen3-30b-a3b")
    assert "hidden_size=2048, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=4, head_dim=128" in out
    assert "moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8" in out
    assert "norm_topk_prob=True, vocab_size=151936" in out
    assert "MarlinMoE    model.layers.0.mlp  w13 (128, 1536, 2048)  w2 (128, 2048, 768)" in out
    for name, shape in [
        ("q_proj", (4096, 2048)),
        ("k_proj", (512, 2048)),
        ("v_proj", (512, 2048)),
        ("o_proj", (2048, 4096)),
    ]:
        assert f"MarlinLinear model.layers.0.self_attn.{name}  (out, in) {shape}" in out
    assert "4 MarlinLinear, 1 MarlinMoE" in out
    assert "mlp.gate" not in out.replace("mlp.gate_proj", "")  # the router is never quantized


def test_jm_moe_block_matches_transformers_block():
    """Same router, transformers' own experts behind JmQwen3MoeBlock's experts(x, weights, ids)
    interface: the block's output must be the transformers block's, bit for bit."""
    e2e = e2e_module()
    cfg = transformers.Qwen3MoeConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        vocab_size=128,
    )
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(cfg).eval()
    blk = model.model.layers[0].mlp
    experts = getattr(blk, "experts", None)
    if not hasattr(experts, "gate_up_proj"):
        pytest.skip("transformers < 5: experts are a ModuleList with another call signature")
    with torch.no_grad():
        blk.gate.weight.normal_(0, 0.5)

    def stand_in(x, weights, ids):
        assert weights.dtype == torch.float32 and ids.dtype == torch.int32
        return experts(x, ids.long(), weights.to(x.dtype))

    jm = e2e.JmQwen3MoeBlock(blk.gate, stand_in, 2, True, e2e.returns_tuple(type(blk)))
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        want, got = blk(x), jm(x)
    if isinstance(want, tuple):
        want, got = want[0], got[0]
    assert torch.equal(want, got)


def test_gqa_sdpa_decode_matches_transformers_sdpa(monkeypatch):
    """--attention gqa-sdpa: a tiny grouped-query Llama (8 query heads on 2 key/value heads) decoding
    from a static cache gives transformers' own sdpa logits (float32, CPU); the decode step takes the
    per-key/value-head path and only the prefill falls back to transformers' sdpa."""
    import transformers.integrations.sdpa_attention as sa

    e2e = e2e_module()
    values = dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=96,
        max_position_embeddings=64,
    )
    fallbacks, own = [], sa.sdpa_attention_forward

    def counted(module, query, *a, **k):
        fallbacks.append(query.shape[2])
        return own(module, query, *a, **k)

    logits = {}
    for attn in ("sdpa", "gqa-sdpa"):
        cfg = e2e.make_config("llama-3-8b", attention=attn)
        cfg = transformers.LlamaConfig(attn_implementation=cfg._attn_implementation, **values)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(cfg).eval()
        cache = transformers.StaticCache(config=cfg, max_batch_size=3, max_cache_len=24)
        ids = torch.randint(0, 96, (3, 9), generator=torch.Generator().manual_seed(1))
        if attn == "gqa-sdpa":
            monkeypatch.setattr(sa, "sdpa_attention_forward", counted)
        with torch.no_grad():
            e2e.forward(model, ids[:, :8], torch.arange(8)[None], cache)
            logits[attn] = e2e.forward(model, ids[:, 8:], torch.tensor([[8]]), cache).logits
    assert fallbacks == [8, 8]  # the 2 layers' prefill only; the decode step never
    torch.testing.assert_close(logits["gqa-sdpa"], logits["sdpa"], rtol=1e-4, atol=1e-5)


def test_ratios_targets_and_table():
    e2e = e2e_module()
    rows = [
        {"model": "llama-3-8b", "variant": v, "kind": "decode", "batch": b, "tok_s": t}
        for v, b, t in [("bf16", 1, 100.0), ("jitmarlin", 1, 260.0), ("bf16", 64, 1000.0), ("jitmarlin", 64, 1200.0)]
    ]
    rows += [
        {"model": "llama-3-8b", "variant": v, "kind": "prefill", "batch": 1, "tokens": 2048, "tok_s": t}
        for v, t in [("bf16", 9000.0), ("jitmarlin", 9500.0)]
    ]
    rs = e2e.ratios(rows)
    assert rs[("llama-3-8b", "decode", 1)] == pytest.approx(2.6)
    assert rs[("llama-3-8b", "decode", 64)] == pytest.approx(1.2)
    assert rs[("llama-3-8b", "prefill", 1)] == pytest.approx(9500 / 9000)
    text = e2e.table(rows)
    assert "| llama-3-8b | jitmarlin | 1 | 260.0 | 9500 (2048 tokens) | 2.60x | 1.06x |" in text
    assert "| llama-3-8b | jitmarlin | 64 | 1200.0 | - | 1.20x | - |" in text
    assert "| llama-3-8b | bf16 | 1 | 100.0 | 9000 (2048 tokens) | - | - |" in text
    assert e2e.chunk(512, 64, 2048) == 32 and e2e.chunk(512, 1, 2048) == 512 and e2e.chunk(512, 3, 2048) == 512


def test_profile_summary_kinds_and_gaps():
    """--profile's summary: kernel names sorted into kinds, µs a step, the gap no kernel covers."""
    e2e = e2e_module()
    assert e2e.kernel_kind("jm_gemv_sm80_uint4b8_bf16_g128_m8w16k16u4") == "jitmarlin"
    assert e2e.kernel_kind("pytorch_flash::flash_fwd_splitkv_kernel<...>") == "attention"
    assert e2e.kernel_kind("fmha_cutlassF_bf16_aligned_64x128_rf_sm80") == "attention"  # before gemm's cutlass
    assert e2e.kernel_kind("nvjet_tst_128x64_64x6_1x1_v_bz_coopA_TNT") == "gemm"
    assert e2e.kernel_kind("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "fused (inductor)"
    assert e2e.kernel_kind("void at::native::index_elementwise_kernel") == "other"
    times = [("jm_a", 800.0), ("jm_b", 400.0), ("nvjet_x", 160.0), ("triton_poi_1", 40.0), ("weird", 8.0)]
    s = e2e.summarize_kernels(times, steps=8, step_ms=0.25, top=2)
    assert s["by_kind_us"] == {"jitmarlin": 150.0, "gemm": 20.0, "fused (inductor)": 5.0, "other": 1.0}
    assert s["kernel_us"] == 176.0 and s["step_us"] == 250.0 and s["gap_us"] == 74.0
    assert s["top_us"] == [["jm_a", 100.0], ["jm_b", 50.0]]
    assert list(s["by_kind_us"]) == ["jitmarlin", "gemm", "fused (inductor)", "other"]  # largest first
