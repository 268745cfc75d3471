"""jitmarlin.hf's pure parts (no torch): read_quant_config on each method's published config and
every refusal, and read_checkpoint on tiny synthetic checkpoints written here in each format's
published layout (the packers below are written from the layouts, independently of jitmarlin's
converters and packing). Each quantized module's jitmarlin.dequantize is checked against the
dequantisation computed here in float64 from the codes, scales and zero points; plain tensors
(bf16 and float8 included) must come back bit for bit; malformed directories and files must be
refused with InputError."""

import json
import os
import struct

import numpy as np
import pytest

safetensors_numpy = pytest.importorskip("safetensors.numpy")

import jitmarlin
from jitmarlin import InputError
from jitmarlin.hf import QuantScheme, RawBits, read_checkpoint, read_quant_config

# ---- packers (from the published layouts) ------------------------------------------------------

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ: nibble i of a word holds column 8c + AWQ_ORDER[i]


def pack_along(codes, bits, axis):
    """Unsigned codes -> int32 words along `axis`, low bits first (GPTQ, compressed-tensors):
    word r holds codes p*r .. p*r + p - 1 (p = 32 / bits), code p*r + i at bits [bits*i, bits*(i+1)).
    Pads the axis with zero codes to whole words."""
    per = 32 // bits
    c = np.moveaxis(np.asarray(codes, dtype=np.uint64), axis, -1)
    pad = -c.shape[-1] % per
    c = np.concatenate([c, np.zeros(c.shape[:-1] + (pad,), np.uint64)], axis=-1)
    c = c.reshape(c.shape[:-1] + (c.shape[-1] // per, per))
    words = np.zeros(c.shape[:-1], np.uint64)
    for i in range(per):
        words |= c[..., i] << np.uint64(bits * i)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), -1, axis)


def pack_awq(codes):
    """(R, C) 4-bit codes -> (R, C / 8) int32, AutoAWQ's GEMM interleave."""
    r, c = codes.shape
    out = np.zeros((r, c // 8), np.uint64)
    for i, col in enumerate(AWQ_ORDER):
        out |= np.asarray(codes[:, col::8], np.uint64) << np.uint64(4 * i)
    return out.astype(np.uint32).view(np.int32)


def fp16_scales(rng, shape):
    return rng.uniform(2e-3, 3e-2, shape).astype(np.float16)


def act_order(rng, k, gs):
    g_idx = np.empty(k, np.int32)
    g_idx[rng.permutation(k)] = np.arange(k) // gs
    return g_idx


# ---- writing checkpoints -----------------------------------------------------------------------

ST_DTYPE = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "bool": "BOOL",
}


def raw_safetensors(path, entries, *, header_len=None, extra=b"", edit=None):
    """A safetensors file written byte by byte: entries [(name, ST dtype, shape, bytes)].
    `edit(header_dict)` tampers with the header; header_len overrides the length field."""
    header, data, pos = {}, b"", 0
    for name, dt, shape, raw in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [pos, pos + len(raw)]}
        data += raw
        pos += len(raw)
    if edit:
        edit(header)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if header_len is None else header_len) + h + data + extra)


