"""jitmarlin.hf.load_gguf and its pure parts (open_gguf / read_gguf): tiny llama.cpp-style GGUF
files written here with gguf.GGUFWriter (Llama, Qwen2, Qwen3; 2 layers; mixed Q8_0 / Q4_0 / Q5_0 /
Q5_1 / Q4_K / Q6_K linears, F32 norms, F16 embeddings).

Without torch (CI): every linear read back is a QuantizedWeight whose jitmarlin.dequantize equals the
gguf package's own dequantizer on the stored blocks, after undoing llama.cpp's q / k row permutation
(checked against the permutation itself, written below from convert_hf_to_gguf.py's
LlamaModel.permute); the name table against gguf-py's TensorNameMap; the refusals.
With torch and transformers: the model load_gguf builds against transformers' own
AutoModelForCausalLM.from_pretrained(dir, gguf_file=...) (which dequantizes everything), with
MarlinLinear.forward swapped for a dequantize-and-matmul on CPU; on a GPU (marked gpu) the kernels.
"""

import logging
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import jitmarlin
from jitmarlin import InputError
from jitmarlin.hf.gguf_load import (
    _LAYER,
    _TOP,
    check_gguf,
    gguf_arch,
    hf_tensor_name,
    open_gguf,
    read_gguf,
    unpermute_rows,
)
from jitmarlin.weights.quant import QuantizedWeight

QT = gguf.GGMLQuantizationType
LINEARS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# per layer: the mix of types (K-quants need in_features % 256 == 0: only ffn_down here)
TYPES = [
    {
        "attn_q": "Q8_0",
        "attn_k": "Q4_0",
        "attn_v": "Q5_1",
        "attn_output": "Q8_0",
        "ffn_gate": "Q5_0",
        "ffn_up": "Q8_0",
        "ffn_down": "Q4_K",
    },
    {
        "attn_q": "Q4_0",
        "attn_k": "Q8_0",
        "attn_v": "Q8_0",
        "attn_output": "Q5_0",
        "ffn_gate": "Q8_0",
        "ffn_up": "Q5_1",
        "ffn_down": "Q6_K",
    },
]
# Whole-model logits, fp16 model against transformers' float32 one: as tests/test_hf_load.py
# (check_output's whole-matrix figure for fp16, 2e-3; bf16 the same 4 u: 1.6e-2).
REL_TOL_FP16, REL_TOL_BF16 = 2e-3, 1.6e-2


def llama_cpp_permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py, LlamaModel.permute: how llama.cpp stores q_proj / k_proj rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def put_f16(blk, col, vals):
    blk[:, col : col + 2] = np.asarray(vals, "<f2").reshape(-1, 1).view(np.uint8)


def make_blocks(rng, tname, n, k):
    """(N, bytes per row) uint8 blocks of a random (N, K) weight: the gguf package's quantizer where
    it has one; random K-quant blocks with power-of-two super-block scales otherwise (so that
    every d * sc_j and offset is exact in fp16 and jitmarlin.dequantize matches gguf exactly)."""
    if tname in ("Q8_0", "Q4_0", "Q5_0", "Q5_1"):
        return gguf.quants.quantize((rng.standard_normal((n, k)) * 0.05).astype(np.float32), QT[tname])
    bs, ts = gguf.GGML_QUANT_SIZES[QT[tname]]
    nb = n * k // bs
    blk = rng.integers(0, 256, (nb, ts)).astype(np.uint8)
    if tname == "Q4_K":  # d, dmin, 12 B scales/mins, 128 B nibbles
        put_f16(blk, 0, 2.0 ** -rng.integers(13, 15, nb))
        put_f16(blk, 2, 2.0 ** -rng.integers(14, 16, nb))
    elif tname == "Q6_K":  # 128 B ql, 64 B qh, 16 int8 scales, d
        blk[:, 192:208] = rng.integers(-40, 41, (nb, 16)).astype(np.int8).view(np.uint8)
        put_f16(blk, 208, rng.choice([-1.0, 1.0], nb) * 2.0 ** -rng.integers(14, 16, nb))
    elif tname == "IQ4_NL":  # the refusal tests: d, 16 B of 4-bit indices
        put_f16(blk, 0, rng.uniform(1e-3, 2e-3, nb))
    else:
        raise ValueError(tname)
    return blk.reshape(n, -1)


