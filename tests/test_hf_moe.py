"""jitmarlin.hf.load for mixture-of-experts models and FP4 checkpoints: tiny random Qwen3-MoE, Mixtral
and gpt-oss models (and a dense Llama for NVFP4) quantized here into GPTQ, AWQ, compressed-tensors
(pack-quantized int4 and nvfp4-pack-quantized), ModelOpt NVFP4 and gpt-oss MXFP4 checkpoints, with
quantizers and dequantisations written here in NumPy from each format's published layout
(independently of jitmarlin's converters), sharded in two files so experts straddle shards.

CPU tests (torch and transformers only): each sparse-MoE block must become a MoEBlock running the
model's own router then a MarlinMoE whose dequantize_moe equals the checkpoint's dequantisation
(exactly, or within the rounding the format forces: fp16 offsets for AWQ, 1 / weight_global_scale
in float32 for compressed-tensors NVFP4, fp16 block scales when an expert's gate and up global
scales must be folded); with MarlinLinear / MarlinMoE forwards swapped for dequantize-and-matmul
(jitmarlin.reference.moe_reference) the whole model's logits must match the transformers model
holding the dequantized weights (float32). Bad inputs raise InputError naming the tensor or field.
The GPU test (marked gpu) runs the real kernels on one MoE model.
"""

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from test_hf_checkpoint import ST_DTYPE, gptq_qc, pack_along, pack_awq, raw_safetensors
from test_hf_load import REL_TOL_BF16, REL_TOL_FP16, _dequant_forward, _rel, gptq_quantize, llama_config

import jitmarlin
from jitmarlin import InputError
from jitmarlin.hf import MoEExperts, load, read_checkpoint, read_quant_config
from jitmarlin.reference import moe_reference
from jitmarlin.torch import MarlinLinear, MarlinMoE, MoEBlock
from jitmarlin.weights.moe import logical_bias

if not hasattr(transformers, "Qwen3MoeForCausalLM") or int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("these tests build transformers 5's MoE modules", allow_module_level=True)

DENSE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# ---- independent quantizers: w (N, K) float64 -> (checkpoint tensors of one linear, dequantized (N, K)) --


def q_gptq(rng, w):
    return gptq_quantize(rng, w, 64, act=False)


def q_awq(rng, w, gs=64):
    """AutoAWQ GEMM: asymmetric 4-bit per group of `gs` inputs; qweight / qzeros packed along N."""
    n, k = w.shape
    wt = w.T.reshape(k // gs, gs, n)
    lo, hi = wt.min(1), wt.max(1)
    s = (np.maximum(hi - lo, 1e-6) / 15).astype(np.float16)
    sv = s.astype(np.float64)
    z = np.clip(np.round(-lo / sv), 0, 15)
    q = np.clip(np.round(wt / sv[:, None]) + z[:, None], 0, 15).reshape(k, n)
    grp = np.arange(k) // gs
    tensors = {"qweight": pack_awq(q.astype(np.int64)), "qzeros": pack_awq(z.astype(np.int64)), "scales": s}
    return tensors, ((q - z[grp]) * sv[grp]).T


def q_ct(rng, w, gs=64):
    """compressed-tensors pack-quantized int4 symmetric: codes q + 8 packed along K, scales (N, G)."""
    n, k = w.shape
    g = w.reshape(n, k // gs, gs)
    s = (np.maximum(np.abs(g).max(-1), 1e-8) / 7.5).astype(np.float16)
    sv = s.astype(np.float64)
    q = np.clip(np.round(g / sv[..., None]), -8, 7).reshape(n, k)
    tensors = {
        "weight_packed": pack_along((q + 8).astype(np.int64), 4, 1),
        "weight_scale": s,
        "weight_shape": np.array([n, k], np.int64),
    }
    return tensors, q * sv[:, np.arange(k) // gs]


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])


def e4m3(byte):
    """float8_e4m3fn bytes -> float64 values (no NaN handling: the quantizer never writes 0x7f)."""
    b = np.asarray(byte, np.int64)
    e, m = (b >> 3) & 0xF, b & 7
    v = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e - 7))
    return np.where(b & 0x80, -v, v)


E4M3_POS = e4m3(np.arange(127))  # increasing


class Raw:
    """A tensor stored with a dtype NumPy lacks: its safetensors dtype name and its bytes' array."""

    def __init__(self, st, a):
        self.st, self.a = st, np.ascontiguousarray(a)