def write_model(d, qc, tensors, shards=1, *, raw=(), model_type="llama"):
    """config.json with quantization_config `qc`, and `tensors` (NumPy) in `shards` files
    (round-robin, so a module's tensors straddle shards) plus an index for shards > 1.
    raw: extra (name, ST dtype, shape, bytes) entries, written into the first shard."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": model_type, "quantization_config": qc}))
    names = sorted(tensors)
    files = (
        ["model.safetensors"]
        if shards == 1
        else [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    )
    weight_map = {}
    for i, fn in enumerate(files):
        part = {n: np.ascontiguousarray(tensors[n]) for n in names[i::shards]}
        ents = [(n, ST_DTYPE[a.dtype.name], a.shape, a.tobytes()) for n, a in part.items()]
        if i == 0:
            ents += list(raw)
        raw_safetensors(d / fn, ents)
        weight_map.update({e[0]: fn for e in ents})
    if shards > 1:
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return d


def gptq_qc(bits=4, gs=64, sym=True, desc_act=False, fmt="gptq"):
    return {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": gs,
        "sym": sym,
        "desc_act": desc_act,
        "checkpoint_format": fmt,
        "damp_percent": 0.01,
        "true_sequential": True,
    }


def awq_qc(gs=64):
    return {
        "quant_method": "awq",
        "bits": 4,
        "group_size": gs,
        "version": "gemm",
        "zero_point": True,
        "modules_to_not_convert": ["lm_head"],
    }


def ct_qc(bits=4, gs=64, sym=True, strategy="group", actorder=None):
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "ignore": ["lm_head"],
        "quantization_status": "compressed",
        "sparsity_config": {},
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "input_activations": None,
                "output_activations": None,
                "weights": {
                    "num_bits": bits,
                    "type": "int",
                    "strategy": strategy,
                    "group_size": gs if strategy == "group" else None,
                    "symmetric": sym,
                    "actorder": actorder,
                    "dynamic": False,
                    "observer": "minmax",
                },
            }
        },
    }


LINEARS = {"model.layers.0.self_attn.q_proj": (128, 256), "model.layers.0.mlp.down_proj": (64, 512)}


def plain_tensors(rng):
    return {
        "model.embed_tokens.weight": rng.standard_normal((32, 16)).astype(np.float16),
        "model.norm.weight": rng.standard_normal(16).astype(np.float32),
        "lm_head.weight": rng.standard_normal((32, 16)).astype(np.float16),
        "model.layers.0.self_attn.q_proj.bias": rng.standard_normal(128).astype(np.float16),
    }


def gptq_layer(rng, n, k, bits, gs, sym, fmt, act):
    """GPTQ tensors of one linear and its float64 dequantisation (N, K) and offset magnitudes."""
    g, top, half = k // gs, (1 << bits) - 1, 1 << (bits - 1)
    q = rng.integers(0, top + 1, (k, n))
    s = fp16_scales(rng, (g, n))
    if sym:
        z = np.full((g, n), half)
    else:
        z = rng.integers(1 if fmt == "gptq" else 0, top + (2 if fmt == "gptq" else 1), (g, n))
    stored = z - 1 if fmt == "gptq" else z  # v1 stores zero - 1
    g_idx = act_order(rng, k, gs) if act else (np.arange(k) // gs).astype(np.int32)
    tens = {"qweight": pack_along(q, bits, 0), "qzeros": pack_along(stored, bits, 1), "scales": s, "g_idx": g_idx}
    sv = s.astype(np.float64)
    want = (q.T - z[g_idx].T) * sv[g_idx].T
    return tens, want, np.abs((half - z[g_idx].T) * sv[g_idx].T)


def check_deq(qw, want, offsets, sdt="float16"):
    """dequantize(qw) == want exactly for symmetric types; within the rounding of the stored
    offsets m = (bias - z) * s (half an ulp of the scale dtype) and float32 otherwise."""
    got = jitmarlin.dequantize(qw).astype(np.float64)
    assert got.shape == want.shape
    if qw.offsets is None:
        np.testing.assert_array_equal(got, want.astype(np.float32))
        return
    rel = 2.0**-11 if sdt == "float16" else 2.0**-8
    bound = rel * offsets + 2.0**-24 * np.abs(want) + 2.0**-25
    err = np.abs(got - want)
    assert np.all(err <= bound), float((err / bound).max())


def collect(path, scheme=None):
    out = {}
    for name, item in read_checkpoint(path, scheme):
        assert name not in out
        out[name] = item
    return out


# ---- read_quant_config -------------------------------------------------------------------------


def test_config_gptq():
    s = read_quant_config({"model_type": "llama", "quantization_config": gptq_qc(desc_act=True)})
    assert s == QuantScheme("gptq", 4, 64, True, True, "gptq", (), "uint4b8")
    s = read_quant_config(gptq_qc(bits=8, gs=-1, sym=False, fmt="gptq_v2"))  # the bare object
    assert (s.qtype, s.group_size, s.checkpoint_format) == ("uint8", -1, "gptq_v2")
    qc = gptq_qc()
    del qc["checkpoint_format"], qc["sym"]
    qc["format"] = "gptq_v2"  # GPTQModel's spelling
    qc["dynamic"] = {"-:.*mlp.*": {}, "+:.*q_proj": {"bits": 4}}
    s = read_quant_config({"quantization_config": qc})
    assert (s.checkpoint_format, s.sym, s.ignore) == ("gptq_v2", True, (".*mlp.*",))
    assert s.skip_reason("model.layers.1.mlp.up_proj") and s.skip_reason("model.layers.1.self_attn.q_proj") is None
    del qc["format"], qc["dynamic"]
    assert read_quant_config(qc).checkpoint_format == "gptq"  # absent: v1


def test_config_awq():
    s = read_quant_config({"quantization_config": awq_qc(128)})
    assert s == QuantScheme("awq", 4, 128, False, False, None, ("lm_head",), "uint4")
    assert s.skip_reason("lm_head") and s.skip_reason("model.layers.0.mlp") is None
    s = read_quant_config(
        {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "version": "GEMM", "zero_point": True}
    )  # AutoAWQ's spelling
    assert (s.bits, s.group_size, s.ignore) == (4, 64, ())


def test_config_compressed_tensors():
    s = read_quant_config({"quantization_config": ct_qc()})
    assert s == QuantScheme("compressed-tensors", 4, 64, True, False, None, ("lm_head",), "uint4b8")
    s = read_quant_config(ct_qc(bits=8, sym=False, strategy="channel"))
    assert (s.qtype, s.group_size) == ("uint8", -1)
    assert read_quant_config(ct_qc(actorder="group")).desc_act
    assert not read_quant_config(ct_qc(actorder="weight")).desc_act
    qc = ct_qc()
    qc["ignore"] = ["lm_head", "re:.*gate$"]
    s = read_quant_config(qc)
    assert s.skip_reason("model.layers.3.mlp.gate") and s.skip_reason("model.layers.3.mlp.gate_proj") is None
    qc["format"] = "mixed-precision"  # per-group format
    qc["config_groups"]["group_0"]["format"] = "pack-quantized"
    assert read_quant_config(qc).qtype == "uint4b8"


def _set(qc, path, value):
    d = qc
    *parents, leaf = path.split(".")
    for p in parents:
        d = d[p]
    if value is _DEL:
        del d[leaf]
    else:
        d[leaf] = value
    return qc


_DEL = object()
_W = "config_groups.group_0.weights."


@pytest.mark.parametrize(
    "qc,path,value,match",
    [
        (gptq_qc(), "quant_method", "bitsandbytes", "quant_method = 'bitsandbytes'"),
        (gptq_qc(), "quant_method", "GPTQ", "quant_method = 'GPTQ'"),
        (gptq_qc(), "quant_method", 5, "quant_method must be str"),
        (gptq_qc(), "quant_method", _DEL, "quant_method is required"),
        (gptq_qc(), "bits", 3, "bits = 3"),
        (gptq_qc(), "bits", 2, "bits = 2"),
        (gptq_qc(), "bits", "4", "bits must be int, got str"),
        (gptq_qc(), "bits", True, "bits must be int, got bool"),
        (gptq_qc(), "bits", 4.0, "bits must be int, got float"),
        (gptq_qc(), "bits", _DEL, "bits is required"),
        (gptq_qc(), "group_size", 0, "group_size = 0"),
        (gptq_qc(), "group_size", 100, "group_size = 100"),
        (gptq_qc(), "group_size", -2, "group_size = -2"),
        (gptq_qc(), "group_size", [128], "group_size must be int, got list"),
        (gptq_qc(), "sym", "true", "sym must be bool, got str"),
        (gptq_qc(), "sym", 1, "sym must be bool, got int"),
        (gptq_qc(), "desc_act", 0, "desc_act must be bool"),
        (gptq_qc(), "checkpoint_format", "marlin", "checkpoint_format = 'marlin'"),
        (gptq_qc(), "checkpoint_format", 2, "checkpoint_format must be str"),
        (gptq_qc(), "is_marlin_format", True, "is_marlin_format"),
        (gptq_qc(), "pack_dtype", "int16", "pack_dtype = 'int16'"),
        (gptq_qc(), "dynamic", {r"+:.*down": {"bits": 8}}, "dynamic"),
        (gptq_qc(), "dynamic", ["-:x"], "dynamic must be dict"),
        (awq_qc(), "bits", 8, "bits = 8"),
        (awq_qc(), "version", "gemv", "version = 'gemv'"),
        (awq_qc(), "zero_point", False, "zero_point = false"),
        (awq_qc(), "group_size", 40, "group_size = 40"),
        (awq_qc(), "modules_to_not_convert", "lm_head", "modules_to_not_convert must be a list of strings"),
        (awq_qc(), "modules_to_not_convert", [1], "modules_to_not_convert must be a list of strings"),
        (ct_qc(), "format", "float-quantized", "format = 'float-quantized'"),
        (ct_qc(), "config_groups", {}, "config_groups is empty"),
        (ct_qc(), "config_groups", [], "config_groups must be dict"),
        (ct_qc(), "config_groups.group_0.input_activations", {"num_bits": 8}, "input_activations is set"),
        (ct_qc(), _W + "type", "float", "type = 'float'"),
        (ct_qc(), _W + "num_bits", 3, "num_bits = 3"),
        (ct_qc(), _W + "num_bits", "4", "num_bits must be int"),
        (ct_qc(), _W + "strategy", "block", "strategy = 'block'"),
        (ct_qc(), _W + "group_size", None, "group_size is required"),
        (ct_qc(), _W + "group_size", 24, "group_size = 24"),
        (ct_qc(), _W + "symmetric", "yes", "symmetric must be bool"),
        (ct_qc(), _W + "actorder", "sometimes", "actorder = 'sometimes'"),
        (ct_qc(), _W + "dynamic", True, "dynamic"),
        (ct_qc(), "ignore", "lm_head", "ignore must be a list of strings"),
        (ct_qc(), "sparsity_config", {"format": "sparse-24-bitmask"}, "sparsity_config"),
    ],
)
def test_config_refusals(qc, path, value, match):
    with pytest.raises(InputError, match=match.replace("+", r"\+").replace("[", r"\[")):
        read_quant_config({"quantization_config": _set(qc, path, value)})


def test_config_refusals_whole():
    with pytest.raises(InputError, match="no quantization_config"):
        read_quant_config({"model_type": "llama"})
    with pytest.raises(InputError, match="quantization_config must be an object"):
        read_quant_config({"quantization_config": [1]})
    with pytest.raises(InputError, match="must be a JSON object"):
        read_quant_config([{"quant_method": "gptq"}])
    qc = ct_qc()
    qc["config_groups"]["group_1"] = json.loads(json.dumps(qc["config_groups"]["group_0"]))
    qc["config_groups"]["group_1"]["weights"]["num_bits"] = 8
    with pytest.raises(InputError, match="mixed-scheme"):
        read_quant_config(qc)


# ---- read_checkpoint: each format --------------------------------------------------------------


@pytest.mark.parametrize(
    "bits,sym,fmt,act",
    [
        (4, True, "gptq", False),
        (4, True, "gptq", True),
        (4, False, "gptq", False),
        (4, False, "gptq_v2", True),
        (8, True, "gptq_v2", False),
        (8, False, "gptq", True),
    ],
)
def test_gptq_checkpoint(rng, tmp_path, bits, sym, fmt, act):
    gs = 64
    tensors, wants = plain_tensors(rng), {}
    for mod, (n, k) in LINEARS.items():
        t, want, off = gptq_layer(rng, n, k, bits, gs, sym, fmt, act)
        tensors.update({f"{mod}.{p}": v for p, v in t.items()})
        wants[mod] = (want, off)
    d = write_model(tmp_path / "m", gptq_qc(bits, gs, sym, act, fmt), tensors)
    got = collect(d)  # scheme from config.json
    assert set(got) == set(LINEARS) | set(plain_tensors(rng))
    for mod, (want, off) in wants.items():
        qw = got[mod]
        assert isinstance(qw, jitmarlin.QuantizedWeight)
        assert qw.qtype == read_quant_config(gptq_qc(bits, gs, sym, act, fmt)).qtype
        assert (qw.perm is not None) == act
        check_deq(qw, want, off)
    for name in plain_tensors(rng):
        np.testing.assert_array_equal(got[name], tensors[name])
        assert type(got[name]) is np.ndarray and got[name].dtype == tensors[name].dtype


@pytest.mark.parametrize("gs", [64, 128])
def test_awq_checkpoint(rng, tmp_path, gs):
    tensors, wants = plain_tensors(rng), {}
    for mod, (n, k) in LINEARS.items():
        g = k // gs
        q, z = rng.integers(0, 16, (k, n)), rng.integers(0, 16, (g, n))
        s = fp16_scales(rng, (g, n))
        tensors.update({f"{mod}.qweight": pack_awq(q), f"{mod}.qzeros": pack_awq(z), f"{mod}.scales": s})
        grp = np.arange(k) // gs
        sv = s.astype(np.float64)
        wants[mod] = ((q.T - z[grp].T) * sv[grp].T, np.abs((8 - z[grp].T) * sv[grp].T))
    d = write_model(tmp_path / "m", awq_qc(gs), tensors)
    got = collect(d, read_quant_config(json.loads((d / "config.json").read_text())))
    for mod, (want, off) in wants.items():
        assert got[mod].qtype == "uint4" and got[mod].group_size == gs
        check_deq(got[mod], want, off)


def ct_layer(rng, n, k, bits, gs, sym, act, zp_packed=True):
    """compressed-tensors tensors: weight_packed (N, K/p) of unsigned codes q + 2^(bits-1),
    weight_scale (N, G), weight_shape, zero points (packed along N, unsigned) / g_idx."""
    half = 1 << (bits - 1)
    g = 1 if gs == -1 else k // gs
    q = rng.integers(-half, half, (n, k))
    s = fp16_scales(rng, (n, g))
    grp = act_order(rng, k, gs) if act else np.arange(k) // (k if gs == -1 else gs)
    t = {"weight_packed": pack_along(q + half, bits, 1), "weight_scale": s, "weight_shape": np.array([n, k], np.int64)}
    zp = np.zeros((n, g), np.int64)
    if not sym:
        zp = rng.integers(-half, half, (n, g))
        t["weight_zero_point"] = pack_along(zp + half, bits, 0) if zp_packed else zp.astype(np.int8)
    if act:
        t["weight_g_idx"] = grp.astype(np.int32)
    sv = s.astype(np.float64)
    return t, (q - zp[:, grp]) * sv[:, grp], np.abs(zp[:, grp] * sv[:, grp])


@pytest.mark.parametrize(
    "bits,gs,sym,act,strategy",
    [
        (4, 64, True, False, "group"),
        (8, 64, False, False, "group"),
        (4, 64, True, True, "group"),
        (4, -1, True, False, "channel"),
        (4, 128, False, False, "group"),
    ],
)
def test_compressed_tensors_checkpoint(rng, tmp_path, bits, gs, sym, act, strategy):
    tensors, wants = plain_tensors(rng), {}
    for i, (mod, (n, k)) in enumerate(LINEARS.items()):
        t, want, off = ct_layer(rng, n, k, bits, gs, sym, act, zp_packed=i == 0)
        tensors.update({f"{mod}.{p}": v for p, v in t.items()})
        wants[mod] = (want, off)
    d = write_model(tmp_path / "m", ct_qc(bits, gs, sym, strategy, "group" if act else None), tensors)
    got = collect(d)
    for mod, (want, off) in wants.items():
        assert got[mod].qtype == read_quant_config(ct_qc(bits, gs, sym, strategy)).qtype
        assert (got[mod].perm is not None) == act
        check_deq(got[mod], want, off)


def test_compressed_tensors_bf16_scales(rng, tmp_path):
    """bf16 weight_scale (the common case with bf16 models): kept as bf16 scales, exact."""
    n, k, gs = 64, 256, 64
    t, _, _ = ct_layer(rng, n, k, 4, gs, True, False)
    bits16 = (rng.uniform(1e-3, 1e-1, (n, k // gs)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    sv = (bits16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    del t["weight_scale"]
    mod = "model.layers.0.mlp.up_proj"
    d = write_model(
        tmp_path / "m",
        ct_qc(4, gs),
        {f"{mod}.{p}": v for p, v in t.items()},
        raw=[(f"{mod}.weight_scale", "BF16", (n, k // gs), bits16.tobytes())],
    )
    qw = collect(d)[mod]
    assert qw.scale_dtype == "bfloat16"
    q = (
        np.array(
            [[(int(w) >> (4 * i)) & 15 for w in row for i in range(8)] for row in t["weight_packed"].view(np.uint32)],
            dtype=np.int64,
        )
        - 8
    )
    check_deq(qw, q * np.repeat(sv, gs, axis=1), None)


def test_sym_config_with_zero_points_refused(rng, tmp_path):
    mod = "model.layers.0.mlp.up_proj"
    t, _, _ = ct_layer(rng, 64, 128, 4, 64, False, False)
    d = write_model(tmp_path / "m", ct_qc(4, 64, True), {f"{mod}.{p}": v for p, v in t.items()})
    with pytest.raises(InputError, match=f"{mod}.*symmetric"):
        collect(d)


# ---- sharding, plain tensors, the reader itself ------------------------------------------------


def test_sharded_index(rng, tmp_path):
    tensors = plain_tensors(rng)
    for mod, (n, k) in LINEARS.items():
        t, _, _ = gptq_layer(rng, n, k, 4, 128, True, "gptq", True)
        tensors.update({f"{mod}.{p}": v for p, v in t.items()})
    one = collect(write_model(tmp_path / "one", gptq_qc(gs=128, desc_act=True), tensors))
    d = write_model(tmp_path / "three", gptq_qc(gs=128, desc_act=True), tensors, shards=3)
    homes = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    mod = "model.layers.0.self_attn.q_proj"
    assert len({homes[f"{mod}.{p}"] for p in ("qweight", "qzeros", "scales", "g_idx")}) > 1  # straddles
    three = collect(d)
    assert set(three) == set(one)
    for name, item in one.items():
        if isinstance(item, np.ndarray):
            np.testing.assert_array_equal(three[name], item)
        else:
            np.testing.assert_array_equal(jitmarlin.dequantize(three[name]), jitmarlin.dequantize(item))
            np.testing.assert_array_equal(three[name].perm, item.perm)
    # an index that puts a tensor in a shard which does not hold it
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.norm.weight"] = (
        "model-00003-of-00003.safetensors"
        if homes["model.norm.weight"] != "model-00003-of-00003.safetensors"
        else "model-00001-of-00003.safetensors"
    )
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(InputError, match="model.norm.weight"):
        read_checkpoint(d)


def test_plain_tensors_bit_exact(rng, tmp_path):
    """bf16 (random bit patterns, NaNs and infinities included) and float8 come back as RawBits,
    bit for bit; the other dtypes as plain arrays equal to what safetensors.numpy reads."""
    bf = rng.integers(0, 1 << 16, (3, 5), dtype=np.uint16)
    f8 = rng.integers(0, 256, 7, dtype=np.uint8)
    d = write_model(
        tmp_path / "m",
        gptq_qc(),
        {},
        raw=[
            ("a.bf16", "BF16", (3, 5), bf.tobytes()),
            ("a.f8", "F8_E4M3", (7,), f8.tobytes()),
            ("a.e5m2", "F8_E5M2", (7,), f8.tobytes()),
            ("a.empty", "BF16", (0, 4), b""),
        ],
    )
    got = collect(d)
    assert isinstance(got["a.bf16"], RawBits) and got["a.bf16"].stored_dtype == "bfloat16"
    np.testing.assert_array_equal(got["a.bf16"].view(np.ndarray), bf)
    assert got["a.bf16"].dtype == np.uint16 and got["a.bf16"].shape == (3, 5)
    want = (bf.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(got["a.bf16"].values().view(np.uint32), want.view(np.uint32))
    assert got["a.f8"].stored_dtype == "float8_e4m3fn" and got["a.e5m2"].stored_dtype == "float8_e5m2"
    np.testing.assert_array_equal(got["a.f8"].view(np.ndarray), f8)
    assert got["a.f8"].values()[f8 == 0x38][:1].tolist() in ([], [1.0])  # e4m3 0x38 = 1.0
    assert got["a.e5m2"].values()[f8 == 0x3C][:1].tolist() in ([], [1.0])  # e5m2 0x3c = 1.0
    assert got["a.empty"].shape == (0, 4)

    arrays = {
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal(4).astype(np.float32),
        "i64": rng.integers(-9, 9, (2, 2)),
        "i8": rng.integers(-9, 9, 5).astype(np.int8),
        "u8": rng.integers(0, 255, 3).astype(np.uint8),
        "b": np.array([True, False, True]),
        "scalar": np.array(3.5, np.float32),
    }
    d2 = tmp_path / "m2"
    d2.mkdir()
    (d2 / "config.json").write_text(json.dumps({"quantization_config": gptq_qc()}))
    safetensors_numpy.save_file(arrays, str(d2 / "model.safetensors"))  # the library's own writer
    got = collect(d2)
    ref = safetensors_numpy.load_file(str(d2 / "model.safetensors"))
    assert set(got) == set(ref)
    for k, v in ref.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        np.testing.assert_array_equal(got[k], v)
        assert got[k].flags.writeable


# ---- trust checks ------------------------------------------------------------------------------


def _tiny(tmp_path, rng, name="m"):
    tensors = plain_tensors(rng)
    t, _, _ = gptq_layer(rng, 64, 128, 4, 64, True, "gptq", False)
    tensors.update({f"model.layers.0.mlp.up_proj.{p}": v for p, v in t.items()})
    return write_model(tmp_path / name, gptq_qc(), tensors)


def test_paths_must_stay_inside(rng, tmp_path):
    d = _tiny(tmp_path, rng)
    outside = tmp_path / "outside.safetensors"
    os.replace(d / "model.safetensors", outside)
    (d / "model.safetensors").symlink_to(outside)  # symlink leading out
    with pytest.raises(InputError, match="outside the model directory"):
        read_checkpoint(d)
    os.remove(d / "model.safetensors")
    for bad in ("../outside.safetensors", str(outside), "sub/../../outside.safetensors", "a\\b.safetensors"):
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"model.norm.weight": bad}}))
        with pytest.raises(InputError, match="relative|plain"):
            read_checkpoint(d)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "passwd"}}))
    with pytest.raises(InputError, match="not a .safetensors"):
        read_checkpoint(d)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "missing.safetensors"}}))
    with pytest.raises(InputError, match="does not exist"):
        read_checkpoint(d)
    (d / "model.safetensors.index.json").write_text('{"weight_map": {"x": "a.safetensors", "x": "b.safetensors"}}')
    with pytest.raises(InputError, match="duplicate key"):
        read_checkpoint(d)
    (d / "model.safetensors.index.json").write_text('{"weight_map": ')
    with pytest.raises(InputError, match="not valid JSON"):
        read_checkpoint(d)


def test_hub_cache_snapshot_symlinks_are_followed(rng, tmp_path):
    """The Hugging Face hub cache: snapshots/<rev>/file -> ../../blobs/<sha>. Followed."""
    src = _tiny(tmp_path, rng, "src")
    repo = tmp_path / "models--org--tiny"
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for fn in ("config.json", "model.safetensors"):
        os.replace(src / fn, repo / "blobs" / (fn + ".blob"))
        (snap / fn).symlink_to(os.path.join("..", "..", "blobs", fn + ".blob"))
    assert "model.layers.0.mlp.up_proj" in collect(snap)
    other = tmp_path / "elsewhere.safetensors"  # but not elsewhere
    os.replace(repo / "blobs" / "model.safetensors.blob", other)
    os.remove(snap / "model.safetensors")
    (snap / "model.safetensors").symlink_to(other)
    with pytest.raises(InputError, match="outside the model directory"):
        read_checkpoint(snap)


GOOD = [
    ("a", "F32", (2, 2), np.ones(4, np.float32).tobytes()),
    ("b", "I32", (3,), np.arange(3, dtype=np.int32).tobytes()),
]


def _drop_a(h):
    del h["a"]


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(extra=b"xx"), "after the last tensor"),
        (dict(edit=lambda h: h["a"].update(dtype="F8_E8M0")), "dtype 'F8_E8M0' is not supported"),
        (dict(edit=lambda h: h["a"].update(dtype=7)), "dtype 7 is not supported"),
        (dict(edit=lambda h: h["a"].update(shape=[2, 3])), "need 24"),
        (dict(edit=lambda h: h["a"].update(shape=[2, -2])), "non-negative"),
        (dict(edit=lambda h: h["a"].update(shape=[2.0, 2])), "non-negative integers"),
        (dict(edit=lambda h: h["a"].update(shape="2x2")), "shape must be a list"),
        (dict(edit=lambda h: h["b"].update(data_offsets=[8, 20])), "overlaps"),
        (dict(edit=lambda h: h["b"].update(data_offsets=[20, 32])), "truncated|gap"),
        (dict(edit=lambda h: h["b"].update(data_offsets=[16, 4])), "begin <= end"),
        (dict(edit=lambda h: h["b"].update(data_offsets=[16])), "data_offsets"),
        (dict(edit=_drop_a), "gap"),
        (dict(edit=lambda h: h.update(c=[1])), "entry must be an object"),
        (dict(edit=lambda h: h.update(__metadata__={"k": 1})), "__metadata__"),
        (dict(header_len=1 << 40), "exceeds the limit"),
        (dict(header_len=5000), "truncated"),
    ],
)
def test_malformed_safetensors_refused(rng, tmp_path, kw, match):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"quantization_config": gptq_qc()}))
    raw_safetensors(d / "model.safetensors", GOOD, **kw)
    with pytest.raises(InputError, match=match):
        read_checkpoint(d)  # refused before any tensor is read


def test_truncated_and_odd_files_refused(rng, tmp_path):
    d = _tiny(tmp_path, rng)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-10])  # cut in the last tensor
    with pytest.raises(InputError, match="truncated"):
        read_checkpoint(d)
    f.write_bytes(data[:5])
    with pytest.raises(InputError, match="too short"):
        read_checkpoint(d)
    f.write_bytes(struct.pack("<Q", 4) + b"[1] ")
    with pytest.raises(InputError, match="not a JSON object"):
        read_checkpoint(d)
    f.write_bytes(struct.pack("<Q", 8) + b'{"a": 1,')
    with pytest.raises(InputError, match="not valid JSON"):
        read_checkpoint(d)
    f.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{}")
    with pytest.raises(InputError):
        read_checkpoint(d)
    deep = b"{" + b'"a":' * 0 + b'"x": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    f.write_bytes(struct.pack("<Q", len(deep)) + deep)
    with pytest.raises(InputError):
        read_checkpoint(d)
    os.remove(f)
    with pytest.raises(InputError, match="no \\*.safetensors"):
        read_checkpoint(d)
    (d / "config.json").write_text("{nope")
    with pytest.raises(InputError, match="config.json is not valid JSON"):
        read_checkpoint(d)
    with pytest.raises(InputError, match="not a directory"):
        read_checkpoint(tmp_path / "nowhere")


def test_file_shrinking_after_the_header_check(rng, tmp_path):
    d = _tiny(tmp_path, rng)
    it = read_checkpoint(d)  # headers checked here
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:200])
    with pytest.raises(InputError, match="changed or truncated"):
        list(it)


def test_inconsistent_quantized_modules_refused(rng, tmp_path):
    mod = "model.layers.0.mlp.up_proj"
    t, _, _ = gptq_layer(rng, 64, 128, 4, 64, True, "gptq", False)
    d = write_model(tmp_path / "a", gptq_qc(), {f"{mod}.{p}": v for p, v in t.items() if p != "scales"})
    with pytest.raises(InputError, match=f"{mod}.*lacks.*{mod}.scales"):
        read_checkpoint(d)
    both = {f"{mod}.{p}": v for p, v in t.items()}
    both[f"{mod}.weight"] = np.zeros((64, 128), np.float16)
    with pytest.raises(InputError, match="both a plain weight and quantized"):
        read_checkpoint(write_model(tmp_path / "b", gptq_qc(), both))
    bad = {f"{mod}.{p}": v for p, v in t.items()}
    bad[f"{mod}.scales"] = bad[f"{mod}.scales"][:, :32]  # scales for 32 outputs, qweight 64
    with pytest.raises(InputError, match=f"{mod} \\(gptq\\).*scales"):
        collect(write_model(tmp_path / "c", gptq_qc(), bad))
    d = write_model(tmp_path / "d", gptq_qc(gs=128), {f"{mod}.{p}": v for p, v in t.items()})
    with pytest.raises(InputError, match=f"{mod}.*group_size=128"):  # config disagrees with the tensors
        collect(d)
    bad = {f"{mod}.{p}": v for p, v in t.items()}
    bad[f"{mod}.qweight"] = bad[f"{mod}.qweight"].astype(np.float32)
    with pytest.raises(InputError, match=f"{mod}.*qweight must be an integer"):
        collect(write_model(tmp_path / "e", gptq_qc(), bad))
    with pytest.raises(InputError, match="asymmetric GPTQ"):
        collect(
            write_model(tmp_path / "f", gptq_qc(sym=False), {f"{mod}.{p}": v for p, v in t.items() if p != "qzeros"})
        )
    with pytest.raises(InputError, match="scheme must be a QuantScheme"):
        read_checkpoint(d, {"quant_method": "gptq"})
