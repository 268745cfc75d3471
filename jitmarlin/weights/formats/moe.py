"""Mixture-of-experts checkpoints -> the (w13, w2) MoEWeight pair jitmarlin.moe takes.

Every converter slices the checkpoint's expert tensors one expert at a time, converts each
slice with the matching single-weight converter (from_mxfp4, from_gguf, from_nvfp4, or any
converter's QuantizedWeight for moe_from_experts) and stacks them with
MoEWeight.stack_gate_up (gate and up, (I, H) each, into w13) and MoEWeight.stack (down,
(H, I), into w2). Codes and scales are moved, never recomputed, so dequantize_moe of the
result is the checkpoint's own dequantisation wherever the single-weight converter is exact.

Layout facts (checked against the sources named):
  gpt-oss (HF `openai/gpt-oss-*`; transformers models/gpt_oss/modeling_gpt_oss.py GptOssExperts
  and integrations/mxfp4.py Mxfp4GptOssExperts / convert_moe_packed_tensors; llama.cpp's
  gpt-oss GGUF converter; vLLM SwigluOAIAndMul.forward_native):
    gate_up_proj_blocks (E, 2I, H/32, 16) uint8, gate_up_proj_scales (E, 2I, H/32) uint8 e8m0,
    gate_up_proj_bias (E, 2I); down_proj_blocks (E, H, I/32, 16), down_proj_scales
    (E, H, I/32), down_proj_bias (E, H). Rows are (out, in) like nn.Linear; element 2i of a
    16-byte block is the low nibble of byte i. The 2I axis INTERLEAVES gate and up:
    transformers computes gate_up = x @ W + b and takes gate = gate_up[..., ::2],
    up = gate_up[..., 1::2] (and llama.cpp splits blocks, scales and bias the same way into
    ffn_gate_exps / ffn_up_exps). moe_from_gpt_oss de-interleaves (gate: rows 0::2, up: rows
    1::2, bias likewise) into jitmarlin's logical order (rows [:I] gate, [I:] up).
    Activation: gate = min(gate, 7), up = clip(up, -7, 7), out = (up + 1) * gate *
    sigmoid(1.702 * gate) (alpha 1.702, limit 7.0 = config.swiglu_limit): jitmarlin's
    activation="swigluoai" (reference.moe_reference) on the de-interleaved halves.
  GGUF: `blk.N.ffn_{gate,up,down}_exps.weight`, ne = [K, N, E] (fastest first), i.e. numpy
    shape (E, N, K): E consecutive (N, K) tensors of blocks, each what from_gguf takes.
  ModelOpt NVFP4: per expert `experts.E.{gate,up,down}_proj.{weight, weight_scale,
    weight_scale_2, input_scale}`, each weight as from_nvfp4 takes it (input_scale quantizes
    activations for W4A4 kernels and is not used by jitmarlin's weight-only kernels).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jitmarlin.errors import InputError
from jitmarlin.weights import halves
from jitmarlin.weights.moe import MoEWeight
from jitmarlin.weights.quant import QuantizedWeight, from_codes

from ._common import check_fits, e4m3_values, floats, ints
from .gguf import BLOCKS, _raw_bytes, _type_name, from_gguf
from .mxfp4 import from_mxfp4
from .nvfp4 import fp4_bytes, from_nvfp4, unpack_fp4


def _experts(seq, what: str, where: str) -> list:
    if seq is None or isinstance(seq, (str, bytes, Mapping, QuantizedWeight)) or hasattr(seq, "shape"):
        raise InputError(f"{where}: {what} must be a list with one entry per expert, got {type(seq).__name__}")
    try:
        items = list(seq)
    except TypeError:
        raise InputError(
            f"{where}: {what} must be a list with one entry per expert, got {type(seq).__name__}"
        ) from None
    if not items:
        raise InputError(f"{where}: {what} is empty (no experts)")
    return items


def _wrap(where: str, what: str, fn, *args, **kwargs):
    """fn(*args, **kwargs), an InputError from it prefixed with where the tensor came from."""
    try:
        return fn(*args, **kwargs)
    except InputError as err:
        raise type(err)(f"{where}: {what}: {err}") from None


def moe_from_experts(gates, ups, downs, *, gate_bias=None, up_bias=None, down_bias=None):
    """(w13, w2) from per-expert QuantizedWeights (any converter's output, e.g. from_gptq on each
    `experts.N.gate_proj` / `up_proj` / `down_proj`).

    gates, ups: E weights of shape (I, H) each (out_features, in_features); downs: E weights of
    shape (H, I). Every expert shares one shape; gates and ups share qtype, group size and scale
    dtype (and, per expert, the global scale: nvfp4). gate_bias, up_bias: optional (E, I);
    down_bias: optional (E, H); stored float32. Returns (w13 gated MoEWeight, w2 MoEWeight).
    jitmarlin.moe also needs w13 and w2 to share qtype and group size (not checked here).
    """
    where = "moe_from_experts"
    gates, ups, downs = (_experts(s, n, where) for s, n in ((gates, "gates"), (ups, "ups"), (downs, "downs")))
    if not len(gates) == len(ups) == len(downs):
        raise InputError(f"{where}: expert counts differ: {len(gates)} gates, {len(ups)} ups, {len(downs)} downs")
    first = None
    for e, trio in enumerate(zip(gates, ups, downs)):
        for name, w in zip(("gates", "ups", "downs"), trio):
            if not isinstance(w, QuantizedWeight):
                raise InputError(f"{where}: {name}[{e}] must be a QuantizedWeight, got {type(w).__name__}")
            if not w.__dict__.get("_checked"):
                _wrap(where, f"{name}[{e}]", w.validate)
        g, u, d = ((int(w.out_features), int(w.in_features)) for w in trio)
        inter, hidden = g
        if u != g:
            raise InputError(
                f"{where}: expert {e}: up is {u} but gate is {g}: gate and up must both be "
                "(I, H) = (intermediate, hidden)"
            )
        if d != (hidden, inter):
            raise InputError(
                f"{where}: expert {e}: down is {d} but must be (H, I) = ({hidden}, {inter}) "
                f"to follow its gate and up (I, H) = {g}"
            )
        first = first or g
        if g != first:
            raise InputError(
                f"{where}: expert {e}: gate is {g} but expert 0's is {first}: every expert must have the same shape"
            )
    w13 = MoEWeight.stack_gate_up(gates, ups, gate_bias=gate_bias, up_bias=up_bias)
    w2 = MoEWeight.stack(downs, bias=down_bias)
    return w13, w2


# ---- gpt-oss (MXFP4) -------------------------------------------------------------------------------


def _mx_pair(blocks, scales, name: str, rows: int | None, cols: int | None):
    """gpt-oss blocks (E, R, C/32, 16) or (E, R, C/2) and scales (E, R, C/32) -> uint8 (E, R, C/2),
    int64 scales; checked against expected rows / cols where given."""
    b = fp4_bytes(blocks, f"{name}_blocks")
    if b.ndim == 4:
        if b.shape[3] != 16:
            raise InputError(f"{name}_blocks must be (experts, rows, cols/32, 16) uint8, got {tuple(b.shape)}")
        b = b.reshape(*b.shape[:2], -1)
    if b.ndim != 3 or b.shape[0] < 1 or b.shape[1] < 1 or b.shape[2] < 1 or b.shape[2] % 16:
        raise InputError(f"{name}_blocks must be (experts, rows, cols/32, 16) uint8, got {tuple(b.shape)}")
    e, r, c = b.shape[0], b.shape[1], 2 * b.shape[2]
    s = ints(scales, f"{name}_scales")
    if s.shape != (e, r, c // 32):
        raise InputError(
            f"{name}_scales must be uint8 (experts={e}, rows={r}, cols/32={c // 32}) to match "
            f"{name}_blocks, got {tuple(s.shape)}"
        )
    for what, got, want in (("rows", r, rows), ("cols", c, cols)):
        if want is not None and got != want:
            raise InputError(
                f"{name}_blocks: {what} must be {want} to match gate_up_proj (2I rows, H cols), "
                f"got {got} (shape {tuple(b.shape)})"
            )
    return b, s


def moe_from_gpt_oss(
    gate_up_blocks, gate_up_scales, gate_up_bias, down_blocks, down_scales, down_bias, *, scale_dtype: str = "bfloat16"
):
    """(w13, w2) from one gpt-oss MoE layer as stored in the HF checkpoint
    (`model.layers.N.mlp.experts.` + gate_up_proj_blocks, gate_up_proj_scales, gate_up_proj_bias,
    down_proj_blocks, down_proj_scales, down_proj_bias):

      gate_up_blocks uint8 (E, 2I, H/32, 16) (or (E, 2I, H/2)), gate_up_scales uint8 (E, 2I, H/32),
      gate_up_bias (E, 2I) bf16 / float (or None); down_blocks (E, H, I/32, 16), down_scales
      (E, H, I/32), down_bias (E, H) (or None).

    The 2I rows interleave gate and up (gate = rows 0::2, up = rows 1::2; module docstring):
    they are de-interleaved, so w13 is in jitmarlin's logical order and pairs with
    activation="swigluoai" in jitmarlin.moe. Each expert goes through from_mxfp4 (exact);
    e8m0 scale 255 (NaN) is refused. Biases are stored float32 (bf16 values exactly).
    scale_dtype: as from_mxfp4 (bfloat16 holds every e8m0 exponent; float16 only 2^-24..2^15).
    """
    where = "moe_from_gpt_oss"
    gub, gus = _wrap(where, "gate_up_proj", _mx_pair, gate_up_blocks, gate_up_scales, "gate_up_proj", None, None)
    e_count, rows2, hidden = gub.shape[0], gub.shape[1], 2 * gub.shape[2]
    if rows2 % 2:
        raise InputError(f"{where}: gate_up_proj has {rows2} rows; gate and up interleaved need 2I (even)")
    inter = rows2 // 2
    db, ds = _wrap(where, "down_proj", _mx_pair, down_blocks, down_scales, "down_proj", hidden, inter)
    if db.shape[0] != e_count:
        raise InputError(f"{where}: down_proj has {db.shape[0]} experts but gate_up_proj has {e_count}")
    biases = {}
    for name, b, shape in (
        ("gate_up_proj_bias", gate_up_bias, (e_count, rows2)),
        ("down_proj_bias", down_bias, (e_count, hidden)),
    ):
        if b is not None:
            b = _wrap(where, name, floats, b, name)
            if b.shape != shape:
                raise InputError(f"{where}: {name} must be {shape} (experts, rows), got {tuple(b.shape)}")
        biases[name] = b
    gates, ups, downs = [], [], []
    for e in range(e_count):
        for out, part, rows in (
            (gates, "gate (gate_up_proj rows 0::2)", slice(0, None, 2)),
            (ups, "up (gate_up_proj rows 1::2)", slice(1, None, 2)),
        ):
            out.append(
                _wrap(where, f"expert {e} {part}", from_mxfp4, gub[e, rows], gus[e, rows], scale_dtype=scale_dtype)
            )
        downs.append(_wrap(where, f"expert {e} down_proj", from_mxfp4, db[e], ds[e], scale_dtype=scale_dtype))
    gu = biases["gate_up_proj_bias"]
    return moe_from_experts(
        gates,
        ups,
        downs,
        gate_bias=None if gu is None else gu[:, 0::2],
        up_bias=None if gu is None else gu[:, 1::2],
        down_bias=biases["down_proj_bias"],
    )


# ---- GGUF ------------------------------------------------------------------------------------------


def _gguf_tensor(t, what: str):
    """A GGUFReader tensor (name, tensor_type, shape = ne [K, N, E], data) or a tuple
    (raw, ggml_type, (E, N, K)) -> (flat bytes, type name, (E, N, K), name)."""
    where = "moe_from_gguf"
    if all(hasattr(t, a) for a in ("tensor_type", "data", "shape")):
        raw, gtype, name = t.data, t.tensor_type, str(getattr(t, "name", what))
        try:
            dims = tuple(int(v) for v in t.shape)[::-1]  # ne is fastest first
        except (TypeError, ValueError):
            raise InputError(f"{where}: {what}: shape must be ne = [K, N, E], got {t.shape!r}") from None
    elif isinstance(t, (tuple, list)) and len(t) == 3:
        raw, gtype, shape = t
        name = what
        try:
            dims = tuple(int(v) for v in shape)
        except (TypeError, ValueError):
            raise InputError(
                f"{where}: {what}: shape must be (experts, out_features, in_features), got {shape!r}"
            ) from None
    else:
        raise InputError(
            f"{where}: {what} must be a GGUFReader tensor or a tuple (raw, ggml_type, "
            f"(experts, out_features, in_features)), got {type(t).__name__}"
        )
    if len(dims) != 3 or min(dims) < 1:
        raise InputError(
            f"{where}: {what} ({name}) must be 3-D (experts, out_features, in_features) = "
            f"reversed ne [K, N, E], got {dims}"
        )
    tname = _wrap(where, f"{what} ({name})", _type_name, gtype)
    data = _wrap(where, f"{what} ({name})", _raw_bytes, raw)
    e, n, k = dims
    if tname not in BLOCKS:  # from_gguf's own refusal
        _wrap(where, what, from_gguf, data, tname, (n, k), name=name)
    bs, tsize = BLOCKS[tname]
    if k % bs or data.size != e * n * (k // bs) * tsize:
        raise InputError(
            f"{where}: {what} ({name}, {tname}) of shape (E={e}, N={n}, K={k}) takes "
            f"{e * n * (-(-k // bs)) * tsize} bytes with K a multiple of {bs}, got {data.size} "
            "bytes (tuple shapes are (E, N, K), the reverse of GGUF's ne = [K, N, E])"
        )
    return data, tname, dims, name


def _bias_data(b):
    """A GGUFReader tensor's data (F32 / F16 bias tensors), else b itself."""
    return b.data if b is not None and hasattr(b, "tensor_type") and hasattr(b, "data") else b