def bf16(a):
    """float -> (bf16 values as float64, Raw BF16 tensor)."""
    t = torch.from_numpy(np.asarray(a, np.float32)).bfloat16()
    return t.double().numpy(), Raw("BF16", t.view(torch.int16).numpy().view(np.uint16))


def fp4_codes(x):
    """Nearest e2m1 codes (sign in bit 3) of x (already divided by its scale; |x| <= 6)."""
    mag = np.abs(np.abs(x)[..., None] - E2M1).argmin(-1)
    return mag | np.where(x < 0, 8, 0), np.where(x < 0, -1.0, 1.0) * E2M1[mag]


def pack_fp4(codes):
    """(..., 2m) codes -> (..., m) bytes, element 2i in the low nibble of byte i."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def nvfp4(w, g):
    """NVFP4 with per-tensor scale g (ModelOpt weight_scale_2): (packed, e4m3 scale bytes, dequantized)."""
    n, k = w.shape
    blk = w.reshape(n, k // 16, 16)
    idx = np.clip(np.searchsorted(E4M3_POS, np.abs(blk).max(-1) / 6 / g), 1, 126)
    s = E4M3_POS[idx]
    codes, vals = fp4_codes(blk / (s * g)[..., None])
    return pack_fp4(codes.reshape(n, k)), idx.astype(np.uint8), (vals * s[..., None]).reshape(n, k)


def q_modelopt(rng, w):
    g = np.float32(np.abs(w).max() / (6 * 448) * rng.uniform(1, 2))
    packed, sb, deq = nvfp4(w, float(g))
    t = {
        "weight": packed,
        "weight_scale": Raw("F8_E4M3", sb),
        "weight_scale_2": np.array(g, np.float32),
        "input_scale": np.array(0.5, np.float32),
    }
    return t, deq * float(g)


def q_ct_nvfp4(rng, w):
    gct = np.float32(6 * 448 / np.abs(w).max() * rng.uniform(0.5, 1))  # compressed-tensors' global scale
    packed, sb, deq = nvfp4(w, 1 / float(gct))
    t = {
        "weight_packed": packed,
        "weight_scale": Raw("F8_E4M3", sb),
        "weight_global_scale": np.array([gct], np.float32),
        "input_global_scale": np.array([3.0], np.float32),
    }
    return t, deq / float(gct)


def mxfp4(w):
    """gpt-oss MXFP4 of w (..., R, C): blocks (..., R, C/32, 16), e8m0 scales (..., R, C/32), dequantized."""
    blk = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    e = np.clip(np.ceil(np.log2(np.maximum(np.abs(blk).max(-1), 2.0**-20) / 6)), -20, 20).astype(np.int64) + 127
    sc = 2.0 ** (e - 127)
    codes, vals = fp4_codes(blk / sc[..., None])
    return pack_fp4(codes), e.astype(np.uint8), (vals * sc[..., None]).reshape(w.shape)


QUANTIZERS = {"gptq": q_gptq, "awq": q_awq, "ct": q_ct, "ct-nvfp4": q_ct_nvfp4, "modelopt": q_modelopt}


def quant_config(fmt):
    if fmt == "gptq":
        return gptq_qc(bits=4, gs=64)
    if fmt == "awq":
        return {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 64,
            "version": "gemm",
            "zero_point": True,
            "modules_to_not_convert": ["lm_head"],
        }
    if fmt in ("ct", "ct-nvfp4"):
        nv = fmt == "ct-nvfp4"
        w = (
            {
                "num_bits": 4,
                "type": "float",
                "strategy": "tensor_group",
                "group_size": 16,
                "symmetric": True,
                "dynamic": False,
                "actorder": None,
                "observer": "minmax",
            }
            if nv
            else {
                "num_bits": 4,
                "type": "int",
                "strategy": "group",
                "group_size": 64,
                "symmetric": True,
                "dynamic": False,
                "actorder": None,
            }
        )
        act = dict(w, dynamic="local") if nv else None
        f = "nvfp4-pack-quantized" if nv else "pack-quantized"
        return {
            "quant_method": "compressed-tensors",
            "format": f,
            "ignore": ["lm_head", "re:.*mlp.gate$"],
            "quantization_status": "compressed",
            "kv_cache_scheme": None,
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": w,
                    "input_activations": act,
                    "output_activations": None,
                    "format": f,
                }
            },
        }
    if fmt == "modelopt":
        return {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "kv_cache_quant_algo": None,
            "ignore": ["lm_head", "*.mlp.gate"],
        }
    if fmt == "mxfp4":
        return {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
        }
    raise AssertionError(fmt)


# ---- tiny models ---------------------------------------------------------------------------------

COMMON = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    vocab_size=256,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)


def make_config(arch, **kw):
    if arch == "qwen3_moe":  # layer 1 dense (mlp_only_layers): both kinds in one model
        args = dict(
            COMMON,
            intermediate_size=256,
            moe_intermediate_size=128,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            mlp_only_layers=[1],
            decoder_sparse_step=1,
        )
        cls = transformers.Qwen3MoeConfig
    elif arch == "mixtral":
        args = dict(COMMON, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2)
        cls = transformers.MixtralConfig
    else:
        args = dict(COMMON, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2, sliding_window=64)
        cls = transformers.GptOssConfig
    args.update(kw)
    return cls(**args)


def ckpt_name(arch, name):
    """The model's name -> the checkpoint's (Mixtral's checkpoints keep block_sparse_moe)."""
    return name.replace(".mlp.", ".block_sparse_moe.") if arch == "mixtral" else name


PROJ = {"qwen3_moe": ("gate_proj", "up_proj", "down_proj"), "mixtral": ("w1", "w3", "w2")}


def save(d, tensors, config, shards=2, extra=None):
    """tensors (NumPy or Raw) round-robin into `shards` safetensors files with an index."""
    d.mkdir(parents=True)
    names = sorted(tensors)
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    wm = {}
    for i, fn in enumerate(files):
        ents = []
        for n in names[i::shards]:
            t = tensors[n]
            a = t.a if isinstance(t, Raw) else np.ascontiguousarray(t)
            ents.append((n, t.st if isinstance(t, Raw) else ST_DTYPE[a.dtype.name], a.shape, a.tobytes()))
            wm[n] = fn
        raw_safetensors(d / fn, ents)
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (d / "config.json").write_text(json.dumps(config))
    for fn, obj in (extra or {}).items():
        (d / fn).write_text(json.dumps(obj))
    return d


def make_moe_checkpoint(d, arch, fmt, *, seed=7, cfg_kw=None, edit=None, qc_in="config", dtype="float16"):
    """A quantized checkpoint of a random tiny `arch` model in `fmt`; returns (d, the float32 reference
    model holding the dequantized weights, {block: (w13 (E, 2I, H), w2 (E, H, I), b13, b2)} oracles).
    edit(tensors) may tamper with the checkpoint tensors before they are written."""
    cfg = make_config(arch, **(cfg_kw or {}))
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    ref = (
        getattr(
            transformers,
            {"qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM", "gpt_oss": "GptOssForCausalLM"}[arch],
        )(cfg)
        .float()
        .eval()
    )
    quant = QUANTIZERS.get(fmt)
    tensors, state, oracle = {}, {}, {}
    store = (
        (lambda a: bf16(a))
        if dtype == "bfloat16"
        else (lambda a: (a.astype(np.float16).astype(np.float64), a.astype(np.float16)))
    )
    for name, p in ref.state_dict().items():
        mod, _, leaf = name.rpartition(".")
        a = p.detach().double().numpy()
        if mod.endswith(".experts"):
            block = mod[: -len(".experts")]
            if arch == "gpt_oss":
                if leaf.endswith("bias"):
                    deq, t = bf16(rng.standard_normal(a.shape) * 0.05)
                    tensors[f"{mod}.{leaf}"] = t
                else:  # (E, H, 2I) / (E, I, H) used as x @ W: the checkpoint stores W^T
                    blocks, scales, deq = mxfp4(np.swapaxes(rng.standard_normal(a.shape) * 0.08, 1, 2))
                    tensors.update({f"{mod}.{leaf}_blocks": blocks, f"{mod}.{leaf}_scales": scales})
                    deq = np.swapaxes(deq, 1, 2)
                oracle.setdefault(block, {})[leaf] = deq
                state[name] = torch.from_numpy(deq.astype(np.float32))
                continue
            out = np.empty_like(a)
            for e in range(a.shape[0]):
                w = rng.standard_normal(a.shape[1:]) * 0.08
                halves = ((0, w[: w.shape[0] // 2]), (1, w[w.shape[0] // 2 :])) if leaf == "gate_up_proj" else ((2, w),)
                rows = []
                for role, part in halves:
                    t, deq = quant(rng, part)
                    pre = ckpt_name(arch, f"{mod}.{e}.{PROJ[arch][role]}")
                    tensors.update({f"{pre}.{k}": v for k, v in t.items()})
                    rows.append(deq)
                out[e] = np.concatenate(rows)
            oracle.setdefault(block, {})[leaf] = out
            state[name] = torch.from_numpy(out.astype(np.float32))
        elif leaf == "weight" and mod.rpartition(".")[2] in DENSE and fmt != "mxfp4":
            t, deq = quant(rng, a * 4.0 if "mlp" in mod else a)
            tensors.update({f"{ckpt_name(arch, mod)}.{k}": v for k, v in t.items()})
            state[name] = torch.from_numpy(deq.astype(np.float32))
        else:
            if mod.endswith(".gate") or mod.endswith(".router"):
                a = rng.standard_normal(a.shape) * (0.5 if leaf == "weight" else 0.1)  # routing far from ties
            elif "norm" in name:
                a = 1 + rng.standard_normal(a.shape) * 0.1
            elif leaf in ("bias", "sinks"):
                a = rng.standard_normal(a.shape) * 0.1
            vals, stored = store(a)
            tensors[ckpt_name(arch, name)] = stored
            state[name] = torch.from_numpy(vals.astype(np.float32))
    ref.load_state_dict(state)
    if edit:
        edit(tensors)
    config = json.loads(cfg.to_json_string())
    config["torch_dtype"] = dtype
    extra = {}
    if qc_in == "config":
        config["quantization_config"] = quant_config(fmt)
    else:  # ModelOpt's hf_quant_config.json
        qc = quant_config(fmt)
        extra["hf_quant_config.json"] = {
            "producer": {"name": "modelopt", "version": "0.29.0"},
            "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": qc["ignore"]},
        }
    save(d, tensors, config, extra=extra)
    return d, ref, oracle


# ---- CPU forwards for MarlinLinear / MarlinMoE --------------------------------------------------


def _dequant_moe_forward(self, x, topk_weights, topk_ids):
    """MarlinMoE on CPU: jitmarlin.reference.moe_reference (float64) on the stacked weights."""
    shape = x.shape
    y = moe_reference(
        x.reshape(-1, shape[-1]).double().numpy(),
        self.w13,
        self.w2,
        topk_weights.double().numpy(),
        topk_ids.numpy(),
        activation=self.activation,
        act=str(x.dtype).replace("torch.", ""),
    )
    return torch.from_numpy(y).to(x.dtype).reshape(shape)


@pytest.fixture
def cpu_forwards(monkeypatch):
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    monkeypatch.setattr(MarlinMoE, "forward", _dequant_moe_forward)


def check_logits(model, ref, ids, dtype=torch.float16):
    """The loaded model's logits against the float32 reference: no further from it than 1.5x the
    reference itself run in `dtype` (transformers' fp16 MoE models on the CPU measure 2.2e-3 to 3.8e-3
    here, above the dense Llama's 1.45e-3; the loaded ones 0.92x to 1.04x that)."""
    low = copy.deepcopy(ref).to(dtype)
    with torch.no_grad():
        want = ref(ids.to(ref.device)).logits
        own = _rel(low(ids.to(ref.device)).logits, want)
        rel = _rel(model(ids).logits, want)
    bound = 1.5 * max(own, REL_TOL_FP16 if dtype == torch.float16 else REL_TOL_BF16)
    assert rel <= bound, (rel, own)
    return rel


def check_experts(model, oracle, arch, rtol):
    """Every MoE block is a MoEBlock(router, MarlinMoE) whose dequantized experts are the checkpoint's."""
    blocks = {n: m for n, m in model.named_modules() if isinstance(m, MoEBlock)}
    assert sorted(blocks) == sorted(oracle)
    for name, blk in blocks.items():
        assert isinstance(blk.experts, MarlinMoE)
        want = oracle[name]
        w13 = jitmarlin.dequantize_moe(blk.experts.w13).astype(np.float64)
        w2 = jitmarlin.dequantize_moe(blk.experts.w2).astype(np.float64)
        if arch == "gpt_oss":
            gu = np.swapaxes(want["gate_up_proj"], 1, 2)  # (E, 2I, H), gate / up interleaved
            want13, want2 = np.concatenate([gu[:, 0::2], gu[:, 1::2]], axis=1), np.swapaxes(want["down_proj"], 1, 2)
            b = want["gate_up_proj_bias"]
            np.testing.assert_array_equal(logical_bias(blk.experts.w13), np.concatenate([b[:, 0::2], b[:, 1::2]], 1))
            np.testing.assert_array_equal(logical_bias(blk.experts.w2), want["down_proj_bias"])
            assert blk.experts.activation == "swigluoai" and blk.returns == "scores"
        else:
            want13, want2 = want["gate_up_proj"], want["down_proj"]
            assert blk.experts.activation == "silu" and blk.returns is None
        for got, exp in ((w13, want13), (w2, want2)):
            assert got.shape == exp.shape
            if rtol == 0:
                np.testing.assert_array_equal(got, exp)
            else:
                np.testing.assert_allclose(got, exp, rtol=rtol, atol=rtol * np.abs(exp).max())
    return blocks


# exact for GPTQ / int4 compressed-tensors / MXFP4; AWQ: offsets rounded to fp16; NVFP4: an expert's gate and
# up on one global scale (the ratio folded into fp16 block scales), 1 / weight_global_scale in float32
RTOL = {"gptq": 0, "ct": 0, "modelopt": 2.0**-10, "awq": 2.0**-10, "ct-nvfp4": 2.0**-10}
CASES = [
    ("qwen3_moe", "gptq"),
    ("mixtral", "awq"),
    ("qwen3_moe", "ct"),
    ("mixtral", "ct-nvfp4"),
    ("qwen3_moe", "modelopt"),
]


@pytest.mark.parametrize("arch,fmt", CASES)
def test_moe_load_cpu(tmp_path, cpu_forwards, arch, fmt):
    d, ref, oracle = make_moe_checkpoint(tmp_path / "m", arch, fmt)
    model = load(d, device="cpu")
    blocks = check_experts(model, oracle, arch, RTOL[fmt])
    assert len(blocks) == (1 if arch == "qwen3_moe" else 2)  # qwen3: layer 1 is dense
    refsd = ref.state_dict()
    for name, blk in blocks.items():  # the model's own router, loaded
        router = blk.gate
        assert type(router).__name__.endswith("TopKRouter")
        torch.testing.assert_close(router.weight.float(), refsd[name + ".gate.weight"], rtol=0, atol=0)
    marlin = {n for n, m in model.named_modules() if isinstance(m, MarlinLinear)}
    dense = {f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
    if arch == "qwen3_moe":
        dense |= {f"model.layers.1.mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")}
    assert marlin == dense
    for n in marlin:
        want = refsd[n + ".weight"].double().numpy()
        got = jitmarlin.dequantize(model.get_submodule(n).qweight).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=RTOL[fmt], atol=RTOL[fmt] * np.abs(want).max())
    check_logits(model, ref, torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0)))


