"""The `quantization_config` of a Hugging Face config.json -> QuantScheme (pure: no torch).

config.json is untrusted input: every field read here is type-checked (a JSON `true` is not an
int, a string "4" is not a number) and every value jitmarlin cannot load is refused with an
InputError that names the field and the value. Fields this module does not read (calibration
settings such as damp_percent, dataset, observer) are ignored.

Published layouts relied on:
  GPTQ  (transformers GPTQConfig, AutoGPTQ / GPTQModel quantize_config):  quant_method "gptq",
        bits, group_size (-1: per channel), sym, desc_act, checkpoint_format ("gptq" = v1, the
        default when absent; "gptq_v2"; GPTQModel also writes it as "format"), pack_dtype
        (GPTQModel, "int32" only), dynamic (GPTQModel per-module overrides: only the "-:" skip
        rules are accepted), is_marlin_format / is_bitblas_format (AutoGPTQ <= 0.7: refused).
  AWQ   (transformers AwqConfig, AutoAWQ quant_config):  quant_method "awq", bits / w_bit,
        group_size / q_group_size, zero_point, version ("gemm"; the default when absent),
        modules_to_not_convert.
  compressed-tensors (llm-compressor):  quant_method "compressed-tensors", format
        "pack-quantized" (top level, or per config group under "mixed-precision"),
        config_groups.<name>.weights {num_bits, type "int", strategy "group" / "channel" /
        "tensor", group_size, symmetric, actorder, dynamic false}, input_activations null,
        ignore (exact names or "re:" regular expressions), sparsity_config empty.
        Format "nvfp4-pack-quantized" (NVFP4 / NVFP4A16 schemes): weights {num_bits 4, type
        "float", strategy "tensor_group", group_size 16, symmetric}; input_activations null or
        the same fp4 description (W4A4: accepted, the activations stay fp16 / bf16).
  gpt-oss MXFP4 (transformers Mxfp4Config):  quant_method "mxfp4", modules_to_not_convert
        (fnmatch patterns such as "model.layers.*.self_attn"), dequantize (a loading option,
        ignored).
  ModelOpt (NVIDIA TensorRT Model Optimizer):  hf_quant_config.json {"producer": {"name":
        "modelopt"}, "quantization": {quant_algo, group_size, exclude_modules,
        kv_cache_quant_algo}}, or config.json's quantization_config {quant_method "modelopt",
        quant_algo, group_size, ignore, kv_cache_quant_algo} (the fields may also sit in a
        nested "quantization" object). quant_algo "NVFP4" only, group_size 16; exclude_modules /
        ignore are fnmatch wildcards or substrings (vLLM's rule); input scales (W4A4) and the
        kv-cache scales are not used: jitmarlin's kernels are weight-only.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from jitmarlin.errors import InputError

__all__ = ["QuantScheme", "read_quant_config"]

METHODS = ("gptq", "awq", "compressed-tensors", "mxfp4", "modelopt")
_MAX_PATTERNS = 4096  # ignore lists longer than this are not a real checkpoint
_MAX_PATTERN_LEN = 512  # nor are patterns longer than this (they are matched as regexes)
NVFP4_CT = "nvfp4-pack-quantized"


@dataclass(frozen=True)
class QuantScheme:
    """How a checkpoint's quantized linears are stored.

    method: 'gptq' | 'awq' | 'compressed-tensors' | 'mxfp4' | 'modelopt'.  bits: 4 or 8.
    group_size: a positive multiple of 16, or -1 (one group per output channel); 16 for nvfp4,
    32 for mxfp4.  sym: no zero points (uint4b8 / uint8b128, nvfp4, mxfp4) or zero points
    (uint4 / uint8).  desc_act: act-order (GPTQ desc_act, compressed-tensors actorder "group"):
    the checkpoint carries a g_idx.  checkpoint_format: 'gptq' (v1: qzeros stored minus one) or
    'gptq_v2' for GPTQ; 'nvfp4-pack-quantized' for compressed-tensors NVFP4; None otherwise.
    ignore: the config's list of modules left unquantized (GPTQModel dynamic "-:" rules,
    AWQ / mxfp4 modules_to_not_convert, compressed-tensors ignore, ModelOpt exclude_modules),
    as written.  qtype: the jitmarlin quant type the weights map to.
    """

    method: str
    bits: int
    group_size: int
    sym: bool
    desc_act: bool = False
    checkpoint_format: str | None = None
    ignore: tuple[str, ...] = ()
    qtype: str = ""

    def skip_reason(self, module: str) -> str | None:
        """Why the config leaves `module` (a qualified name) unquantized, or None.

        Matching follows each method's own rule: AWQ's modules_to_not_convert are substrings of
        the name (transformers' rule); compressed-tensors' ignore entries are exact names,
        "re:" regular expressions (re.match) or module class names (not resolvable here, so
        only exact / regex entries match); GPTQModel's dynamic "-:" keys are regexes (re.match);
        mxfp4's and ModelOpt's entries are fnmatch wildcards (matching the module or a parent)
        or substrings.
        """
        for p in self.ignore:
            if self.method == "awq":
                hit = p in module
            elif self.method in ("mxfp4", "modelopt"):
                hit = (
                    p in module
                    or fnmatch.fnmatchcase(module, p)
                    or fnmatch.fnmatchcase(module, p.rstrip("*").rstrip(".") + ".*")
                )
            elif p.startswith("re:"):
                hit = _regex_match(p[3:], module)
            elif self.method == "gptq":
                hit = _regex_match(p, module)
            else:
                hit = p == module or fnmatch.fnmatchcase(module, p)
            if hit:
                return f"the quantization config leaves it unquantized ({p!r})"
        return None


def _regex_match(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except re.error:
        return False


# ---- typed field access -----------------------------------------------------------------------


def _where(method: str | None, field: str) -> str:
    return f"quantization_config.{field}" if method is None else f"{method} quantization_config.{field}"


def _get(d: dict, keys, kinds, method, default=..., *, prefix: str = ""):
    """The first of `keys` present in `d`, checked to be one of `kinds` (bool is never an int)."""
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    present = [k for k in keys if k in d and d[k] is not None]
    if not present:
        if default is ...:
            raise InputError(f"{_where(method, prefix + keys[0])} is required")
        return default
    if len(present) > 1 and any(d[k] != d[present[0]] for k in present[1:]):
        raise InputError(
            f"{_where(method, prefix + present[0])} = {d[present[0]]!r} and "
            f"{prefix + present[1]} = {d[present[1]]!r} disagree"
        )
    key = present[0]
    v = d[key]
    ok = any((isinstance(v, bool) if k is bool else (isinstance(v, k) and not isinstance(v, bool))) for k in kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise InputError(f"{_where(method, prefix + key)} must be {names}, got {type(v).__name__} {v!r}"[:300])
    return v


def _bits(v: int, method: str, field: str, allowed=(4, 8)) -> int:
    if v not in allowed:
        raise InputError(
            f"{_where(method, field)} = {v}: jitmarlin loads {' and '.join(map(str, allowed))}-bit weights only"
        )
    return v


def _group(v: int, method: str, field: str) -> int:
    if v != -1 and (v <= 0 or v % 16):
        raise InputError(
            f"{_where(method, field)} = {v}: must be -1 (per channel) or a positive "
            "multiple of 16 (the kernel takes groups of 16, 32, 64, 128 and multiples)"
        )
    return v


def _patterns(v, method: str, field: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(p, str) for p in v):
        raise InputError(f"{_where(method, field)} must be a list of strings, got {type(v).__name__}")
    if len(v) > _MAX_PATTERNS or any(len(p) > _MAX_PATTERN_LEN for p in v):
        raise InputError(
            f"{_where(method, field)}: at most {_MAX_PATTERNS} entries of at most {_MAX_PATTERN_LEN} characters"
        )
    return tuple(v)


def _qtype(bits: int, sym: bool) -> str:
    return {(4, True): "uint4b8", (4, False): "uint4", (8, True): "uint8b128", (8, False): "uint8"}[(bits, sym)]


# ---- the methods -------------------------------------------------------------------------------


def _gptq(q: dict) -> QuantScheme:
    m = "gptq"
    bits = _bits(_get(q, "bits", (int,), m), m, "bits")
    gs = _group(_get(q, "group_size", (int,), m), m, "group_size")
    sym = _get(q, "sym", (bool,), m, True)
    desc_act = _get(q, "desc_act", (bool,), m, False)
    fmt = _get(q, ("checkpoint_format", "format"), (str,), m, "gptq").strip().lower()
    if fmt not in ("gptq", "gptq_v2"):
        raise InputError(
            f"{_where(m, 'checkpoint_format')} = {fmt!r}: jitmarlin reads 'gptq' (v1) "
            "and 'gptq_v2' packing (not marlin / bitblas / other repacked formats)"
        )
    for legacy in ("is_marlin_format", "is_bitblas_format"):
        if _get(q, legacy, (bool,), m, False):
            raise InputError(
                f"{_where(m, legacy)} = true: this packing is not GPTQ's; jitmarlin reads "
                "'gptq' (v1) and 'gptq_v2' checkpoints"
            )
    pack = _get(q, "pack_dtype", (str,), m, "int32")
    if pack.replace("torch.", "") != "int32":
        raise InputError(f"{_where(m, 'pack_dtype')} = {pack!r}: only int32 packing is supported")
    ignore: list[str] = []
    dyn = _get(q, "dynamic", (dict,), m, {})
    for key, val in dyn.items():
        if not isinstance(key, str) or len(key) > _MAX_PATTERN_LEN:
            raise InputError(f"{_where(m, 'dynamic')} keys must be strings of at most {_MAX_PATTERN_LEN} characters")
        if key.startswith("-:"):
            ignore.append(key[2:])
            continue
        if not isinstance(val, dict):
            raise InputError(f"{_where(m, 'dynamic')}[{key!r}] must be an object, got {type(val).__name__}")
        changed = {f: v for f, v in val.items() if f in ("bits", "group_size", "sym", "desc_act") and v != q.get(f)}
        if changed:
            raise InputError(
                f"{_where(m, 'dynamic')}[{key!r}] overrides {changed} for some modules: "
                "per-module quantization overrides are not supported"
            )
    if len(ignore) > _MAX_PATTERNS:
        raise InputError(f"{_where(m, 'dynamic')}: at most {_MAX_PATTERNS} entries")
    return QuantScheme("gptq", bits, gs, sym, desc_act, fmt, tuple(ignore), _qtype(bits, sym))


def _awq(q: dict) -> QuantScheme:
    m = "awq"
    bits = _bits(_get(q, ("bits", "w_bit"), (int,), m), m, "bits", allowed=(4,))
    gs = _group(_get(q, ("group_size", "q_group_size"), (int,), m), m, "group_size")
    if not _get(q, "zero_point", (bool,), m, True):
        raise InputError(
            f"{_where(m, 'zero_point')} = false: AWQ checkpoints without zero points "
            "are not supported (the GEMM layout stores qzeros)"
        )
    version = _get(q, "version", (str,), m, "gemm").strip().lower()
    if version != "gemm":
        raise InputError(
            f"{_where(m, 'version')} = {version!r}: jitmarlin reads AWQ's GEMM packing only "
            "(not gemv / gemv_fast / marlin)"
        )
    ignore = _patterns(q.get("modules_to_not_convert"), m, "modules_to_not_convert")
    return QuantScheme("awq", bits, gs, False, False, None, ignore, "uint4")


_CT_ACTORDER = {None: False, False: False, True: True, "group": True, "dynamic": True, "weight": False, "static": False}


def _compressed_tensors(q: dict) -> QuantScheme:
    m = "compressed-tensors"
    top_fmt = _get(q, "format", (str,), m, None)
    groups = _get(q, "config_groups", (dict,), m)
    if not groups:
        raise InputError(f"{_where(m, 'config_groups')} is empty: no quantized weights are described")
    sparsity = q.get("sparsity_config")
    if sparsity not in (None, {}):
        if not isinstance(sparsity, dict) or sparsity.get("format") not in (None, "dense"):
            raise InputError(f"{_where(m, 'sparsity_config')}: sparse (2:4 / bitmask) checkpoints are not supported")
    schemes = set()
    for name, grp in groups.items():
        if not isinstance(grp, dict):
            raise InputError(f"{_where(m, f'config_groups.{name}')} must be an object, got {type(grp).__name__}")
        pre = f"config_groups.{name}."
        fmt = _get(grp, "format", (str,), m, top_fmt, prefix=pre)
        if fmt == NVFP4_CT:
            schemes.add(_ct_nvfp4_group(grp, pre))
            continue
        if fmt != "pack-quantized":
            raise InputError(
                f"{_where(m, pre + 'format' if 'format' in grp else 'format')} = {fmt!r}: "
                f"jitmarlin reads 'pack-quantized' int4 / int8 and '{NVFP4_CT}' weights only"
            )
        for act in ("input_activations", "output_activations"):
            if grp.get(act) is not None:
                raise InputError(
                    f"{_where(m, pre + act)} is set: activation quantization (W4A8 / W8A8) "
                    "is not supported; jitmarlin runs weight-only schemes (fp16 / bf16 activations)"
                )
        w = _get(grp, "weights", (dict,), m, prefix=pre)
        wp = pre + "weights."
        typ = _get(w, "type", (str,), m, "int", prefix=wp)
        if typ != "int":
            raise InputError(f"{_where(m, wp + 'type')} = {typ!r}: only integer weights are supported")
        bits = _bits(_get(w, "num_bits", (int,), m, prefix=wp), m, wp + "num_bits")
        strategy = _get(w, "strategy", (str,), m, prefix=wp)
        if strategy == "group":
            gs = _group(_get(w, "group_size", (int,), m, prefix=wp), m, wp + "group_size")
        elif strategy in ("channel", "tensor"):
            gs = -1
        else:
            raise InputError(
                f"{_where(m, wp + 'strategy')} = {strategy!r}: supported strategies are 'group', 'channel' and 'tensor'"
            )
        sym = _get(w, "symmetric", (bool,), m, True, prefix=wp)
        if _get(w, "dynamic", (bool,), m, False, prefix=wp):
            raise InputError(f"{_where(m, wp + 'dynamic')}: dynamic weight quantization is not a checkpoint layout")
        if w.get("block_structure") is not None:
            raise InputError(f"{_where(m, wp + 'block_structure')} is set: block quantization is not supported")
        actorder = _get(w, "actorder", (str, bool), m, None, prefix=wp)
        if actorder not in _CT_ACTORDER:
            raise InputError(f"{_where(m, wp + 'actorder')} = {actorder!r}: expected null, 'group' or 'weight'")
        schemes.add((bits, gs, sym, _CT_ACTORDER[actorder]))
    if len(schemes) > 1:
        raise InputError(
            f"{_where(m, 'config_groups')} describe {len(schemes)} different weight schemes "
            f"{sorted(map(str, schemes))}: mixed-scheme checkpoints are not supported"
        )
    bits, gs, sym, desc_act = schemes.pop()
    ignore = _patterns(q.get("ignore"), m, "ignore")
    if bits == "nvfp4":
        return QuantScheme("compressed-tensors", 4, 16, True, False, NVFP4_CT, ignore, "nvfp4")
    return QuantScheme("compressed-tensors", bits, gs, sym, desc_act, None, ignore, _qtype(bits, sym))


def _fp4_desc(d: dict, m: str, where: str, dynamic_ok: bool) -> None:
    """An NVFP4 tensor description {num_bits 4, type "float", strategy "tensor_group", group_size 16}."""
    for key, kinds, want in (
        ("num_bits", (int,), 4),
        ("type", (str,), "float"),
        ("strategy", (str,), "tensor_group"),
        ("group_size", (int,), 16),
    ):
        v = _get(d, key, kinds, m, prefix=where)
        if v != want:
            raise InputError(
                f"{_where(m, where + key)} = {v!r}: {NVFP4_CT} weights are 4-bit floats "
                "(e2m1) in groups of 16 with a per-tensor scale (strategy 'tensor_group')"
            )
    if not _get(d, "symmetric", (bool,), m, True, prefix=where):
        raise InputError(f"{_where(m, where + 'symmetric')} = false: NVFP4 has no zero points")
    if not dynamic_ok and _get(d, "dynamic", (bool,), m, False, prefix=where):
        raise InputError(f"{_where(m, where + 'dynamic')}: dynamic weight quantization is not a checkpoint layout")


def _ct_nvfp4_group(grp: dict, pre: str) -> tuple:
    m = "compressed-tensors"
    w = _get(grp, "weights", (dict,), m, prefix=pre)
    _fp4_desc(w, m, pre + "weights.", dynamic_ok=False)
    for key in ("block_structure", "actorder"):
        if w.get(key) not in (None, False):
            raise InputError(f"{_where(m, pre + 'weights.' + key)} = {w.get(key)!r}: not an NVFP4 field")
    act = grp.get("input_activations")
    if act is not None:  # W4A4: fp4 activations; jitmarlin runs them in fp16 / bf16
        if not isinstance(act, dict):
            raise InputError(f"{_where(m, pre + 'input_activations')} must be an object or null")
        _fp4_desc(act, m, pre + "input_activations.", dynamic_ok=True)
    if grp.get("output_activations") is not None:
        raise InputError(f"{_where(m, pre + 'output_activations')} is set: output quantization is not supported")
    return ("nvfp4", 16, True, False)


def _mxfp4(q: dict) -> QuantScheme:
    m = "mxfp4"
    _get(q, "dequantize", (bool,), m, False)  # a loading option of transformers: type-checked only
    ignore = _patterns(q.get("modules_to_not_convert"), m, "modules_to_not_convert")
    return QuantScheme("mxfp4", 4, 32, True, False, None, ignore, "mxfp4")


def _modelopt(q: dict) -> QuantScheme:
    m = "modelopt"
    pre = ""
    if "quantization" in q:  # hf_quant_config.json's layout
        q = _get(q, "quantization", (dict,), m)
        pre = "quantization."
    algo = _get(q, "quant_algo", (str,), m, prefix=pre)
    if algo.upper() != "NVFP4":
        raise InputError(
            f"{_where(m, pre + 'quant_algo')} = {algo[:100]!r}: jitmarlin reads ModelOpt "
            "'NVFP4' checkpoints only (weight-only: not FP8, INT4 AWQ or mixed precision)"
        )
    gs = _get(q, "group_size", (int,), m, 16, prefix=pre)
    if gs != 16:
        raise InputError(f"{_where(m, pre + 'group_size')} = {gs}: NVFP4 scales groups of 16")
    _get(q, "kv_cache_quant_algo", (str,), m, None, prefix=pre)  # the kv-cache scales are not used
    ignore = _patterns(_get(q, ("exclude_modules", "ignore"), (list,), m, [], prefix=pre), m, pre + "exclude_modules")
    return QuantScheme("modelopt", 4, 16, True, False, None, ignore, "nvfp4")


def read_quant_config(config: dict) -> QuantScheme:
    """The QuantScheme of a Hugging Face config.json (its parsed dict), of its
    `quantization_config` object itself (a dict holding "quant_method"), or of a ModelOpt
    hf_quant_config.json (a dict holding "producer" and "quantization").

    InputError when there is no quantization_config, the method is not gptq / awq /
    compressed-tensors / mxfp4 / modelopt, or a field has the wrong type or a value jitmarlin cannot load
    (bits other than 4 / 8, a group size that is not -1 or a positive multiple of 16, ...).
    """
    if not isinstance(config, dict):
        raise InputError(f"config must be a JSON object (dict), got {type(config).__name__}")
    if "quantization_config" in config:
        q = config["quantization_config"]
        if not isinstance(q, dict):
            raise InputError(f"quantization_config must be an object, got {type(q).__name__}")
    elif "quant_method" in config:
        q = config
    elif "quantization" in config and "producer" in config:  # ModelOpt's hf_quant_config.json
        prod = config["producer"]
        name = prod.get("name") if isinstance(prod, dict) else None
        if not isinstance(name, str) or name.lower() != "modelopt":
            raise InputError(f"hf_quant_config.json: producer.name must be 'modelopt', got {str(name)[:100]!r}")
        return _modelopt(config)
    else:
        raise InputError(
            "config has no quantization_config: not a quantized checkpoint "
            f"(jitmarlin.hf reads {', '.join(METHODS)} checkpoints)"
        )
    method = _get(q, "quant_method", (str,), None)
    if method == "gptq":
        return _gptq(q)
    if method == "awq":
        return _awq(q)
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "mxfp4":
        return _mxfp4(q)
    if method == "modelopt":
        return _modelopt(q)
    raise InputError(
        f"quantization_config.quant_method = {method[:100]!r} is not supported "
        f"(jitmarlin.hf reads {', '.join(METHODS)})"
    )