def moe_from_gguf(
    gate_exps, up_exps, down_exps, *, gate_bias=None, up_bias=None, down_bias=None, scale_dtype: str | None = None
):
    """(w13, w2) from a GGUF MoE layer: `blk.N.ffn_gate_exps.weight`, `ffn_up_exps.weight`,
    `ffn_down_exps.weight`.

    Each tensor is a GGUFReader tensor (gguf.GGUFReader(path).tensors[i]: its name,
    tensor_type, shape as GGUF's ne = [K, N, E] and data), or a tuple (raw, ggml_type, shape)
    with shape (E, N, K) = (experts, out_features, in_features), the reverse of ne, and raw the
    tensor's bytes as from_gguf takes them. gate and up are (E, I, H), down (E, H, I). Expert e
    is bytes [e, e + 1) * N * (K / B) * block_bytes, converted by from_gguf (its types, exactness
    and scale_dtype). gate_bias / up_bias (E, I), down_bias (E, H): arrays or GGUFReader tensors
    (gpt-oss GGUFs carry `ffn_{gate,up,down}_exps.bias`, already split into gate and up).
    A model whose down tensors use another type than gate / up (common in K-quant mixes)
    converts, but jitmarlin.moe needs one qtype and group size for w13 and w2.
    """
    where = "moe_from_gguf"
    parts = [
        _gguf_tensor(t, what) for t, what in ((gate_exps, "gate_exps"), (up_exps, "up_exps"), (down_exps, "down_exps"))
    ]
    (_, _, (eg, ig, hg), _), (_, _, (eu, iu, hu), _), (_, _, (ed, hd, idn), _) = parts
    if not eg == eu == ed:
        raise InputError(f"{where}: expert counts differ: gate_exps {eg}, up_exps {eu}, down_exps {ed}")
    if (iu, hu) != (ig, hg) or (hd, idn) != (hg, ig):
        raise InputError(
            f"{where}: shapes do not chain: gate_exps (E, I, H) = {(eg, ig, hg)}, up_exps "
            f"{(eu, iu, hu)} (must equal gate's), down_exps {(ed, hd, idn)} (must be (E, H, I))"
        )
    experts = []
    for data, tname, (e_count, n, k), name in parts:
        per = data.size // e_count
        experts.append(
            [
                _wrap(
                    where,
                    f"expert {e}",
                    from_gguf,
                    data[e * per : (e + 1) * per],
                    tname,
                    (n, k),
                    scale_dtype=scale_dtype,
                    name=f"{name}[{e}]",
                )
                for e in range(e_count)
            ]
        )
    return moe_from_experts(
        *experts, gate_bias=_bias_data(gate_bias), up_bias=_bias_data(up_bias), down_bias=_bias_data(down_bias)
    )