def test_gpt_oss_mxfp4_cpu(tmp_path, cpu_forwards, caplog):
    d, ref, oracle = make_moe_checkpoint(tmp_path / "m", "gpt_oss", "mxfp4", dtype="bfloat16")
    model = load(d, device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    blocks = check_experts(model, oracle, "gpt_oss", 0)
    assert len(blocks) == 2 and not any(isinstance(m, MarlinLinear) for m in model.modules())
    for name, blk in blocks.items():
        assert blk.experts.w13.qtype == "mxfp4" and blk.router_name == "router"
        assert type(blk.router).__name__ == "GptOssTopKRouter" and blk.router.bias is not None
    check_logits(model, ref, torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0)), torch.bfloat16)


@pytest.mark.parametrize("fmt,qc_in", [("ct-nvfp4", "config"), ("modelopt", "config"), ("modelopt", "hf_quant_config")])
def test_dense_nvfp4_cpu(tmp_path, cpu_forwards, fmt, qc_in):
    """A dense Llama in NVFP4: compressed-tensors (1 / weight_global_scale) and ModelOpt (config.json's
    quantization_config, or hf_quant_config.json); input scales dropped."""
    cfg = llama_config()
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    ref = transformers.LlamaForCausalLM(cfg).float().eval()
    tensors, state = {}, {}
    for name, p in ref.state_dict().items():
        mod, _, leaf = name.rpartition(".")
        a = p.detach().double().numpy()
        if leaf == "weight" and mod.rpartition(".")[2] in DENSE:
            t, deq = QUANTIZERS[fmt](rng, a * 4.0 if "mlp" in mod else a)
            tensors.update({f"{mod}.{k}": v for k, v in t.items()})
            state[name] = torch.from_numpy(deq.astype(np.float32))
        else:
            if "norm" in name:
                a = 1 + rng.standard_normal(a.shape) * 0.1
            tensors[name] = a.astype(np.float16)
            state[name] = torch.from_numpy(a.astype(np.float16).astype(np.float32))
    ref.load_state_dict(state)
    config = json.loads(cfg.to_json_string())
    config["torch_dtype"] = "float16"
    extra = {}
    if qc_in == "config":
        config["quantization_config"] = quant_config(fmt)
    else:
        extra["hf_quant_config.json"] = {
            "producer": {"name": "modelopt", "version": "0.29.0"},
            "quantization": {
                "quant_algo": "NVFP4",
                "group_size": 16,
                "kv_cache_quant_algo": None,
                "exclude_modules": ["lm_head"],
            },
        }
    d = save(tmp_path / "m", tensors, config, extra=extra)
    model = load(d, device="cpu")
    assert model.jitmarlin_scheme.qtype == "nvfp4"
    n = 0
    for name, mod in model.named_modules():
        if isinstance(mod, MarlinLinear):
            n += 1
            assert mod.qweight.qtype == "nvfp4" and mod.qweight.group_size == 16
            want = state[name + ".weight"].double().numpy()
            np.testing.assert_allclose(jitmarlin.dequantize(mod.qweight), want, rtol=2.0**-23, atol=0)
    assert n == 14 and type(model.lm_head) is torch.nn.Linear
    check_logits(model, ref, torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(0)))


