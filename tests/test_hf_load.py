"""jitmarlin.hf.load end to end: a tiny random Llama quantized here into a GPTQ checkpoint (the
packer of test_hf_checkpoint.py, written from GPTQ's published layout), loaded with
jitmarlin.hf.load, and compared with the same model whose linears hold the dequantized weights
(float32, stock torch).

The GPU tests (marked gpu) run the real kernels: logits within the whole-matrix relative error
of jitmarlin.reference.check_output for fp16 (2e-3) and greedy generation of 16 tokens identical.
The CPU tests need torch and transformers only: the loading itself (which modules become
MarlinLinear, every other weight and buffer bit for bit, biases, tied embeddings, the log, the
refusals), with MarlinLinear.forward swapped for a dequantize-and-matmul so the model runs on CPU.
"""

import json
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from test_hf_checkpoint import ST_DTYPE, act_order, gptq_qc, pack_along, raw_safetensors

import jitmarlin
from jitmarlin import InputError
from jitmarlin.hf import load
from jitmarlin.torch import MarlinLinear

QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Whole-model logits against the float32 model: ||out - ref|| / ||ref||. 2e-3 is check_output's
# whole-matrix figure for fp16 (jitmarlin.reference.REL_TOL["float16"]), about 4 u; the model itself
# (fp16 attention, norms, residuals through 2 layers, fp16 logits) measures about 1.45e-3 = 3 u with
# stock torch on CPU, seeds 0-3. bf16 gets the same 4 u (u = 2^-8): 1.6e-2 (measured 1.1e-2).
REL_TOL_FP16 = 2e-3
REL_TOL_BF16 = 1.6e-2


def llama_config(**kw):
    args = dict(
        hidden_size=256,
        num_hidden_layers=2,
        intermediate_size=512,
        vocab_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
    )
    args.update(kw)
    return transformers.LlamaConfig(**args)


