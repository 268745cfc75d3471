"""jitmarlin.hf.load: a quantized Hugging Face model directory -> a transformers model whose
quantized linears are jitmarlin.torch.MarlinLinear modules and whose sparse-MoE blocks run their
experts in jitmarlin.torch.MarlinMoE.

Formats x model kinds:
  GPTQ (v1 / v2, act-order on dense layers), AWQ GEMM, compressed-tensors pack-quantized int4 /
  int8:   dense linears and MoE experts (Qwen3-MoE `experts.E.{gate,up,down}_proj`, Mixtral
          `block_sparse_moe.experts.E.w1 / w3 / w2`); act-order experts are refused
  NVFP4, compressed-tensors "nvfp4-pack-quantized" and ModelOpt (quant_algo "NVFP4", in
  config.json or hf_quant_config.json):   dense linears and MoE experts; activation scales
          (W4A4 checkpoints) are dropped: the activations stay fp16 / bf16
  MXFP4 (gpt-oss, quant_method "mxfp4"):   the stacked experts of GptOssMLP (activation
          swigluoai, biases); attention and router stay as stored (bf16)
Anything else is refused with an InputError naming the config field or the tensor.

torch and transformers are imported when `load` is called (the `hf` extra); importing this
module needs neither.

How a model is built:
  1. config.json is read (size-bounded, path-checked) and its quantization_config turned into a
     QuantScheme (jitmarlin.hf.config); the transformers config is built from the same dict
     (AutoConfig.for_model) without the quantization_config, so transformers never tries a
     quantizer backend of its own. No remote code is ever run.
  2. The architecture is built with every *parameter* on the meta device (no memory, no init
     work). Buffers are built for real: non-persistent buffers such as the rotary embedding's
     inv_freq are computed in __init__ and are not in checkpoints, so building them on meta
     (`with torch.device("meta")`) would leave them uninitialised after materialisation. This
     is the `init_empty_weights(include_buffers=False)` technique of accelerate, which
     transformers' own from_pretrained uses: nn.Module.register_parameter is wrapped for the
     duration of the build (under a lock).
  3. read_checkpoint streams the shards: each quantized linear replaces its meta nn.Linear by
     MarlinLinear(QuantizedWeight) (the weight stays on the host, uploaded on first use on a
     device); every other tensor is materialised on `device` in place of its meta parameter or
     buffer (shape checked; floating tensors cast to the dtype the architecture gives them).
     A MoE layer's experts come from read_checkpoint stacked (MoEExperts: w13 gate and up, w2
     down) once all of them are read; the transformers block (Qwen3MoeSparseMoeBlock,
     MixtralSparseMoeBlock, GptOssMLP) is replaced by jitmarlin.torch.MoEBlock: the block's own
     router module (its checkpoint tensors load into it as usual), then MarlinMoE with the
     activation the config names (hidden_act silu / gelu; gpt-oss swigluoai). The experts'
     count and sizes are checked against config.json (jitmarlin.hf.moe). Mixtral checkpoints'
     block_sparse_moe is the model's mlp on transformers 5 (renamed as transformers does).
  4. Tied weights are re-tied, anything still on meta is an error naming it (a MoE layer whose
     experts the checkpoint lacks: named as such), the remaining buffers move to `device`, and
     every nn.Linear left unquantized is logged with its reason (logger "jitmarlin.hf").
"""

from __future__ import annotations

import contextlib
import logging
import threading

import numpy as np

from jitmarlin.errors import InputError

from .checkpoint import RawBits, _model_dir, read_checkpoint, read_json, read_scheme
from .config import QuantScheme
from .convert import MoEExperts
from .moe import Renamer, moe_blocks, refuse_plain_expert, replace_block

__all__ = ["load"]

log = logging.getLogger("jitmarlin.hf")

_build_lock = threading.Lock()


def _imports():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise ImportError(f"jitmarlin.hf.load needs torch and transformers: pip install 'jitmarlin[hf]' ({e})") from e
    return torch, transformers