def test_read_checkpoint_experts(tmp_path):
    """read_checkpoint alone (no torch needed for it): one MoEExperts per MoE layer, or each expert's
    QuantizedWeight with stack_experts=False."""
    d, _, oracle = make_moe_checkpoint(tmp_path / "m", "mixtral", "gptq")
    got = dict(read_checkpoint(d))
    moe = {n: v for n, v in got.items() if isinstance(v, MoEExperts)}
    assert sorted(moe) == [f"model.layers.{i}.block_sparse_moe.experts" for i in range(2)]
    w13, w2 = moe["model.layers.0.block_sparse_moe.experts"]
    assert w13.shape == (4, 256, 128) and w2.shape == (4, 128, 128) and w13.qtype == "uint4b8"
    np.testing.assert_array_equal(jitmarlin.dequantize_moe(w2), oracle["model.layers.0.mlp"]["down_proj"])
    split = dict(read_checkpoint(d, stack_experts=False))
    qw = split["model.layers.1.block_sparse_moe.experts.3.w3"]
    np.testing.assert_array_equal(jitmarlin.dequantize(qw), oracle["model.layers.1.mlp"]["gate_up_proj"][3, 128:])


# ---- refusals -----------------------------------------------------------------------------------


def _drop(*needles):
    def edit(t):
        for n in [n for n in t if any(s in n for s in needles)]:
            del t[n]

    return edit