def gptq_quantize(rng, w: np.ndarray, gs: int, act: bool):
    """Round-to-nearest symmetric 4-bit GPTQ tensors of w (N, K) (v1: qzeros stored as 7) and the
    dequantized weight (N, K) float64 they stand for."""
    n, k = w.shape
    g_idx = act_order(rng, k, gs) if act else (np.arange(k) // gs).astype(np.int32)
    wt = w.T.astype(np.float64)  # (K, N), GPTQ's orientation
    amax = np.zeros((k // gs, n))
    np.maximum.at(amax, g_idx, np.abs(wt))
    s = (np.maximum(amax, 1e-8) / 7.5).astype(np.float16)  # (G, N)
    sv = s.astype(np.float64)[g_idx]  # (K, N)
    q = np.clip(np.round(wt / sv) + 8, 0, 15).astype(np.int64)
    tensors = {
        "qweight": pack_along(q, 4, 0),
        "qzeros": pack_along(np.full((k // gs, n), 7), 4, 1),
        "scales": s,
        "g_idx": g_idx,
    }
    return tensors, ((q - 8) * sv).T


def make_checkpoint(d, *, seed=1234, act=True, gs=128, drop=(), **cfg_kw):
    """Write a GPTQ checkpoint of a random tiny Llama to `d`; return (d, the float32 reference model
    holding exactly the weights the checkpoint stands for)."""
    cfg = llama_config(**cfg_kw)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    ref = transformers.LlamaForCausalLM(cfg).float().eval()
    tensors, new_state = {}, {}
    for name, p in ref.state_dict().items():
        mod, _, leaf = name.rpartition(".")
        a = p.detach().numpy()
        if leaf == "weight" and mod.rpartition(".")[2] in QUANTIZED:
            if "mlp" in mod:
                a = a * 4.0  # a little more signal through the MLP
            t, deq = gptq_quantize(rng, a, gs, act)
            tensors.update({f"{mod}.{k}": v for k, v in t.items()})
            new_state[name] = torch.from_numpy(deq.astype(np.float32))
        else:
            if leaf == "bias":
                a = rng.standard_normal(a.shape) * 0.1
            if "norm" in name:
                a = 1 + rng.standard_normal(a.shape) * 0.1
            h = np.asarray(a, dtype=np.float16)  # stored as fp16
            tensors[name] = h
            new_state[name] = torch.from_numpy(h.astype(np.float32))
    if cfg.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    for name in drop:
        tensors.pop(name)
    ref.load_state_dict(new_state, strict=False)
    if cfg.tie_word_embeddings:
        ref.tie_weights()
    d.mkdir(parents=True)
    from safetensors.numpy import save_file

    # contiguous copies: safetensors.numpy.save_file (0.8) writes a strided view's buffer as is
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(d / "model.safetensors"))
    config = json.loads(cfg.to_json_string())
    config["quantization_config"] = gptq_qc(bits=4, gs=gs, sym=True, desc_act=act, fmt="gptq")
    config["torch_dtype"] = "float16"
    (d / "config.json").write_text(json.dumps(config))
    return d, ref


def _dequant_forward(self, x):
    """MarlinLinear on CPU for these tests: x @ dequantize(W).T (+ bias) in x's dtype."""
    w = torch.from_numpy(jitmarlin.dequantize(self.qweight)).to(x.dtype)
    y = x @ w.T
    return y if self.bias is None else y + self.bias.to(x.dtype)


def _rel(out, want) -> float:
    out, want = out.double(), want.double()
    return float((out - want).norm() / want.norm())


# ---- CPU: the loading itself -------------------------------------------------------------------


def test_load_structure_and_weights_cpu(tmp_path, monkeypatch, caplog):
    d, ref = make_checkpoint(tmp_path / "m", act=True)
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    with caplog.at_level(logging.INFO, logger="jitmarlin.hf"):
        model = load(d, device="cpu")
    assert not model.training and next(model.parameters()).dtype == torch.float16  # config.json's dtype
    marlin = {n for n, m in model.named_modules() if isinstance(m, MarlinLinear)}
    assert marlin == {
        f"model.layers.{i}.{grp}.{p}"
        for i in range(2)
        for p in QUANTIZED
        for grp in (("self_attn",) if p.endswith("_proj") and p[0] in "qkvo" else ("mlp",))
    }
    assert type(model.lm_head) is torch.nn.Linear
    assert "kept lm_head as nn.Linear (the output head" in caplog.text
    assert "14 linear layers are MarlinLinear" in caplog.text
    refsd = ref.state_dict()
    for name, mod in model.named_modules():
        if isinstance(mod, MarlinLinear):
            np.testing.assert_array_equal(jitmarlin.dequantize(mod.qweight), refsd[name + ".weight"].numpy())
            assert mod.qweight.perm is not None  # act-order kept
    for name, t in model.state_dict().items():
        assert t.device.type == "cpu"
        torch.testing.assert_close(t.float(), refsd[name], rtol=0, atol=0)
    # the rotary inv_freq (a non-persistent buffer, never in a checkpoint) is computed, not garbage
    for name, b in model.named_buffers():
        if name.endswith("inv_freq"):
            torch.testing.assert_close(b.float(), dict(ref.named_buffers())[name].float())
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rel = _rel(model(ids).logits, ref(ids).logits)
    assert rel <= REL_TOL_FP16, rel


def test_load_fuse_cpu(tmp_path, monkeypatch):
    """load(fuse=True): q/k/v and gate/up as one MarlinLinear each, the same logits as unfused; an
    act-order checkpoint (each projection its own permutation) keeps them apart."""
    from jitmarlin.torch import FusedLinear, FusedPart

    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    d, ref = make_checkpoint(tmp_path / "m", act=False)
    plain, fused = load(d, device="cpu"), load(d, device="cpu", fuse=True)
    attn, mlp = fused.model.layers[1].self_attn, fused.model.layers[1].mlp
    assert isinstance(attn.q_proj, FusedLinear) and isinstance(attn.v_proj, FusedPart)
    assert isinstance(mlp.gate_proj, FusedLinear) and isinstance(mlp.gate_proj.inner, MarlinLinear)
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = fused(ids).logits, plain(ids).logits
    assert _rel(got, want) <= 1e-3
    assert _rel(got, ref(ids).logits) <= REL_TOL_FP16
    d2, _ = make_checkpoint(tmp_path / "a", act=True)
    kept = load(d2, device="cpu", fuse=True)
    assert not any(isinstance(m, FusedLinear) for m in kept.modules())


def test_load_bias_tied_bf16_cpu(tmp_path, monkeypatch):
    """attention biases on the quantized q/k/v/o projections, tied embeddings (no lm_head.weight in
    the checkpoint), bf16 activations, plain grouping (no act-order)."""
    d, ref = make_checkpoint(tmp_path / "m", act=False, attention_bias=True, tie_word_embeddings=True)
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    model = load(d, device="cpu", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q, MarlinLinear) and q.bias is not None and q.qweight.perm is None
    assert q.bias.dtype == torch.bfloat16  # the model's dtype (stored as fp16)
    torch.testing.assert_close(q.bias, ref.model.layers[0].self_attn.q_proj.bias.bfloat16(), rtol=0, atol=0)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with torch.no_grad():  # the reference holds the plain weights as the bf16 model does
        for name, p in ref.named_parameters():
            if name.rpartition(".")[0].rpartition(".")[2] not in QUANTIZED or name.endswith("bias"):
                p.copy_(p.bfloat16().float())
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        rel = _rel(model(ids).logits, ref(ids).logits)
    assert rel <= REL_TOL_BF16, rel


def test_load_extra_biases_and_stray_tensors_cpu(tmp_path, monkeypatch, caplog):
    """AutoGPTQ writes a bias for quantized layers even where the architecture has none: it is
    kept on the MarlinLinear, whether it comes before or after the layer's qweight in the file.
    A tensor with no place in the model (an old checkpoint's rotary inv_freq) is logged and skipped."""
    d, ref = make_checkpoint(tmp_path / "m", act=False)
    from safetensors.numpy import load_file

    f = d / "model.safetensors"
    stored = load_file(str(f))
    rng = np.random.default_rng(5)
    first = {"model.layers.0.self_attn.q_proj.bias": rng.standard_normal(256).astype(np.float16)}
    last = {
        "model.layers.1.mlp.down_proj.bias": rng.standard_normal(256).astype(np.float16),
        "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(32, np.float32),
    }

    def ents(ts):
        return [(n, ST_DTYPE[a.dtype.name], a.shape, np.ascontiguousarray(a).tobytes()) for n, a in ts.items()]

    raw_safetensors(f, ents(first) + ents(stored) + ents(last))
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    with caplog.at_level(logging.INFO, logger="jitmarlin.hf"):
        model = load(d, device="cpu")
    for name, b in {**first, **last}.items():
        if "inv_freq" in name:
            continue
        mod = model.get_submodule(name.rpartition(".")[0])
        assert isinstance(mod, MarlinLinear)
        np.testing.assert_array_equal(mod.bias.numpy(), b)
    assert model.model.layers[0].self_attn.k_proj.bias is None
    assert "1 checkpoint tensor(s) have no place" in caplog.text and "rotary_emb.inv_freq" in caplog.text
    ids = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with_bias = model(ids).logits
        model.model.layers[1].mlp.down_proj.bias = None
        model.model.layers[0].self_attn.q_proj.bias = None
        without = model(ids).logits
    assert not torch.equal(with_bias, without)  # the biases are applied


def test_load_refusals_cpu(tmp_path):
    d, _ = make_checkpoint(tmp_path / "a", drop=("model.norm.weight",))
    with pytest.raises(InputError, match="lacks 1 tensor.*model.norm.weight"):
        load(d, device="cpu")
    d, _ = make_checkpoint(tmp_path / "b")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 384  # the architecture no longer fits
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="mlp.*\\(out, in\\)"):
        load(d, device="cpu")
    cfg["intermediate_size"] = 512
    cfg["model_type"] = "no-such-architecture"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="model_type"):
        load(d, device="cpu")
    cfg["model_type"] = "llama"
    cfg["quantization_config"]["bits"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="bits = 3"):
        load(d, device="cpu")
    cfg["quantization_config"]["bits"] = 4
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="dtype must be float16 or bfloat16"):
        load(d, device="cpu", dtype=torch.float32)


# ---- GPU: the real kernels ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("act", [False, True])
def test_load_gptq_llama_matches_dequantized(tmp_path, act):
    d, ref = make_checkpoint(tmp_path / "m", act=act)
    model = load(d, device="cuda", dtype=torch.float16)
    assert sum(isinstance(m, MarlinLinear) for m in model.modules()) == 14
    ref = ref.cuda()
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(0)).cuda()
    with torch.no_grad():
        out = model(ids).logits
        want = ref(ids).logits  # float32, dequantized weights
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    rel = _rel(out.float(), want)
    assert rel <= REL_TOL_FP16, rel

    prompt = ids[:1, :8]
    kw = dict(max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        got = model.generate(prompt, **kw)[0, 8:].tolist()
        exp = ref.generate(prompt, **kw)[0, 8:].tolist()
    if got != exp:
        # name the step and show whether the reference itself was at a near-tie there
        t = next(i for i, (a, b) in enumerate(zip(got, exp)) if a != b)
        with torch.no_grad():
            lg = ref(torch.tensor([prompt[0].tolist() + exp[:t]], device="cuda")).logits[0, -1]
        top = torch.topk(lg, 2).values.tolist()
        pytest.fail(
            f"greedy tokens differ from step {t}: got {got}, expected {exp}; reference top-2 "
            f"logits there {top} (gap {top[0] - top[1]:.3g})"
        )
