"""jitmarlin.torch.fuse_projections: sibling projections of one input (q/k/v, gate/up) as one GEMM.
A tiny transformers Llama gives the same logits fused and unfused, eager and under
torch.compile(fullgraph=True), with plain and jitmarlin layers (MarlinLinear through the exact
dequantizer on CPU); one GEMM runs a group; a part called out of order still computes its own slice."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jitmarlin  # noqa: E402
import jitmarlin.torch as jmt  # noqa: E402
from jitmarlin.torch import FusedLinear, FusedPart, MarlinLinear, fuse_projections  # noqa: E402


def _dequant_forward(self, x):
    w = torch.from_numpy(jitmarlin.dequantize(self.qweight)).to(x.dtype)
    y = x @ w.T
    return y if self.bias is None else y + self.bias.to(x.dtype)


def tiny_llama(seed=0, **kw):
    cfg = transformers.LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        intermediate_size=256,
        vocab_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
        **kw,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_plain_linears_fuse_to_the_same_logits():
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(1))
    want = _logits(model, ids)
    names = fuse_projections(model)
    assert names == [
        f"model.layers.{i}.{g}" for i in range(2) for g in ("self_attn.q_proj+k_proj+v_proj", "mlp.gate_proj+up_proj")
    ]
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.q_proj, FusedLinear) and attn.q_proj.sizes == [128, 64, 64]
    assert isinstance(attn.k_proj, FusedPart) and attn.v_proj.index == 2
    assert all("k_proj" not in k and "up_proj" not in k for k in model.state_dict())  # no second copy
    torch.testing.assert_close(_logits(model, ids), want, rtol=1e-5, atol=1e-5)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(_logits(compiled, ids), want, rtol=1e-5, atol=1e-5)


def test_marlin_linears_fuse_one_gemm_a_group(monkeypatch):
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    model = jmt.quantize_model(tiny_llama(seed=3), "uint4b8", group_size=32)
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(2))
    want = _logits(model, ids)
    fuse_projections(model)
    mlp = model.model.layers[1].mlp
    assert isinstance(mlp.gate_proj.inner, MarlinLinear) and mlp.gate_proj.inner.qweight.shape == (512, 128)
    calls = []
    monkeypatch.setattr(
        MarlinLinear, "forward", lambda self, x: calls.append(self.out_features) or _dequant_forward(self, x)
    )
    got = _logits(model, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert calls == [256, 128, 512, 128] * 2  # qkv, o, gate_up, down a layer: 4 GEMMs, not 7


def test_a_part_called_on_another_input_computes_its_slice():
    lin = [torch.nn.Linear(16, n) for n in (8, 24)]
    x, y = torch.randn(3, 16), torch.randn(3, 16)
    holder = torch.nn.Module()
    holder.gate_proj, holder.up_proj = lin
    fuse_projections(holder)
    torch.testing.assert_close(holder.gate_proj(x), lin[0](x))
    torch.testing.assert_close(holder.up_proj(y), lin[1](y))  # not x's slice
    torch.testing.assert_close(holder.up_proj(x), lin[1](x))  # out of order: computed


def test_groups_that_cannot_share_a_gemm_stay_apart(rng):
    a = torch.nn.Linear(64, 64)
    b = MarlinLinear(jitmarlin.quantize(rng.standard_normal((64, 64)).astype(np.float32), "uint4b8", 32))
    holder = torch.nn.Module()
    holder.gate_proj, holder.up_proj = a, b  # one plain, one quantized
    assert fuse_projections(holder) == [] and holder.gate_proj is a
    c = MarlinLinear(jitmarlin.quantize(rng.standard_normal((64, 64)).astype(np.float32), "uint8b128", 32))
    holder.gate_proj = MarlinLinear(jitmarlin.quantize(rng.standard_normal((64, 64)).astype(np.float32), "uint4b8", 32))
    holder.up_proj = c  # two formats
    assert fuse_projections(holder) == [] and holder.up_proj is c