# ---- ModelOpt NVFP4 --------------------------------------------------------------------------------


def _nvfp4_spec(spec, what: str):
    """(weight, weight_scale, weight_scale_2) of a mapping with those keys (others, e.g.
    input_scale, ignored) or a tuple (weight, weight_scale, weight_scale_2[, input_scale])."""
    if isinstance(spec, Mapping):
        missing = [k for k in ("weight", "weight_scale", "weight_scale_2") if k not in spec]
        if missing:
            raise InputError(
                f"moe_from_nvfp4: {what} lacks {', '.join(missing)} (ModelOpt NVFP4 tensors "
                "weight, weight_scale, weight_scale_2)"
            )
        return spec["weight"], spec["weight_scale"], spec["weight_scale_2"]
    if isinstance(spec, (tuple, list)) and len(spec) in (3, 4):
        return tuple(spec[:3])
    raise InputError(
        f"moe_from_nvfp4: {what} must be a mapping with weight, weight_scale, weight_scale_2 or a "
        f"tuple (weight, weight_scale, weight_scale_2[, input_scale]), got {type(spec).__name__}"
    )


def _refold(spec, shared: float, own: float, sdt: str, exact: bool):
    """spec's weight with its block scales times own / shared under global scale `shared`, or
    None when `exact` and some scaled block scale is not exactly a `sdt` number."""
    s = e4m3_values(spec[1], "weight_scale")
    want = s * own  # exact: 4 x 24 significant bits
    folded = want / shared
    if not exact:
        check_fits(folded, sdt, "weight_scale * weight_scale_2 ratio")
    got = halves.from_bits(halves.to_bits(folded, sdt), sdt).astype(np.float64)
    if exact and not (np.all(np.isfinite(got)) and np.array_equal(got * shared, want)):
        return None  # got * shared: <= 11 x 24 bits, exact
    codes = unpack_fp4(fp4_bytes(spec[0], "weight"))
    return from_codes("nvfp4", codes, got.T, 16, global_scale=shared, scale_dtype=sdt)


