"""jitmarlin.hf.load_gguf: a llama.cpp .gguf file of a Llama / Mistral / Qwen2 / Qwen3 model -> a
transformers causal-LM whose quantized linears are jitmarlin.torch.MarlinLinear modules.

The pure parts need NumPy and the `gguf` package only (no torch, no transformers):
    reader = open_gguf(path)               # bounded header check, then gguf.GGUFReader
    for hf_name, item in read_gguf(reader): ...   # QuantizedWeight (a layer linear) or ndarray
`load_gguf` adds torch and transformers (the `hf` extra), imported when it is called.

A .gguf is untrusted input (docs/DESIGN.md, trust model). Before gguf.GGUFReader sees the file,
`check_gguf` walks its header with every count and length checked against what is left of the
file and against fixed caps (gguf-py's reader loops over declared array lengths unchecked):
little-endian GGUF v2 / v3, value types known, no nested arrays, at most MAX_DIMS (ggml's
GGML_MAX_DIMS) dimensions per tensor, every tensor type known to the installed gguf package,
rows of whole blocks, offsets aligned, each tensor's bytes inside the file and no two overlapping,
names unique. Nothing is evaluated. A violation is an InputError naming the file and the tensor.

What becomes what (tensor names: gguf-py's TensorNameMap for these architectures, the table
_LAYER / _TOP below; load_gguf uses transformers' own get_gguf_hf_weights_map when it has one):
  * the layer linears (attn_q/k/v/output, ffn_gate/up/down) and `output` (lm_head) of a type
    jitmarlin.weights.formats.from_gguf takes (Q4_0 ... Q6_K, Q8_0, MXFP4, NVFP4) become
    QuantizedWeights, their blocks kept as stored;
  * a layer linear of any other quantized type (IQ*, TQ*, Q8_K ...) is an InputError naming the
    tensor and its type; one stored F32 / F16 / BF16 stays an nn.Linear (logged);
  * `output` of a type not taken, token_embd, the norms and biases are dequantized by the gguf
    package's own dequantizer (gguf.quants.dequantize): float32 arrays (F16 kept as float16).
Llama (the GGUF architecture "llama", which llama.cpp also uses for Mistral): llama.cpp's
convert_hf_to_gguf.py (LlamaModel.modify_tensors) stores q_proj / k_proj weights and biases
through LlamaModel.permute(w, n_head, n_head_kv), which regroups each head's rows from the
Hugging Face rotary layout (two halves) to interleaved pairs; transformers' GGUF loader
(modeling_gguf_pytorch_utils.LlamaTensorProcessor._reverse_permute_weights) undoes it, and so does
read_gguf: rows are whole output channels and whole runs of GGUF blocks, so it reorders the raw
rows before from_gguf (exact). Qwen2 / Qwen3 are stored unpermuted (as transformers assumes).
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
from pathlib import Path
from typing import Iterator

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.weights.formats.gguf import SUPPORTED, GGUFTypeError, from_gguf
from jitmarlin.weights.quant import QuantizedWeight

from .load import _build, _imports, _Loader, _pick_dtype

__all__ = [
    "load_gguf",
    "open_gguf",
    "check_gguf",
    "gguf_arch",
    "hf_tensor_name",
    "unpermute_rows",
    "read_gguf",
    "ARCHS",
    "PERMUTED_ARCHS",
]

log = logging.getLogger("jitmarlin.hf")

ARCHS = ("llama", "qwen2", "qwen3")  # general.architecture values load_gguf takes
PERMUTED_ARCHS = ("llama",)  # q / k rows stored through llama.cpp's permute
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ITEMS = 1 << 24  # keys, tensors, array elements (vocabularies: ~2^18)
MAX_STRING = 1 << 24  # bytes of one string
MAX_NAME = 1024  # bytes of a tensor name (ggml: GGML_MAX_NAME = 64)
_MAGIC = 0x46554747  # b"GGUF" read little-endian
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # gguf_type sizes
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_FLOATS = ("F32", "F16", "BF16", "F64")

# GGUF tensor name -> Hugging Face module name (gguf-py tensor_mapping.py, MODEL_ARCH.LLAMA / QWEN2 /
# QWEN3: the names these transformers architectures use)
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
_BLK = re.compile(r"blk\.(\d{1,6})\.([a-z_]+)\.(weight|bias)")


def _gguf():
    try:
        import gguf
    except ImportError as e:
        raise ImportError(f"reading .gguf files needs the gguf package: pip install gguf ({e})") from e
    return gguf


# ---- the header check --------------------------------------------------------------------------


class _Cursor:
    def __init__(self, buf, where: str):
        self.buf, self.pos, self.size, self.where = buf, 0, len(buf), where

    def take(self, n: int, what: str) -> int:
        if n > self.size - self.pos:
            raise InputError(
                f"{self.where}: truncated or corrupt GGUF: {what} at byte {self.pos} "
                f"needs {n} bytes, {self.size - self.pos} are left"
            )
        p, self.pos = self.pos, self.pos + n
        return p

    def num(self, fmt: str, what: str) -> int:
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, cap: int) -> int:
        n = self.num("<Q", what)
        if n > cap:
            raise InputError(f"{self.where}: {what} is {n}, above the limit {cap}")
        return n

    def string(self, what: str, cap: int = MAX_STRING) -> bytes:
        n = self.count(f"{what} (length)", cap)
        p = self.take(n, what)
        return bytes(self.buf[p : p + n])

    def value(self, vtype: int, what: str):
        """Skip one value of gguf_type `vtype`; return it when it is a uint32 (general.alignment)."""
        if vtype in _SCALAR:
            p = self.take(_SCALAR[vtype], what)
            return struct.unpack_from("<I", self.buf, p)[0] if vtype == _UINT32 else None
        if vtype == _STRING:
            self.take(self.count(f"{what} (length)", MAX_STRING), what)
        elif vtype == _ARRAY:
            itype, n = self.num("<I", what), self.count(f"{what} (array length)", MAX_ITEMS)
            if itype in _SCALAR:
                self.take(n * _SCALAR[itype], what)
            elif itype == _STRING:
                for _ in range(n):
                    self.take(self.count(f"{what} (length)", MAX_STRING), what)
            else:
                raise InputError(f"{self.where}: {what}: arrays of gguf_type {itype} are not taken (nested or unknown)")
        else:
            raise InputError(f"{self.where}: {what}: unknown gguf_type {vtype}")
        return None


def _text(b: bytes, where: str, what: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where}: {what} is not UTF-8") from None


def check_gguf(path) -> int:
    """Check the GGUF header of the file `path` as described in the module docstring; return the
    number of tensors. InputError on the first violation."""
    gguf = _gguf()
    sizes = {int(t): v for t, v in gguf.GGML_QUANT_SIZES.items()}
    names = {int(t): t.name for t in gguf.GGMLQuantizationType}
    where = str(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise InputError(f"{where}: {size} bytes is too short for a GGUF header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, where)
            if cur.num("<I", "magic") != _MAGIC:
                raise InputError(f"{where}: not a GGUF file (no 'GGUF' magic)")
            version = cur.num("<I", "version")
            if version not in (2, 3):
                hint = " (a big-endian file?)" if version & 0xFFFF == 0 else ""
                raise InputError(f"{where}: GGUF version {version}{hint}: versions 2 and 3, little-endian, are taken")
            n_tensors = cur.count("tensor count", MAX_ITEMS)
            n_kv = cur.count("metadata key count", MAX_ITEMS)
            align, keys = 32, set()
            for i in range(n_kv):
                key = _text(cur.string(f"metadata key {i}", MAX_NAME), where, f"metadata key {i}")
                if key in keys:
                    raise InputError(f"{where}: duplicate metadata key {key!r}")
                keys.add(key)
                vtype = cur.num("<I", f"type of {key!r}")
                v = cur.value(vtype, f"value of {key!r}")
                if key == "general.alignment":
                    if vtype != _UINT32 or not v or v & (v - 1):
                        raise InputError(f"{where}: general.alignment must be a uint32 power of two")
                    align = v
            spans, seen = [], set()
            for i in range(n_tensors):
                name = _text(cur.string(f"tensor {i} name", MAX_NAME), where, f"tensor {i} name")
                if name in seen:
                    raise InputError(f"{where}: duplicate tensor {name!r}")
                seen.add(name)
                nd = cur.num("<I", f"{name!r} dimension count")
                if not 1 <= nd <= MAX_DIMS:
                    raise InputError(f"{where}: tensor {name!r} has {nd} dimensions (1 to {MAX_DIMS})")
                dims = [cur.num("<Q", f"{name!r} dimensions") for _ in range(nd)]
                t = cur.num("<I", f"{name!r} type")
                off = cur.num("<Q", f"{name!r} offset")
                if t not in sizes:
                    raise InputError(
                        f"{where}: tensor {name!r} has ggml type {t} "
                        f"({names.get(t, 'unknown')}), which the gguf package cannot read"
                    )
                bs, ts = sizes[t]
                if min(dims) < 1 or dims[0] % bs:
                    raise InputError(
                        f"{where}: tensor {name!r} ({names[t]}) has dimensions {dims}: each "
                        f"must be positive, the first a multiple of the block size {bs}"
                    )
                if off % align:
                    raise InputError(
                        f"{where}: tensor {name!r}: offset {off} is not a multiple of the alignment {align}"
                    )
                spans.append((off, off + int(np.prod(dims, dtype=object)) // bs * ts, name))
            start = -(-cur.pos // align) * align
            end = 0
            for a, b, name in sorted(spans):
                if start + b > size:
                    raise InputError(
                        f"{where}: tensor {name!r} (bytes {start + a} to {start + b}) runs "
                        f"past the end of the file ({size} bytes): truncated?"
                    )
                if a < end:
                    raise InputError(f"{where}: tensor {name!r} overlaps the tensor before it")
                end = b
    return n_tensors


def open_gguf(path):
    """check_gguf, then gguf.GGUFReader (memory-mapped, read-only). InputError for a bad file."""
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a .gguf file path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(f"{p} is not a file (expected a .gguf file)")
    check_gguf(p)
    try:
        return _gguf().GGUFReader(p, "r")
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: gguf.GGUFReader refused the file: {str(e)[:300]}") from None


# ---- metadata and names ------------------------------------------------------------------------


def _field(reader, key: str, kind: type, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise InputError(f"the GGUF file lacks the metadata key {key!r}")
        return default
    try:
        v = f.contents()
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise InputError(f"GGUF metadata {key!r} cannot be read: {str(e)[:200]}") from None
    if kind is int and isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    if kind is str and isinstance(v, str):
        return v
    raise InputError(
        f"GGUF metadata {key!r} must be a {'positive integer' if kind is int else 'string'}, got {str(v)[:100]!r}"
    )


def gguf_arch(reader) -> str:
    """general.architecture, one of ARCHS, else InputError."""
    arch = _field(reader, "general.architecture", str)
    if arch not in ARCHS:
        raise InputError(f"GGUF architecture {arch[:100]!r} is not taken by load_gguf (taken: {', '.join(ARCHS)})")
    return arch


def hf_tensor_name(name: str, n_layers: int) -> str | None:
    """The Hugging Face parameter name of GGUF tensor `name` (blk.3.attn_q.weight ->
    model.layers.3.self_attn.q_proj.weight), or None for a tensor transformers has no place for
    (rope_freqs, a block index >= n_layers)."""
    base, _, leaf = name.rpartition(".")
    if leaf in ("weight", "bias") and base in _TOP:
        return f"{_TOP[base]}.{leaf}"
    m = _BLK.fullmatch(name)
    if m is None or int(m.group(1)) >= n_layers or m.group(2) not in _LAYER:
        return None
    return f"model.layers.{int(m.group(1))}.{_LAYER[m.group(2)]}.{m.group(3)}"


def unpermute_rows(n_rows: int, n_head: int) -> np.ndarray:
    """Row indices undoing llama.cpp's LlamaModel.permute(w, n_head) (convert_hf_to_gguf.py), which
    stores w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2): Hugging Face row h*hd + i*hd/2 + j is
    GGUF row h*hd + 2j + i. hf = gguf[unpermute_rows(len(gguf), n_head)]."""
    if n_head <= 0 or n_rows % (2 * n_head):
        raise InputError(f"{n_rows} rows do not split into {n_head} heads of an even size")
    return np.arange(n_rows).reshape(n_head, n_rows // n_head // 2, 2).swapaxes(1, 2).reshape(-1)


def _dequantize(t, gguf) -> np.ndarray:
    tname = t.tensor_type.name
    if tname in ("F32", "F16"):
        return np.array(t.data, copy=True)
    try:
        return np.ascontiguousarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float32)
    except NotImplementedError:
        raise GGUFTypeError(f"GGUF tensor {t.name!r} is {tname}: the gguf package has no dequantizer for it") from None


def read_gguf(reader, *, name_map: dict | None = None) -> Iterator[tuple[str, object]]:
    """Yield (Hugging Face name, QuantizedWeight or ndarray) for each tensor of the checked GGUF
    `reader` that has a place in the model (module docstring: what becomes what). name_map:
    GGUF name -> Hugging Face name (transformers' get_gguf_hf_weights_map); default hf_tensor_name.
    q / k rows of PERMUTED_ARCHS come back in the Hugging Face order."""
    gguf = _gguf()
    arch = gguf_arch(reader)
    n_layers = _field(reader, f"{arch}.block_count", int)
    n_head = _field(reader, f"{arch}.attention.head_count", int)
    n_kv = _field(reader, f"{arch}.attention.head_count_kv", int, n_head)
    ignored = []
    for t in reader.tensors:
        hf = name_map.get(t.name) if name_map is not None else hf_tensor_name(t.name, n_layers)
        if hf is None:
            ignored.append(t.name)
            continue
        base, _, leaf = t.name.rpartition(".")
        kind = base.rpartition(".")[2] if base.startswith("blk.") else base
        heads = None
        if arch in PERMUTED_ARCHS and kind in ("attn_q", "attn_k"):
            heads = n_head if kind == "attn_q" else n_kv
        tname = t.tensor_type.name
        if leaf == "weight" and (kind in _LINEARS or base == "output") and tname not in _FLOATS:
            if len(t.shape) != 2:
                raise InputError(f"GGUF tensor {t.name!r} is a linear weight with {len(t.shape)} dimensions")
            k, n = (int(v) for v in t.shape)  # ne = [K, N]
            if tname in SUPPORTED:
                raw = np.asarray(t.data).reshape(n, -1)  # N rows of K / B blocks
                if heads is not None:
                    raw = raw[unpermute_rows(n, heads)]
                yield hf, from_gguf(raw, int(t.tensor_type), (n, k), name=t.name)
                continue
            if base != "output":
                raise GGUFTypeError(
                    f"GGUF tensor {t.name!r} is {tname}: jitmarlin cannot run it "
                    f"quantized (types taken: {', '.join(SUPPORTED)})"
                )
            log.info(
                "jitmarlin.hf.load_gguf: %s is %s, not a type jitmarlin runs: dequantized (lm_head stays an nn.Linear)",
                t.name,
                tname,
            )
        elif leaf == "weight" and (kind in _LINEARS or base == "output"):
            log.info(
                "jitmarlin.hf.load_gguf: %s is stored as %s (not quantized): %s stays an nn.Linear",
                t.name,
                tname,
                hf.rpartition(".")[0],
            )
        a = _dequantize(t, gguf)
        if heads is not None:
            a = a[unpermute_rows(a.shape[0], heads)]
        yield hf, a
    if ignored:
        shown = ", ".join(ignored[:10]) + (" ..." if len(ignored) > 10 else "")
        log.info(
            "jitmarlin.hf.load_gguf: %d GGUF tensor(s) have no place in the transformers model and were skipped: %s",
            len(ignored),
            shown,
        )


# ---- torch / transformers ----------------------------------------------------------------------


def _hf_config(transformers, path: Path) -> dict:
    """The transformers config dict of a GGUF file, read by transformers' own GGUF loader
    (modeling_gguf_pytorch_utils.load_gguf_checkpoint: GGUF_CONFIG_MAPPING, tie_word_embeddings
    from the absence of output.weight, ...), as from_pretrained(..., gguf_file=) reads it."""
    try:
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    except ImportError as e:
        raise ImportError(f"this transformers has no GGUF support ({e})") from e
    try:
        cfg = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise InputError(f"{path}: transformers cannot read the GGUF config: {str(e)[:300]}") from None
    return {k: v for k, v in cfg.items() if k != "_model_name_or_path"}


def _hf_name_map(model, arch: str):
    """transformers' GGUF -> Hugging Face tensor name map for `model` (get_gguf_hf_weights_map,
    its signature differs across releases); None where it is missing or fails."""
    try:
        import inspect

        from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

        kw = {}
        if "processor" in inspect.signature(get_gguf_hf_weights_map).parameters:
            from transformers.modeling_gguf_pytorch_utils import TensorProcessor

            kw["processor"] = TensorProcessor()
        return dict(get_gguf_hf_weights_map(model, model_type=arch, **kw))
    except (ImportError, AttributeError, TypeError, ValueError, KeyError, NotImplementedError) as e:
        log.info(
            "jitmarlin.hf.load_gguf: transformers' GGUF name map is unavailable (%s): using jitmarlin's table",
            str(e)[:200],
        )
        return None


def load_gguf(path, *, device="cuda", dtype=None):
    """Load the llama.cpp GGUF file `path` (architectures ARCHS: Llama, Mistral, Qwen2, Qwen3) as a
    transformers causal-LM in eval mode whose layer linears (and lm_head, where its type is taken)
    are jitmarlin.torch.MarlinLinear modules holding the GGUF blocks as stored (from_gguf); the
    embeddings, norms, biases and any F16/F32 linear are dequantized by the gguf package and cast
    to `dtype`. The config is transformers' own reading of the file (as from_pretrained(...,
    gguf_file=) builds it). No tokenizer: transformers' AutoTokenizer.from_pretrained(dir,
    gguf_file=) reads it from the same file.

    device: where the unquantized weights and buffers go (QuantizedWeights stay on the host and
    are uploaded on first use). dtype: float16 (default) or bfloat16. InputError for a file that
    is malformed, of another architecture, or holds a layer linear of a type jitmarlin does not
    run (naming the tensor and its type).
    """
    torch, transformers = _imports()
    reader = open_gguf(path)
    arch = gguf_arch(reader)
    path = Path(path).expanduser()
    cfg = _hf_config(transformers, path)
    dtype = torch.float16 if dtype is None else _pick_dtype(torch, dtype, {})
    model = _build(torch, transformers, cfg, dtype)
    name_map = _hf_name_map(model, arch)
    loader = _GGUFLoader(torch, model, torch.device(device))
    for name, item in read_gguf(reader, name_map=name_map):
        if isinstance(item, QuantizedWeight):
            mod = name.rpartition(".")[0]
            loader.quantized_linear(mod, item)
            loader.types[mod] = f"{item.qtype} group {item.group_size}"
        else:
            loader.plain(name, item)
    loader.finish()
    model.jitmarlin_gguf = {"arch": arch, "path": str(path), "qtypes": dict(loader.types)}
    return model.eval()


class _GGUFLoader(_Loader):
    def __init__(self, torch, model, device):
        super().__init__(torch, model, device, None)
        self.types: dict[str, str] = {}  # module name -> "qtype group g"

    def _log_unquantized(self) -> None:
        nn = self.torch.nn
        kept = [n for n, m in self.model.named_modules() if type(m) is nn.Linear]
        for n in kept:
            log.info(
                "jitmarlin.hf.load_gguf: kept %s as nn.Linear (stored unquantized, or a type jitmarlin does not run)", n
            )
        counts: dict[str, int] = {}
        for q in self.types.values():
            counts[q] = counts.get(q, 0) + 1
        log.info(
            "jitmarlin.hf.load_gguf: %d linear layers are MarlinLinear (%s), %d kept as nn.Linear",
            len(self.quantized),
            ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())),
            len(kept),
        )