def _version(transformers) -> tuple[int, int]:
    try:
        major, minor = transformers.__version__.split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


_DTYPE_NAMES = {"float16": "float16", "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def _pick_dtype(torch, dtype, cfg: dict):
    if dtype is None:
        stored = cfg.get("torch_dtype", cfg.get("dtype"))
        name = _DTYPE_NAMES.get(stored) if isinstance(stored, str) else None
        if name is None:
            log.info("config.json dtype %r is not float16 / bfloat16: loading as float16", stored)
            name = "float16"
        return getattr(torch, name)
    if isinstance(dtype, str):
        name = _DTYPE_NAMES.get(dtype.replace("torch.", "").lower())
        if name is not None:
            return getattr(torch, name)
    elif dtype in (torch.float16, torch.bfloat16):
        return dtype
    raise InputError(
        f"dtype must be float16 or bfloat16 (the kernels' activation dtypes) or None (config.json's), got {dtype!r}"
    )


@contextlib.contextmanager
def _parameters_on_meta(torch):
    """Every parameter registered inside the block is moved to the meta device as it is
    registered; buffers stay real (see the module docstring, step 2)."""
    nn = torch.nn
    orig = nn.Module.register_parameter

    def register_parameter(module, name, param):
        orig(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            new = nn.Parameter(p.data.to("meta"), requires_grad=p.requires_grad)
            new.__dict__.update(p.__dict__)
            module._parameters[name] = new

    with _build_lock:
        nn.Module.register_parameter = register_parameter
        try:
            yield
        finally:
            nn.Module.register_parameter = orig


def _strict_errors() -> tuple:
    """huggingface_hub's strict-dataclass validation errors (transformers 5 configs type-check their
    fields with them; they derive from Exception only)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return ()
    return (StrictDataclassError,)


def _build(torch, transformers, cfg: dict, dtype):
    hf_cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    model_type = hf_cfg.pop("model_type", None)
    if not isinstance(model_type, str):
        raise InputError(f"config.json: model_type must be a string, got {model_type!r}")
    if hf_cfg.get("auto_map") is not None:
        log.warning(
            "config.json names remote code (auto_map): ignored; building the built-in "
            "transformers architecture for model_type %r",
            model_type,
        )
        hf_cfg.pop("auto_map")
    try:
        config = transformers.AutoConfig.for_model(model_type, **hf_cfg)
    except (ValueError, KeyError, TypeError) + _strict_errors() as e:
        raise InputError(
            f"config.json: transformers cannot build a config for model_type {model_type!r}: {str(e)[:300]}"
        ) from None
    kw = {"dtype": dtype} if _version(transformers) >= (4, 56) else {"torch_dtype": dtype}
    with _parameters_on_meta(torch):
        model = transformers.AutoModelForCausalLM.from_config(config, **kw)
    return model


def _to_torch(torch, a: np.ndarray):
    if isinstance(a, RawBits):
        base = a.view(np.ndarray)
        if a.stored_dtype == "bfloat16":
            return torch.from_numpy(base.view(np.int16)).view(torch.bfloat16)
        fp8 = getattr(torch, a.stored_dtype, None)
        if fp8 is None:
            raise InputError(f"this torch has no {a.stored_dtype} dtype")
        return torch.from_numpy(base).view(fp8)
    return torch.from_numpy(a)


def _submodule(model, name: str):
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _set_submodule(model, name: str, new) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


class _Loader:
    def __init__(self, torch, model, device, scheme: QuantScheme):
        from jitmarlin.torch import MarlinLinear

        self.torch, self.model, self.device, self.scheme = torch, model, device, scheme
        self.MarlinLinear = MarlinLinear
        self.rename = Renamer(model)
        self.blocks = moe_blocks(model)  # sparse-MoE blocks, replaced as their experts arrive
        self.moe: set[str] = set()
        self.quantized: set[str] = set()
        self.wants_bias: set[str] = set()  # quantized linears whose nn.Linear had a bias
        self.late_bias: dict[str, object] = {}  # biases that came before their qweight
        self.unexpected: list[str] = []

    def experts(self, name: str, experts: MoEExperts) -> None:
        """`<block>.experts` of the checkpoint: its block becomes MoEBlock(router, MarlinMoE)."""
        block = self.rename(name).removesuffix(".experts")
        if block in self.moe:
            raise InputError(f"{name}: the checkpoint holds this MoE layer's experts twice")
        replace_block(self.model, block, experts)
        self.moe.add(block)

    def quantized_linear(self, name: str, qw) -> None:
        nn = self.torch.nn
        name = self.rename(name)
        mod = _submodule(self.model, name)
        if mod is None:
            raise InputError(
                f"the checkpoint quantizes {name!r} but the {type(self.model).__name__} architecture has no such module"
            )
        if not isinstance(mod, nn.Linear):
            raise InputError(
                f"the checkpoint quantizes {name!r}, a {type(mod).__name__}: only nn.Linear "
                "layers can become MarlinLinear"
            )
        if qw.shape != (mod.out_features, mod.in_features):
            raise InputError(
                f"{name}: the checkpoint's quantized weight is (out, in) = {qw.shape} but the "
                f"model's nn.Linear is ({mod.out_features}, {mod.in_features})"
            )
        bias = None
        if mod.bias is not None:
            if mod.bias.device.type == "meta":
                self.wants_bias.add(name)
            else:
                bias = mod.bias.detach()
        new = self.MarlinLinear(qw, bias)
        _set_submodule(self.model, name, new)
        self.quantized.add(name)
        early = self.late_bias.pop(name, None)
        if early is not None:
            self.plain(name + ".bias", early)

    def plain(self, name: str, arr) -> None:
        torch = self.torch
        name = self.rename(name)
        modname, _, attr = name.rpartition(".")
        mod = _submodule(self.model, modname)
        if mod is None:
            refuse_plain_expert(name, self.blocks)
            self.unexpected.append(name)
            return
        t = _to_torch(torch, arr)
        if isinstance(mod, self.MarlinLinear) and attr == "bias":
            if tuple(t.shape) != (mod.out_features,):
                raise InputError(f"{name}: shape {tuple(t.shape)}, expected ({mod.out_features},)")
            mod.bias = t.to(device=self.device, dtype=self.model.dtype)
            self.wants_bias.discard(modname)
            return
        if attr == "bias" and isinstance(mod, torch.nn.Linear) and mod.bias is None:
            self.late_bias[modname] = arr  # a quantized linear's bias, before its qweight
            return
        if attr in mod._parameters and mod._parameters[attr] is not None:
            old = mod._parameters[attr]
            self._check(name, t, old)
            mod._parameters[attr] = torch.nn.Parameter(self._cast(t, old), requires_grad=False)
        elif attr in mod._buffers and mod._buffers[attr] is not None:
            old = mod._buffers[attr]
            self._check(name, t, old)
            mod._buffers[attr] = self._cast(t, old)
        else:
            self.unexpected.append(name)

    def _check(self, name, t, old) -> None:
        if tuple(t.shape) != tuple(old.shape):
            raise InputError(
                f"{name}: the checkpoint holds shape {tuple(t.shape)}, the model expects {tuple(old.shape)}"
            )

    def _cast(self, t, old):
        dt = old.dtype if (t.is_floating_point() and old.is_floating_point()) else t.dtype
        return t.to(device=self.device, dtype=dt)

    def finish(self) -> None:
        model = self.model
        for modname in list(self.late_bias):
            self.unexpected.append(modname + ".bias")
        if self.unexpected:
            shown = ", ".join(self.unexpected[:10]) + (" ..." if len(self.unexpected) > 10 else "")
            log.warning(
                "jitmarlin.hf.load: %d checkpoint tensor(s) have no place in %s and were ignored: %s",
                len(self.unexpected),
                type(model).__name__,
                shown,
            )
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if getattr(model.config, "tie_word_embeddings", False) and not isinstance(out, self.MarlinLinear):
            model.tie_weights()
        for name, blk in self.blocks.items():
            if name not in self.moe and any(p.device.type == "meta" for p in blk.parameters()):
                raise InputError(
                    f"the checkpoint lacks the experts of the MoE layer {name} ({type(blk).__name__}): "
                    f"no quantized {name}.experts.* tensors"
                )
        missing = [n for n, p in model.named_parameters() if p.device.type == "meta"]
        missing += [n for n, b in model.named_buffers() if b.device.type == "meta"]
        missing += [f"{n}.bias" for n in sorted(self.wants_bias)]
        if missing:
            shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise InputError(f"the checkpoint lacks {len(missing)} tensor(s) of {type(model).__name__}: {shown}")
        model.to(self.device)
        self._log_unquantized()

    def _log_unquantized(self) -> None:
        nn = self.torch.nn
        out = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        kept = 0
        for name, mod in self.model.named_modules():
            if type(mod) is not nn.Linear:
                continue
            kept += 1
            reason = self.scheme.skip_reason(name)
            if reason is None:
                reason = (
                    "the output head: quantizers keep it in full precision"
                    if mod is out
                    else "stored unquantized in the checkpoint"
                )
            log.info("jitmarlin.hf.load: kept %s as nn.Linear (%s)", name, reason)
        log.info(
            "jitmarlin.hf.load: %d linear layers are MarlinLinear (%s, %s, group_size %d), %d kept as nn.Linear",
            len(self.quantized),
            self.scheme.method,
            self.scheme.qtype,
            self.scheme.group_size,
            kept,
        )
        if self.blocks:
            log.info(
                "jitmarlin.hf.load: %d of %d MoE layers run their experts in MarlinMoE", len(self.moe), len(self.blocks)
            )


def load(path, *, device="cuda", dtype=None, fuse=False):
    """Load the quantized Hugging Face model directory `path` (config.json + *.safetensors,
    optionally model.safetensors.index.json and ModelOpt's hf_quant_config.json; GPTQ v1 / v2
    incl. act-order, AWQ GEMM, compressed-tensors pack-quantized int4 / int8 and NVFP4, ModelOpt
    NVFP4, gpt-oss MXFP4) as a transformers causal-LM whose quantized linears are
    jitmarlin.torch.MarlinLinear modules and whose sparse-MoE blocks (Qwen3-MoE, Mixtral,
    gpt-oss) are jitmarlin.torch.MoEBlock (the model's router, then MarlinMoE), in eval mode.

    device: where the unquantized weights and buffers go (the QuantizedWeights stay on the host
    and are uploaded on first use on the device of the activations). dtype: float16 or
    bfloat16 (torch dtype or name); None: config.json's torch_dtype, float16 if it is neither.
    fuse: give q/k/v and gate/up one GEMM each (jitmarlin.torch.fuse_projections; the logits are
    the same, state_dict keys of fused layers change).
    InputError for a checkpoint that does not match its config or its architecture.
    """
    torch, transformers = _imports()
    root = _model_dir(path)
    cfg = read_json(root, "config.json")
    if not isinstance(cfg, dict):
        raise InputError("config.json must hold a JSON object")
    scheme = read_scheme(root)
    dtype = _pick_dtype(torch, dtype, cfg)
    device = torch.device(device)
    model = _build(torch, transformers, cfg, dtype)
    loader = _Loader(torch, model, device, scheme)
    for name, item in read_checkpoint(root, scheme):
        if isinstance(item, np.ndarray):
            loader.plain(name, item)
        elif isinstance(item, MoEExperts):
            loader.experts(name, item)
        else:
            loader.quantized_linear(name, item)
    loader.finish()
    if (root / "generation_config.json").exists():
        try:
            model.generation_config = transformers.GenerationConfig.from_dict(read_json(root, "generation_config.json"))
        except (ValueError, TypeError) as e:
            log.warning("generation_config.json ignored: %s", str(e)[:200])
    model.jitmarlin_scheme = scheme
    if fuse:
        from jitmarlin.torch import fuse_projections

        fuse_projections(model)
    return model.eval()