def _share_global(gate_spec, up_spec, g: QuantizedWeight, u: QuantizedWeight, e: int, round_scales: bool):
    """gate and up of expert e on one global scale (MoEWeight.stack_gate_up needs it): the ratio
    folded into the block scales of one of them, exactly; or rounded once when round_scales."""
    sdt = g.scale_dtype
    tries = [(g, up_spec, u, "up"), (u, gate_spec, g, "gate")]
    for keep, spec, other, _ in tries:
        if keep.global_scale != 0:
            folded = _refold(spec, keep.global_scale, other.global_scale, sdt, exact=True)
            if folded is not None:
                return (g, folded) if other is u else (folded, u)
    if not round_scales:
        raise InputError(
            f"moe_from_nvfp4: expert {e}: gate and up weight_scale_2 differ ({g.global_scale!r} vs "
            f"{u.global_scale!r}) and their ratio does not fold exactly into either's block scales in {sdt}; "
            "the fused w13 kernel applies one global scale per expert. Pass round_scales=True to fold it "
            f"with one rounding of each block scale to {sdt} (relative error <= "
            f"{'2^-11' if sdt == 'float16' else '2^-8'}), or requantize gate and up with one global scale"
        )
    keep, spec, other, _ = max(tries, key=lambda t: abs(t[0].global_scale))  # ratio <= 1: no overflow
    folded = _wrap(
        f"moe_from_nvfp4: expert {e}", "round_scales", _refold, spec, keep.global_scale, other.global_scale, sdt, False
    )
    return (g, folded) if other is u else (folded, u)