def _rewrite_config(d, fn):
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


def test_moe_refusals_cpu(tmp_path):
    d, _, _ = make_moe_checkpoint(tmp_path / "a", "qwen3_moe", "gptq", edit=_drop("layers.0.mlp.experts.3.down_proj."))
    with pytest.raises(InputError, match=r"lacks 1 expert module.*model\.layers\.0\.mlp\.experts\.3\.down_proj"):
        load(d, device="cpu")
    d, _, _ = make_moe_checkpoint(
        tmp_path / "b", "qwen3_moe", "gptq", edit=_drop("layers.0.mlp.experts.2.up_proj.scales")
    )
    with pytest.raises(InputError, match=r"experts\.2\.up_proj.*lacks.*experts\.2\.up_proj\.scales"):
        load(d, device="cpu")
    d, _, _ = make_moe_checkpoint(tmp_path / "c", "qwen3_moe", "gptq", edit=_drop("layers.0.mlp.experts.7."))
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.experts.*\(7, 128, 128\).*num_experts=8"):
        load(d, device="cpu")  # a whole expert missing: 7 of 8

    def short(t):  # one expert's scales for 64 of 128 rows
        t["model.layers.0.mlp.experts.5.gate_proj.scales"] = t["model.layers.0.mlp.experts.5.gate_proj.scales"][:, :64]

    d, _, _ = make_moe_checkpoint(tmp_path / "d", "qwen3_moe", "gptq", edit=short)
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.experts\.5\.gate_proj \(gptq\).*scales"):
        load(d, device="cpu")
    d, _, _ = make_moe_checkpoint(tmp_path / "e", "mixtral", "awq")
    _rewrite_config(d, lambda c: c.update(intermediate_size=256))
    with pytest.raises(InputError, match=r"layers\.0\.mlp\.experts.*\(experts, intermediate, hidden\)"):
        load(d, device="cpu")  # the checkpoint's experts vs config.json
    d, _, _ = make_moe_checkpoint(tmp_path / "f", "qwen3_moe", "gptq")
    _rewrite_config(d, lambda c: c.update(hidden_act="relu"))
    with pytest.raises(InputError, match="hidden_act = 'relu'"):
        load(d, device="cpu")
    _rewrite_config(d, lambda c: c.update(hidden_act="silu", num_experts_per_tok=True))
    with pytest.raises(InputError, match="num_experts_per_tok"):  # transformers' own type check
        load(d, device="cpu")
    _rewrite_config(d, lambda c: c.update(num_experts_per_tok=9))
    with pytest.raises(InputError, match=r"num_experts_per_tok must be an int in \[1, 8\], got int 9"):
        load(d, device="cpu")
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.experts \(gptq\).*act-order"):
        _load_with_act_order(tmp_path / "g")
    d, _, _ = make_moe_checkpoint(tmp_path / "h", "gpt_oss", "mxfp4", dtype="bfloat16", cfg_kw={"swiglu_limit": 5.0})
    with pytest.raises(InputError, match="swiglu_limit = 5.0"):
        load(d, device="cpu")