def write_gguf(
    path,
    *,
    arch="llama",
    seed=0,
    hidden=128,
    heads=4,
    kv_heads=2,
    head_dim=None,
    inter=256,
    vocab=256,
    layers=2,
    types=TYPES,
    output="Q8_0",
    bias=False,
    name=None,
    extra=(),
):
    """Write a tiny GGUF model; return {gguf tensor name: (type name, stored array)}."""
    rng = np.random.default_rng(seed)
    hd = head_dim or hidden // heads
    w = gguf.GGUFWriter(str(path), arch)
    if name:
        w.add_name(name)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(vocab)
    stored = {}

    def put(tname, ttype, arr):
        stored[tname] = (ttype, arr)
        w.add_tensor(tname, arr, raw_dtype=None if ttype in ("F32", "F16") else QT[ttype])

    put("token_embd.weight", "F16", (rng.standard_normal((vocab, hidden)) * 0.5).astype(np.float16))
    shapes = {
        "attn_q": (heads * hd, hidden),
        "attn_k": (kv_heads * hd, hidden),
        "attn_v": (kv_heads * hd, hidden),
        "attn_output": (hidden, heads * hd),
        "ffn_gate": (inter, hidden),
        "ffn_up": (inter, hidden),
        "ffn_down": (hidden, inter),
    }
    for i in range(layers):
        put(f"blk.{i}.attn_norm.weight", "F32", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        put(f"blk.{i}.ffn_norm.weight", "F32", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        if arch == "qwen3":
            for nm in ("attn_q_norm", "attn_k_norm"):
                put(f"blk.{i}.{nm}.weight", "F32", (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32))
        for lin, (n, k) in shapes.items():
            t = types[i % len(types)][lin]
            arr = (rng.standard_normal((n, k)) * 0.05).astype(np.float16) if t == "F16" else make_blocks(rng, t, n, k)
            put(f"blk.{i}.{lin}.weight", t, arr)
            if bias and lin in ("attn_q", "attn_k", "attn_v"):
                put(f"blk.{i}.{lin}.bias", "F32", (0.1 * rng.standard_normal(n)).astype(np.float32))
    put("output_norm.weight", "F32", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
    if output is not None:
        put("output.weight", output, make_blocks(rng, output, vocab, hidden))
    for tname, ttype, arr in extra:
        put(tname, ttype, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def deq_stored(ttype, arr):
    return gguf.quants.dequantize(arr, QT[ttype]).astype(np.float64)


# ---- no torch: names, permutation, reading, refusals ------------------------------------------


def test_unpermute_rows_inverts_llama_cpp_permute(rng):
    for n_head, n_kv, hd in ((4, 4, 32), (8, 2, 16), (6, 3, 8), (1, 1, 4)):
        for heads_here, kv in ((n_head, n_head), (n_head, n_kv)):  # q: (n_head, n_head); k: (n_head, n_kv)
            rows = kv * hd
            w = rng.standard_normal((rows, 5))
            g = llama_cpp_permute(w, heads_here, kv)
            perm = unpermute_rows(rows, kv)
            np.testing.assert_array_equal(g[perm], w)
            b = rng.standard_normal(rows)  # q / k biases go through it too
            np.testing.assert_array_equal(llama_cpp_permute(b, heads_here, kv)[perm], b)
    with pytest.raises(InputError, match="heads of an even size"):
        unpermute_rows(96, 5)


@pytest.mark.parametrize("arch", ["LLAMA", "QWEN2", "QWEN3"])
def test_name_table_matches_gguf_tensor_name_map(arch):
    """Our GGUF -> Hugging Face table is the inverse of gguf-py's TensorNameMap (what llama.cpp's
    converter used to name the tensors) for the Hugging Face names of these architectures."""
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch], 3)
    for g, h in _TOP.items():
        assert tmap.get_name(h) == g, (g, h)
        assert hf_tensor_name(g + ".weight", 3) == h + ".weight"
    for g, h in _LAYER.items():
        got = tmap.get_name(f"model.layers.2.{h}")
        if got is None:  # a tensor this architecture lacks
            assert arch != "QWEN3" and g in ("attn_q_norm", "attn_k_norm"), g
            continue
        assert got == f"blk.2.{g}", (g, h, got)
        assert hf_tensor_name(f"blk.2.{g}.bias", 3) == f"model.layers.2.{h}.bias"
    assert hf_tensor_name("blk.3.attn_q.weight", 3) is None  # no such layer
    assert hf_tensor_name("rope_freqs.weight", 3) is None


def test_read_llama_mixed_types(tmp_path):
    f = tmp_path / "tiny.gguf"
    stored = write_gguf(f, extra=[("rope_freqs.weight", "F32", np.ones(16, np.float32))])
    assert check_gguf(f) == len(stored)
    reader = open_gguf(f)
    assert gguf_arch(reader) == "llama"
    items = dict(read_gguf(reader))
    want_names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    want_names |= {
        f"model.layers.{i}.{m}.weight"
        for i in range(2)
        for m in list(LINEARS.values()) + ["input_layernorm", "post_attention_layernorm"]
    }
    assert set(items) == want_names  # rope_freqs skipped
    qtypes = {}
    for gname, (ttype, arr) in stored.items():
        hf = hf_tensor_name(gname, 2)
        if hf is None:
            continue
        item = items[hf]
        ref = deq_stored(ttype, arr)
        if ttype in ("F32", "F16"):
            assert isinstance(item, np.ndarray) and item.dtype == arr.dtype
            np.testing.assert_array_equal(item, arr)
            continue
        assert isinstance(item, QuantizedWeight), gname
        got = jitmarlin.dequantize(item).astype(np.float64)
        assert got.shape == ref.shape == (item.out_features, item.in_features)
        if ".attn_q." in gname:
            got = llama_cpp_permute(got, 4, 4)
        elif ".attn_k." in gname:
            got = llama_cpp_permute(got, 4, 2)
        np.testing.assert_array_equal(got, ref, err_msg=gname)
        qtypes[ttype] = (item.qtype, item.group_size)
    assert qtypes["Q4_K"] == ("uint4", 32) and qtypes["Q6_K"] == ("uint8b128", 16)
    assert qtypes["Q8_0"] == ("uint8b128", 32) and qtypes["Q4_0"] == ("uint4b8", 32)
    # the permutation is not the identity here: unpermuted rows would differ
    q = jitmarlin.dequantize(items["model.layers.0.self_attn.q_proj.weight"])
    assert not np.array_equal(q, deq_stored(*stored["blk.0.attn_q.weight"]))


def test_read_qwen2_biases_unpermuted(tmp_path):
    f = tmp_path / "qwen2.gguf"
    stored = write_gguf(f, arch="qwen2", bias=True, output=None)
    items = dict(read_gguf(open_gguf(f)))
    assert "lm_head.weight" not in items  # tied: no output.weight
    for lin in ("attn_q", "attn_k"):
        np.testing.assert_array_equal(
            jitmarlin.dequantize(items[f"model.layers.1.{LINEARS[lin]}.weight"]),
            deq_stored(*stored[f"blk.1.{lin}.weight"]),
        )
        np.testing.assert_array_equal(items[f"model.layers.1.{LINEARS[lin]}.bias"], stored[f"blk.1.{lin}.bias"][1])


def test_read_llama_bias_permuted_and_f16_linear(tmp_path, caplog):
    types = [dict(TYPES[0], attn_v="F16"), TYPES[1]]
    f = tmp_path / "b.gguf"
    stored = write_gguf(f, bias=True, types=types)
    with caplog.at_level(logging.INFO, logger="jitmarlin.hf"):
        items = dict(read_gguf(open_gguf(f)))
    b = items["model.layers.0.self_attn.k_proj.bias"]
    np.testing.assert_array_equal(llama_cpp_permute(b, 4, 2), stored["blk.0.attn_k.bias"][1])
    v = items["model.layers.0.self_attn.v_proj.weight"]
    assert isinstance(v, np.ndarray) and v.dtype == np.float16
    assert "blk.0.attn_v.weight is stored as F16" in caplog.text


def test_refusals(tmp_path, caplog):
    f = tmp_path / "x.gguf"
    write_gguf(f, arch="gpt2")
    with pytest.raises(InputError, match="architecture 'gpt2' is not taken"):
        list(read_gguf(open_gguf(f)))
    # a layer linear of a type jitmarlin does not run: named with its type
    write_gguf(f, types=[dict(TYPES[0], ffn_up="IQ4_NL"), TYPES[1]])
    with pytest.raises(InputError, match=r"'blk\.0\.ffn_up\.weight' is IQ4_NL"):
        list(read_gguf(open_gguf(f)))
    # ... but an output head of such a type is dequantized by gguf (lm_head stays nn.Linear)
    stored = write_gguf(f, output="IQ4_NL")
    with caplog.at_level(logging.INFO, logger="jitmarlin.hf"):
        items = dict(read_gguf(open_gguf(f)))
    np.testing.assert_array_equal(items["lm_head.weight"], deq_stored(*stored["output.weight"]))
    assert "output.weight is IQ4_NL" in caplog.text
    # truncated: in the tensor data, then in the header
    write_gguf(f)
    data = f.read_bytes()
    for cut, msg in (
        (len(data) - 100, "runs past the end of the file"),
        (200, "truncated or corrupt"),
        (10, "too short"),
    ):
        f.write_bytes(data[:cut])
        with pytest.raises(InputError, match=msg):
            open_gguf(f)
    # an unknown type enum on a tensor: named
    at = data.index(b"blk.1.ffn_down.weight") + len("blk.1.ffn_down.weight")
    nd = struct.unpack_from("<I", data, at)[0]
    bad = bytearray(data)
    struct.pack_into("<I", bad, at + 4 + 8 * nd, 250)
    f.write_bytes(bytes(bad))
    with pytest.raises(InputError, match=r"'blk\.1\.ffn_down\.weight' has ggml type 250"):
        open_gguf(f)
    # header lengths are bounded before gguf-py's reader loops over them
    hdr = struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", 1) + b"x"
    f.write_bytes(hdr + struct.pack("<IIQ", 9, 0, 1 << 40) + bytes(64))
    with pytest.raises(InputError, match="array length"):
        open_gguf(f)
    f.write_bytes(hdr + struct.pack("<IIQ", 9, 9, 1) + bytes(64))
    with pytest.raises(InputError, match="nested or unknown"):
        open_gguf(f)
    f.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(InputError, match="not a GGUF file"):
        open_gguf(f)
    with pytest.raises(InputError, match="not a file"):
        open_gguf(tmp_path)


# ---- torch + transformers: the model --------------------------------------------------------------


def _torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return torch


def _dequant_forward(self, x):
    import torch

    w = torch.from_numpy(jitmarlin.dequantize(self.qweight)).to(x.dtype)
    y = x @ w.T
    return y if self.bias is None else y + self.bias.to(x.dtype)


def _reference(torch, f):
    import transformers

    pytest.importorskip("accelerate")  # from_pretrained(gguf_file=) needs it

    return transformers.AutoModelForCausalLM.from_pretrained(
        str(f.parent), gguf_file=f.name, dtype=torch.float32
    ).eval()


def _rel(out, want) -> float:
    out, want = out.double(), want.double()
    return float((out - want).norm() / want.norm())


def _same_greedy(torch, model, ref, prompt, steps):
    """Greedy tokens of `model` and of the float32 reference agree; a failure names the step and
    the reference's top-2 gap there (the seeds below give gaps of 0.025 or more on every step,
    ten times the fp16 error of these logits)."""
    kw = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        got = model.generate(prompt, **kw)[0, prompt.shape[1] :].tolist()
        exp = ref.generate(prompt, **kw)[0, prompt.shape[1] :].tolist()
    if got != exp:
        t = next(i for i, (a, b) in enumerate(zip(got, exp)) if a != b)
        with torch.no_grad():
            lg = ref(torch.tensor([prompt[0].tolist() + exp[:t]], device=prompt.device)).logits[0, -1]
        top = torch.topk(lg, 2).values.tolist()
        pytest.fail(
            f"greedy tokens differ from step {t}: got {got}, expected {exp}; reference top-2 "
            f"logits there {top} (gap {top[0] - top[1]:.3g})"
        )


# model seeds whose reference greedy paths (prompt: the first 6 or 8 ids below) have no near-tie
CPU_SEED = {"llama": 9, "qwen2": 1, "qwen3": 0}
GPU_SEED = {"llama": 2, "qwen2": 2}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_load_gguf_matches_transformers_cpu(tmp_path, monkeypatch, caplog, arch):
    torch = _torch()
    from jitmarlin.hf import load_gguf
    from jitmarlin.hf.gguf_load import _hf_name_map
    from jitmarlin.torch import MarlinLinear

    f = tmp_path / f"{arch}.gguf"
    kw = dict(heads=2, kv_heads=1, head_dim=128) if arch == "qwen3" else {}  # transformers: qwen3 head_dim 128
    write_gguf(f, arch=arch, bias=arch == "qwen2", seed=CPU_SEED[arch], **kw)
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    with caplog.at_level(logging.INFO, logger="jitmarlin.hf"):
        model = load_gguf(f, device="cpu")
    assert not model.training and next(model.parameters()).dtype == torch.float16
    marlin = {n for n, m in model.named_modules() if isinstance(m, MarlinLinear)}
    assert marlin == {f"model.layers.{i}.{m}" for i in range(2) for m in LINEARS.values()} | {"lm_head"}
    assert "15 linear layers are MarlinLinear" in caplog.text
    ref = _reference(torch, f)
    assert type(ref).__name__ == type(model).__name__
    # transformers' GGUF name map for this model is jitmarlin's table
    assert _hf_name_map(ref, arch) == {g: hf_tensor_name(g, 2) for g in _hf_name_map(ref, arch)}
    refsd = ref.state_dict()
    for name, mod in model.named_modules():  # the same weights, bit for bit
        if isinstance(mod, MarlinLinear):
            np.testing.assert_array_equal(jitmarlin.dequantize(mod.qweight), refsd[name + ".weight"].numpy())
            if mod.bias is not None:
                torch.testing.assert_close(mod.bias.float(), refsd[name + ".bias"].half().float(), rtol=0, atol=0)
    for name, t in model.state_dict().items():
        torch.testing.assert_close(t.float(), refsd[name].half().float(), rtol=0, atol=0)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rel = _rel(model(ids).logits, ref(ids).logits)
    assert rel <= REL_TOL_FP16, rel
    _same_greedy(torch, model, ref, ids[:1, :6], steps=8)


def test_load_gguf_mistral_cpu(tmp_path, monkeypatch):
    """llama.cpp stores Mistral as architecture "llama"; transformers' config reader makes a file
    whose general.name is "mistral" a MistralForCausalLM (its own from_pretrained then fails in
    get_gguf_hf_weights_map: gguf-py has no "mistral" architecture). load_gguf maps the names by the
    file's architecture and undoes the llama permutation: the same logits as the Llama reading."""
    torch = _torch()
    from jitmarlin.hf import load_gguf
    from jitmarlin.torch import MarlinLinear

    write_gguf(tmp_path / "m.gguf", seed=9, name="mistral")
    write_gguf(tmp_path / "l.gguf", seed=9)
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    model = load_gguf(tmp_path / "m.gguf", device="cpu")
    assert type(model).__name__ == "MistralForCausalLM"
    ref = _reference(torch, tmp_path / "l.gguf")
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rel = _rel(model(ids).logits, ref(ids).logits)
    assert rel <= REL_TOL_FP16, rel


def test_load_gguf_tied_bf16_and_refusal_cpu(tmp_path, monkeypatch):
    torch = _torch()
    from jitmarlin.hf import load_gguf
    from jitmarlin.torch import MarlinLinear

    f = tmp_path / "t.gguf"
    write_gguf(f, output=None, seed=3)
    monkeypatch.setattr(MarlinLinear, "forward", _dequant_forward)
    model = load_gguf(f, device="cpu", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ref = _reference(torch, f)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        rel = _rel(model(ids).logits, ref(ids).logits)
    assert rel <= REL_TOL_BF16, rel
    write_gguf(f, types=[TYPES[0], dict(TYPES[1], attn_output="IQ4_NL")])
    with pytest.raises(InputError, match=r"'blk\.1\.attn_output\.weight' is IQ4_NL"):
        load_gguf(f, device="cpu")
    with pytest.raises(InputError, match="dtype must be float16 or bfloat16"):
        load_gguf(f, device="cpu", dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_load_gguf_kernels_match_transformers(tmp_path, arch):
    torch = _torch()
    from jitmarlin.hf import load_gguf

    f = tmp_path / f"{arch}.gguf"
    write_gguf(f, arch=arch, bias=arch == "qwen2", seed=GPU_SEED[arch])
    model = load_gguf(f, device="cuda", dtype=torch.float16)
    ref = _reference(torch, f).cuda()
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0)).cuda()
    with torch.no_grad():
        out = model(ids).logits
        want = ref(ids).logits
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    rel = _rel(out.float(), want)
    assert rel <= REL_TOL_FP16, rel
    _same_greedy(torch, model, ref, ids[:1, :8], steps=16)
