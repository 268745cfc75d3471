"""Stream a quantized Hugging Face checkpoint (safetensors shards) as QuantizedWeights and plain
arrays. NumPy only: no torch, no transformers.

Everything read from the model directory is untrusted input (docs/DESIGN.md, trust model):
  * file names (index.json's weight_map, the directory listing) must be plain relative paths
    that stay inside the directory: no absolute paths, no "..", no symlink leading out of it.
    One exception, the Hugging Face hub cache: a snapshot directory (.../snapshots/<rev>/)
    holds symlinks into its repository's blobs/ (../../blobs/<sha>); those are followed, and
    only those.
  * config.json, the index and each safetensors header are size-bounded before they are read
    and parsed as JSON (duplicate keys refused); nothing is unpickled or evaluated.
  * every safetensors header is checked against the file before any tensor is read: header
    length bounded (100 MB, safetensors' own limit) and inside the file, each entry's dtype
    known, its shape non-negative integers, its byte range [begin, end) exactly
    prod(shape) * itemsize long, the ranges contiguous from 0 without overlap or holes and
    ending exactly at the end of the file (the rules of the safetensors library itself).
A violation is an InputError naming the file, the tensor and the constraint.

Why jitmarlin parses safetensors itself: `safetensors.numpy` cannot represent bfloat16 (nor
float8) tensors, the norms and embeddings of most bf16 checkpoints. The format is simple (an
8-byte little-endian header length, a JSON header, raw little-endian tensor bytes), so one
strict reader serves every dtype, with errors as InputError instead of the library's
exceptions. Tensors whose dtype NumPy lacks come back as `RawBits`: an ndarray subclass holding
the raw bit patterns (uint16 for bfloat16, uint8 for float8_e4m3fn / float8_e5m2) with the
stored dtype in `.stored_dtype`; `RawBits.values()` gives exact float32 values.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator

import numpy as np

from jitmarlin.errors import InputError

from .config import QuantScheme, read_quant_config
from .convert import IGNORED, ExpertStacker, MoEExperts, RawBits, convert, convert_gpt_oss, group_experts, layout

__all__ = [
    "read_checkpoint",
    "read_scheme",
    "RawBits",
    "MoEExperts",
    "find_shards",
    "read_json",
    "read_header",
    "TensorInfo",
]

log = logging.getLogger("jitmarlin.hf")

MAX_HEADER = 100_000_000  # bytes; the safetensors library's own MAX_HEADER_SIZE
MAX_CONFIG = 16 << 20  # config.json
MAX_INDEX = 64 << 20  # model.safetensors.index.json (large MoE indexes run to ~10 MB)
MAX_NDIM = 32
INDEX_NAME = "model.safetensors.index.json"
HF_QUANT = "hf_quant_config.json"  # ModelOpt's quantization config

# safetensors dtype -> (NumPy dtype of the stored bytes, name of the real dtype if NumPy lacks it)
_DTYPES = {
    "F64": ("<f8", None),
    "F32": ("<f4", None),
    "F16": ("<f2", None),
    "BF16": ("<u2", "bfloat16"),
    "I64": ("<i8", None),
    "I32": ("<i4", None),
    "I16": ("<i2", None),
    "I8": ("i1", None),
    "U64": ("<u8", None),
    "U32": ("<u4", None),
    "U16": ("<u2", None),
    "U8": ("u1", None),
    "BOOL": ("u1", None),
    "F8_E4M3": ("u1", "float8_e4m3fn"),
    "F8_E5M2": ("u1", "float8_e5m2"),
}


def _raw(a: np.ndarray, stored: str) -> RawBits:
    r = a.view(RawBits)
    r.stored_dtype = stored
    return r


# ---- files and JSON ----------------------------------------------------------------------------


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise InputError(f"duplicate key {k[:200]!r}")
        out[k] = v
    return out


def _parse_json(data: bytes, what: str):
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except InputError as e:
        raise InputError(f"{what}: {e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise InputError(f"{what} is not valid JSON: {str(e)[:200]}") from None


def _allowed_roots(root: Path) -> list[Path]:
    roots = [root]
    if root.parent.name == "snapshots":  # HF hub cache: snapshots/<rev>/ -> ../../blobs
        roots.append((root.parent.parent / "blobs").resolve())
    return roots


def _model_dir(path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a directory path (str or os.PathLike), got {type(path).__name__}")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise InputError(f"{root} is not a directory (expected a Hugging Face model directory)")
    return root.resolve()


def _child(root: Path, rel, what: str) -> Path:
    """root / rel, checked: a relative path without '..', a regular file that resolves inside the
    model directory (or, in a hub cache snapshot, its repository's blobs/)."""
    if not isinstance(rel, str) or not rel or len(rel) > 1024 or "\\" in rel or "\0" in rel:
        raise InputError(f"{what}: {str(rel)[:200]!r} is not a plain relative file name")
    pp = PurePosixPath(rel)
    if pp.is_absolute() or (len(rel) > 1 and rel[1] == ":") or any(p in ("", ".", "..") for p in rel.split("/")):
        raise InputError(
            f"{what}: {rel[:200]!r} must be a relative path inside the model directory (no absolute paths, no '..')"
        )
    p = root / rel
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InputError(f"{what}: {rel!r} does not exist in {root}") from None
    if not any(real == r or r in real.parents for r in _allowed_roots(root)):
        raise InputError(
            f"{what}: {rel!r} resolves to {real}, outside the model directory {root} "
            "(a symlink leading out of it is refused)"
        )
    if not real.is_file():
        raise InputError(f"{what}: {rel!r} is not a regular file")
    return real


def read_json(root, name: str, limit: int = MAX_CONFIG):
    """Parse the JSON file `name` of model directory `root` (size-bounded, path-checked)."""
    root = _model_dir(root)
    p = _child(root, name, name)
    size = p.stat().st_size
    if size > limit:
        raise InputError(f"{name} is {size} bytes; at most {limit} are read")
    with open(p, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{name} is larger than {limit} bytes")
    return _parse_json(data, name)


def _shards(root: Path) -> tuple[list[tuple[str, Path]], dict | None]:
    """([(file name, checked path)], weight_map or None) of the model directory `root`."""
    if (root / INDEX_NAME).exists():
        idx = read_json(root, INDEX_NAME, MAX_INDEX)
        wm = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(wm, dict) or not wm:
            raise InputError(f"{INDEX_NAME}: weight_map must be a non-empty object of tensor name -> file name")
        if not all(isinstance(v, str) for v in wm.values()):
            raise InputError(f"{INDEX_NAME}: weight_map values must be file names (strings)")
        names = sorted(set(wm.values()))
        for n in names:
            if not n.endswith(".safetensors"):
                raise InputError(f"{INDEX_NAME}: weight_map file {n[:200]!r} is not a .safetensors file")
        return [(n, _child(root, n, INDEX_NAME)) for n in names], wm
    names = sorted(e.name for e in os.scandir(root) if e.name.endswith(".safetensors"))
    if not names:
        raise InputError(f"{root} holds no *.safetensors file (and no {INDEX_NAME})")
    return [(n, _child(root, n, "safetensors file")) for n in names], None


def find_shards(path) -> list[Path]:
    """The checkpoint's safetensors files, paths checked: those named by
    model.safetensors.index.json's weight_map (in name order), else every *.safetensors file of
    the directory."""
    return [p for _, p in _shards(_model_dir(path))[0]]


# ---- safetensors headers -----------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors spelling: F16, BF16, I32, ...
    shape: tuple
    begin: int  # byte range relative to the start of the data section
    end: int


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_header(f, fname: str, size: int) -> tuple[int, dict[str, TensorInfo]]:
    """(offset of the data section, name -> TensorInfo) of the open safetensors file `f` of
    `size` bytes; InputError for any inconsistency (see the module docstring)."""
    if size < 8:
        raise InputError(f"{fname}: {size} bytes is too short for a safetensors file (8-byte header length)")
    f.seek(0)
    (n,) = struct.unpack("<Q", f.read(8))
    if n > MAX_HEADER:
        raise InputError(f"{fname}: header length {n} exceeds the limit of {MAX_HEADER} bytes")
    if 8 + n > size:
        raise InputError(
            f"{fname}: header claims {n} bytes but the file holds {size - 8} after the length field (truncated file?)"
        )
    raw = f.read(n)
    if len(raw) != n:
        raise InputError(f"{fname}: could read only {len(raw)} of the {n} header bytes")
    if not raw.startswith(b"{"):
        raise InputError(f"{fname}: the header is not a JSON object")
    hdr = _parse_json(raw, f"{fname} header")
    if not isinstance(hdr, dict):
        raise InputError(f"{fname}: the header is not a JSON object")
    meta = hdr.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise InputError(f"{fname}: __metadata__ must be an object of strings")
    buffer = size - 8 - n
    infos: dict[str, TensorInfo] = {}
    for name, e in hdr.items():
        where = f"{fname}: tensor {name[:200]!r}"
        if not isinstance(e, dict):
            raise InputError(f"{where}: entry must be an object with dtype, shape and data_offsets")
        dt, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dt not in _DTYPES:
            raise InputError(f"{where}: dtype {repr(dt)[:40]} is not supported (one of {', '.join(_DTYPES)})")
        if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_int(d) and d >= 0 for d in shape):
            raise InputError(f"{where}: shape must be a list of at most {MAX_NDIM} non-negative integers")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_int(o) for o in offs) and 0 <= offs[0] <= offs[1]):
            raise InputError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end")
        nbytes = math.prod(shape) * np.dtype(_DTYPES[dt][0]).itemsize
        if offs[1] - offs[0] != nbytes:
            raise InputError(
                f"{where}: data_offsets {offs} span {offs[1] - offs[0]} bytes but dtype {dt} "
                f"and shape {shape} need {nbytes}"
            )
        infos[name] = TensorInfo(name, dt, tuple(shape), offs[0], offs[1])
    pos = 0
    for t in sorted(infos.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != pos:
            what = "overlaps the previous tensor" if t.begin < pos else "leaves a gap before it"
            raise InputError(
                f"{fname}: tensor {t.name[:200]!r} at bytes [{t.begin}, {t.end}) {what} "
                "(tensor data must be contiguous)"
            )
        pos = t.end
    if pos != buffer:
        if pos > buffer:
            raise InputError(
                f"{fname}: the header claims {pos} bytes of tensor data but the file holds {buffer} (truncated file?)"
            )
        raise InputError(f"{fname}: {buffer - pos} bytes after the last tensor are not described by the header")
    return 8 + n, infos


def read_tensor(f, fname: str, data_start: int, t: TensorInfo) -> np.ndarray:
    """Tensor `t` of the open file `f` (its header checked by read_header) as a writable array;
    RawBits for bfloat16 / float8."""
    npdt, stored = _DTYPES[t.dtype]
    dt = np.dtype(npdt)
    arr = np.empty(math.prod(t.shape), dtype=dt)
    f.seek(data_start + t.begin)
    got = f.readinto(arr.view(np.uint8)) if arr.size else 0
    if got != t.end - t.begin:
        raise InputError(
            f"{fname}: tensor {t.name!r}: read {got} of {t.end - t.begin} bytes "
            "(file changed or truncated while reading)"
        )
    if not dt.isnative:
        arr = arr.astype(dt.newbyteorder("="))
    arr = arr.reshape(t.shape)
    if t.dtype == "BOOL":
        if arr.size and arr.max() > 1:
            raise InputError(f"{fname}: tensor {t.name!r}: BOOL bytes must be 0 or 1")
        return arr.view(np.bool_)
    return _raw(arr, stored) if stored else arr


# ---- quantized modules -------------------------------------------------------------------------


@dataclass
class _Plan:
    files: list  # [(file name, path, data_start, [TensorInfo sorted by offset])]
    modules: dict  # module name -> set of its part names present in the checkpoint
    blocks: dict  # MoE layer -> ExpertBlock (its quantized experts), when stacking


def _plan(path, scheme: QuantScheme, stack_experts: bool) -> _Plan:
    root = _model_dir(path)
    shards, wm = _shards(root)
    files, where = [], {}
    for rel, p in shards:
        with open(p, "rb") as f:
            start, infos = read_header(f, rel, os.fstat(f.fileno()).st_size)
        for name in infos:
            if name in where:
                raise InputError(f"tensor {name[:200]!r} is stored twice ({where[name]} and {rel})")
            where[name] = rel
        files.append((rel, p, start, sorted(infos.values(), key=lambda t: t.begin)))
    for name, fn in (wm or {}).items():
        if where.get(name) != fn:
            raise InputError(f"{INDEX_NAME} puts tensor {name[:200]!r} in {fn!r}, which does not hold it")
    marker, required, optional = layout(scheme)
    known = required + optional
    modules: dict[str, set] = {}
    for name in where:
        mod, _, leaf = name.rpartition(".")
        if leaf == marker and mod:
            modules[mod] = set()
    for name in where:
        mod, _, leaf = name.rpartition(".")
        if mod in modules and leaf in known:
            modules[mod].add(leaf)
    for mod, have in modules.items():
        missing = [r for r in required if r not in have]
        if missing:
            raise InputError(
                f"{mod} ({scheme.method}): quantized module lacks tensor(s) {', '.join(mod + '.' + m for m in missing)}"
            )
        if "weight" not in known and mod + ".weight" in where:
            raise InputError(f"{mod}: holds both a plain weight and quantized tensors ({mod}.{marker})")
    if not modules:
        log.warning("%s: no quantized module (no *.%s tensor) in the checkpoint", root, marker)
    blocks = group_experts(modules) if stack_experts and scheme.method != "mxfp4" else {}
    return _Plan(files, modules, blocks)


def _stream(plan: _Plan, scheme: QuantScheme) -> Iterator[tuple[str, object]]:
    pending: dict[str, dict] = {}
    experts = ExpertStacker(plan.blocks, scheme)
    for rel, p, start, infos in plan.files:
        with open(p, "rb") as f:
            for t in infos:
                mod, _, leaf = t.name.rpartition(".")
                arr = read_tensor(f, rel, start, t)
                parts = plan.modules.get(mod)
                if parts is None or leaf not in parts:
                    yield t.name, arr
                    continue
                got = pending.setdefault(mod, {})
                got[leaf] = None if leaf in IGNORED else arr  # activation scales: not used
                if len(got) < len(parts):
                    continue
                del pending[mod]
                got = {k: v for k, v in got.items() if v is not None}
                if scheme.method == "mxfp4":
                    yield mod, convert_gpt_oss(mod, got)
                elif mod in experts:
                    done = experts.add(mod, got)
                    if done is not None:
                        yield done
                else:
                    yield mod, convert(scheme, mod, got)
    assert not pending, sorted(pending)[:5]  # every part was in some shard (checked in _plan)


def read_scheme(path) -> QuantScheme:
    """The QuantScheme of model directory `path`: config.json's quantization_config, else (ModelOpt)
    hf_quant_config.json."""
    cfg = read_json(path, "config.json")
    if isinstance(cfg, dict) and "quantization_config" not in cfg and (_model_dir(path) / HF_QUANT).exists():
        return read_quant_config(read_json(path, HF_QUANT))
    return read_quant_config(cfg)


def read_checkpoint(
    path, scheme: QuantScheme | None = None, *, stack_experts: bool = True
) -> Iterator[tuple[str, object]]:
    """Stream the tensors of the model directory `path`, shard by shard.

    Yields (module_name, QuantizedWeight) for each quantized linear (its tensors gathered even
    where they straddle shards, then converted by from_gptq / from_awq /
    from_compressed_tensors / from_nvfp4), (block + ".experts", MoEExperts) for each MoE layer
    whose experts are quantized (`<block>.experts.<e>.{gate,up,down}_proj` or `.{w1,w3,w2}`,
    stacked into (w13, w2) once all of the layer's experts are read; gpt-oss MXFP4 layers
    `<block>.experts.*_blocks` through moe_from_gpt_oss) and (tensor_name, np.ndarray) for every
    other tensor (biases of quantized linears included, e.g.
    "model.layers.0.self_attn.q_proj.bias"); bfloat16 / float8 tensors come as `RawBits`
    (uint16 / uint8 bit patterns; `.stored_dtype`, `.values()`). Activation scales of W4A4
    checkpoints (input_scale, input_global_scale) are dropped. stack_experts=False yields each
    expert's linear as a QuantizedWeight instead (not for gpt-oss, whose experts are stored
    stacked). scheme: from read_quant_config; None: read_scheme(path).

    The shard list, every header, the grouping of quantized tensors and the completeness of each
    MoE layer's experts are checked before this returns (InputError on any problem); tensor data
    is read as the iterator advances, one tensor at a time; only the parts of quantized modules
    not yet complete, and the converted experts of MoE layers not yet complete, are held.
    """
    if scheme is None:
        scheme = read_scheme(path)
    if not isinstance(scheme, QuantScheme):
        raise InputError(f"scheme must be a QuantScheme (read_quant_config), got {type(scheme).__name__}")
    return _stream(_plan(path, scheme, bool(stack_experts)), scheme)