def _load_with_act_order(d):
    """A Qwen3-MoE GPTQ checkpoint whose experts carry a real act-order g_idx."""

    def shuffle(t):
        rng = np.random.default_rng(0)
        name = "model.layers.0.mlp.experts.1.up_proj.g_idx"
        t[name] = rng.permutation(t[name]).astype(np.int32)

    d, _, _ = make_moe_checkpoint(d, "qwen3_moe", "gptq", edit=shuffle)
    _rewrite_config(d, lambda c: c["quantization_config"].update(desc_act=True))
    load(d, device="cpu")


def test_unquantized_experts_refused(tmp_path):
    def plain(t):  # expert 0 of layer 0 stored in fp16
        for p in ("gate_proj", "up_proj", "down_proj"):
            pre = f"model.layers.0.mlp.experts.0.{p}."
            for k in [k for k in t if k.startswith(pre)]:
                del t[k]
            t[pre + "weight"] = np.zeros((128, 128), np.float16)

    d, _, _ = make_moe_checkpoint(tmp_path / "a", "qwen3_moe", "gptq", edit=plain)
    with pytest.raises(InputError, match="lacks 3 expert module.*experts.0.gate_proj"):
        load(d, device="cpu")
    d, _, _ = make_moe_checkpoint(tmp_path / "b", "qwen3_moe", "gptq", edit=_drop("layers.0.mlp.experts."))
    with pytest.raises(InputError, match=r"lacks the experts of the MoE layer model\.layers\.0\.mlp"):
        load(d, device="cpu")

    def all_plain(t):
        for k in [k for k in t if "layers.0.mlp.experts." in k]:
            del t[k]
        t["model.layers.0.mlp.experts.0.down_proj.weight"] = np.zeros((128, 128), np.float16)

    d, _, _ = make_moe_checkpoint(tmp_path / "c", "qwen3_moe", "gptq", edit=all_plain)
    with pytest.raises(
        InputError, match=r"experts\.0\.down_proj\.weight: this MoE layer's experts are stored unquantized"
    ):
        load(d, device="cpu")