def moe_from_nvfp4(
    gates,
    ups,
    downs,
    *,
    gate_bias=None,
    up_bias=None,
    down_bias=None,
    scale_dtype: str | None = None,
    round_scales: bool = False,
):
    """(w13, w2) from ModelOpt NVFP4 MoE experts (`mlp.experts.E.gate_proj`, `up_proj`,
    `down_proj`).

    gates, ups, downs: one entry per expert, each a mapping {"weight": uint8 (N, K/2),
    "weight_scale": e4m3 (N, K/16), "weight_scale_2": float32 scalar, ...} (input_scale and any
    other key ignored: jitmarlin's kernels are weight-only) or a tuple (weight, weight_scale,
    weight_scale_2[, input_scale]); each converted by from_nvfp4 (exact). gate and up are
    (I, H), down (H, I). Biases as moe_from_experts.

    The fused w13 kernel applies one global scale per expert. Where an expert's gate and up
    weight_scale_2 differ (vLLM then warns and uses the gate's for both), the ratio is folded
    into the block scales of one of them (up's first) when every folded scale is exactly a
    scale_dtype number, keeping dequantize_moe exact; otherwise InputError, unless
    round_scales=True: the ratio (<= 1) is folded into the one with the smaller global scale,
    each of its block scales rounded once to scale_dtype (fp16 default: relative <= 2^-11).
    """
    where = "moe_from_nvfp4"
    lists = [_experts(s, n, where) for s, n in ((gates, "gates"), (ups, "ups"), (downs, "downs"))]
    if not len(lists[0]) == len(lists[1]) == len(lists[2]):
        raise InputError(
            f"{where}: expert counts differ: {len(lists[0])} gates, {len(lists[1])} ups, {len(lists[2])} downs"
        )
    if not isinstance(round_scales, (bool, np.bool_)):
        raise InputError(f"{where}: round_scales must be a bool, got {round_scales!r}")
    out = ([], [], [])
    for e, raw in enumerate(zip(*lists)):
        specs = [_nvfp4_spec(s, f"{n}[{e}]") for s, n in zip(raw, ("gates", "ups", "downs"))]
        g, u, d = (
            _wrap(where, f"{n}[{e}]", from_nvfp4, *s, scale_dtype=scale_dtype)
            for s, n in zip(specs, ("gates", "ups", "downs"))
        )
        if g.global_scale != u.global_scale:
            g, u = _share_global(specs[0], specs[1], g, u, e, bool(round_scales))
        for lst, w in zip(out, (g, u, d)):
            lst.append(w)
    return moe_from_experts(*out, gate_bias=gate_bias, up_bias=up_bias, down_bias=down_bias)