@pytest.mark.parametrize(
    "qc,match",
    [
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quant_method = 'bitsandbytes'"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "quant_algo = 'FP8'"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32}, "group_size = 32"),
        ({"quant_method": "modelopt", "quant_algo": 4}, "quant_algo must be str"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": "lm_head"}, "ignore must be list"),
        (
            {"quant_method": "modelopt", "quantization": {"quant_algo": "W4A8_AWQ"}},
            "quantization.quant_algo = 'W4A8_AWQ'",
        ),
        ({"quant_method": "mxfp4", "modules_to_not_convert": [3]}, "modules_to_not_convert must be a list of strings"),
        ({"quant_method": "mxfp4", "dequantize": "no"}, "dequantize must be bool"),
    ],
)
def test_fp4_config_refusals(qc, match):
    with pytest.raises(InputError, match=match):
        read_quant_config({"quantization_config": qc})


_NV = "config_groups.group_0.weights."


@pytest.mark.parametrize(
    "path,value,match",
    [
        (_NV + "num_bits", 8, "weights.num_bits = 8"),
        (_NV + "type", "int", "weights.type = 'int'"),
        (_NV + "strategy", "group", "weights.strategy = 'group'"),
        (_NV + "group_size", 32, "weights.group_size = 32"),
        (_NV + "symmetric", False, "symmetric = false"),
        (_NV + "dynamic", True, "weights.dynamic"),
        (
            "config_groups.group_0.input_activations",
            {"num_bits": 8, "type": "float", "strategy": "token"},
            "input_activations.num_bits = 8",
        ),
        ("config_groups.group_0.output_activations", {"num_bits": 4}, "output_activations is set"),
    ],
)
def test_ct_nvfp4_config_refusals(path, value, match):
    qc = quant_config("ct-nvfp4")
    d = qc
    *parents, leaf = path.split(".")
    for p in parents:
        d = d[p]
    d[leaf] = value
    with pytest.raises(InputError, match=match):
        read_quant_config(qc)


def test_fp4_configs():
    s = read_quant_config({"quantization_config": quant_config("ct-nvfp4")})
    assert (s.method, s.qtype, s.group_size, s.checkpoint_format) == (
        "compressed-tensors",
        "nvfp4",
        16,
        "nvfp4-pack-quantized",
    )
    s = read_quant_config(quant_config("modelopt"))
    assert (s.method, s.qtype, s.ignore) == ("modelopt", "nvfp4", ("lm_head", "*.mlp.gate"))
    assert s.skip_reason("model.layers.0.mlp.gate") and s.skip_reason("model.layers.0.mlp.gate_proj") is None
    s = read_quant_config(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "nvfp4", "exclude_modules": ["lm_head"]}}
    )
    assert (s.method, s.qtype) == ("modelopt", "nvfp4")
    with pytest.raises(InputError, match="producer.name must be 'modelopt'"):
        read_quant_config({"producer": {"name": "other"}, "quantization": {"quant_algo": "NVFP4"}})
    s = read_quant_config(quant_config("mxfp4"))
    assert (s.method, s.qtype, s.group_size) == ("mxfp4", "mxfp4", 32)
    assert s.skip_reason("model.layers.3.self_attn.q_proj") and s.skip_reason("model.layers.3.mlp.experts") is None


def test_unsupported_method_refused_before_loading(tmp_path):
    d, _, _ = make_moe_checkpoint(tmp_path / "m", "qwen3_moe", "gptq")
    _rewrite_config(d, lambda c: c.update(quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"}))
    with pytest.raises(InputError, match="quant_method = 'fp8'"):
        load(d, device="cpu")
    qc = quant_config("ct")
    qc["format"] = qc["config_groups"]["group_0"]["format"] = "float-quantized"
    _rewrite_config(d, lambda c: c.update(quantization_config=qc))
    with pytest.raises(InputError, match="format = 'float-quantized'"):
        load(d, device="cpu")


# ---- GPU: the real kernels ---------------------------------------------------------------------


@pytest.mark.gpu
def test_qwen3_moe_gptq_matches_dequantized(tmp_path):
    d, ref, _ = make_moe_checkpoint(tmp_path / "m", "qwen3_moe", "gptq")
    model = load(d, device="cuda", dtype=torch.float16)
    assert sum(isinstance(m, MarlinMoE) for m in model.modules()) == 1
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0)).cuda()
    with torch.no_grad():
        out = model(ids).logits
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    check_logits(model, ref.cuda(), ids)
    blk = model.model.layers[0].mlp  # the block alone against the float64 oracle, same routing
    x = torch.randn(5, 128, device="cuda", dtype=torch.float16, generator=torch.Generator("cuda").manual_seed(1))
    with torch.no_grad():
        _, w, i = blk.gate(x)
        got = blk(x[None])[0]
    exp = moe_reference(
        x.double().cpu().numpy(),
        blk.experts.w13,
        blk.experts.w2,
        w.double().cpu().numpy(),
        i.cpu().numpy(),
        act="float16",
    )
    rel = _rel(got.double().cpu(), torch.from_numpy(exp))
    assert rel <= 1.5 * REL_TOL_FP16, rel
