"""humming-kernels (vllm-project/humming, PyPI humming-kernels 0.1.20) as a peer of tools/benchmoe.py.

What this adapter relies on, read from the 0.1.20 wheel and from vLLM's integration
(vllm/model_executor/layers/fused_moe/experts/fused_humming_moe.py):
- Weights: layer.py HummingLayer(shape_n, shape_k, weight_config, num_experts=E, torch_dtype) holds all E
  experts stacked (E x N x K); schema/humming.py HummingWeightSchema.quant_tensor quantizes float weights
  (uint<b> without zero point = symmetric, code - 2^(b-1), utils/weight.py dequantize_weight), and
  HummingLayer.transform() repacks them (for float activations symmetric ints become e0m<b-1>) and sets
  humming_config (a LayerConfig). HummingWeightSchema.dequant_tensors gives the dequantized reference.
- GEMM: forward.py humming_forward -> ops/gemm.py humming_gemm -> ops/launcher.py launch_kernel. MoE
  routing inputs: gemm_type 'indexed' takes sorted_ids / expert_ids / num_tokens_padded (int32) and top_k;
  the kernel reads input row sorted_id // top_k and writes output row sorted_id, so outputs are
  (tokens*top_k, N) in flat top-k order (include/humming/scheduler.cuh fetch_moe_index_block). Padding
  ids are >= tokens*top_k. 'grouped_contiguous' takes rows already grouped by expert and expert_layout
  (E+1 offsets, int32/int64; csrc/launcher/tensor.h check_tensor_moe). 'expert_tokens' belongs to
  ops.process_input's grouped_mask layout, not to the GEMM.
- No sorting/alignment kernel: testing/data.py generate_moe_tensors is a Python loop ("TODO:
  moe_align_block_size cuda kernel"); vLLM uses its own moe_align_block_size / moe_permute. sorted_ids
  blocks must match the kernel's block_shape[0], which vLLM reads from the tuning config
  (HummingIndexedExperts.prepare_humming_moe_kwargs); here one heuristic config per GEMM for
  shape_m = tokens*topk (tune/__init__.py get_heuristics_config) so only one kernel is compiled each.
- No fused activation or top-k reduction in the GEMM (launch_kernel has no topk_weights). ops/input.py
  process_input can apply a JIT'd binary activation (activation_type='binary_split', activation_impl =
  a C++ expression of a, b) as its own kernel: used here for silu(gate)*up unless it fails its self-check
  in prepare(), then torch does it. The weighted top-k sum is one torch.bmm.
- CUDA graphs: the launcher launches on torch's current stream (cuLaunchKernelEx, launcher.cpp) with no
  host sync, kernels are cached per config string (kernel/humming.py prepare_kernels), forward.py says it
  supports full-graph capture, and vLLM runs it under graphs. The first call JIT-compiles (NVRTC or nvcc):
  prepare() runs the block once outside the timed region.
- Imports (import humming): triton (ops/bench.py), cuda.bindings.driver, jinja2, filelock, numpy, packaging,
  the bundled _native/*.so (precompiled launcher used for torch >= 2.11). tqdm and tabulate are declared but
  never imported. CUDA headers/nvrtc are found by utils/cuda.py filter_cuda_paths, whose major version must
  equal torch.version.cuda's (torch 2.11+cu130 with CUDA 13 nvcc / nvidia cu13 wheels: fine).
"""

from __future__ import annotations

import json
import os

# qtype -> HummingWeightSchema config (keys per schema/humming.py KWARGS_ALIAS); fixed group where the format has one
# uint4b8/uint8b128/uint4 (gptq sym / asym) and mxfp4 follow vLLM's HummingConfig.from_config; nvfp4 (modelopt)
# and float8_e4m3fn are read off the schema fields only: the least tried of the six.
_QTYPES = {
    "uint4b8": ({"dtype": "uint4"}, None),
    "uint8b128": ({"dtype": "uint8"}, None),
    "uint4": ({"dtype": "uint4", "has_zero_point": True}, None),
    "mxfp4": ({"dtype": "float4e2m1", "scale_dtype": "float8e8m0"}, 32),
    "nvfp4": ({"dtype": "float4e2m1", "scale_dtype": "float8e4m3", "scale_2_type": "tensor"}, 16),
    "float8_e4m3fn": ({"dtype": "float8e4m3"}, None),
}
_SILU_MUL = "a / (1.0f + __expf(-a)) * b"
_WEIGHT_NAMES = ("weight", "weight_scale", "zero_point", "weight_scale_2", "bias")
_BASE: dict = {}  # one quantized base (copy 0) kept across calls, keyed by shape / qtype / dtype / device


class HummingPeerError(RuntimeError):
    """Any failure inside humming, with the step that failed."""


def _guard(what, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except HummingPeerError:
        raise
    except Exception as e:
        raise HummingPeerError(f"humming {what} failed: {type(e).__name__}: {str(e)[:400]}") from e


def _import_humming():
    try:
        import humming
        from humming import ops
        from humming.forward import humming_forward
        from humming.layer import HummingLayer
        from humming.schema import HummingWeightSchema
        from humming.tune import get_heuristics_config
    except Exception as e:
        raise ImportError(
            f"humming-kernels is not importable ({type(e).__name__}: {str(e)[:200]}); install it with "
            "'pip install --no-deps humming-kernels==0.1.20' (needs triton, cuda-bindings, jinja2, "
            "filelock, packaging and a CUDA toolkit/nvrtc of torch's CUDA major)"
        ) from e
    return dict(
        version=getattr(humming, "__version__", "?"),
        ops=ops,
        forward=humming_forward,
        Layer=HummingLayer,
        Schema=HummingWeightSchema,
        heuristics=get_heuristics_config,
    )


def _quantized_layer(torch, hm, e, n, k, wcfg, act_dtype, gen, dev):
    """HummingLayer for E x n x k random weights: (layer, original schema, pre-transform tensors, kernel tensors)."""
    layer = _guard(
        "HummingLayer()",
        hm["Layer"],
        shape_n=n,
        shape_k=k,
        weight_config=dict(wcfg),
        num_experts=e,
        torch_dtype=act_dtype,
    ).to(f"cuda:{dev}")
    schema = layer.weight_schema
    chunk = max(1, (1 << 27) // (n * k))  # experts per quantization step, to bound the float temp
    parts = []
    for s in range(0, e, chunk):
        w = torch.randn((min(chunk, e - s), n, k), generator=gen, device=f"cuda:{dev}", dtype=act_dtype).mul_(k**-0.5)
        # positive scales only (what the kernel tests use for block-scaled MMA); valid for every format
        parts.append(
            _guard("quant_tensor", hm["Schema"].quant_tensor, w, schema, act_dtype, allow_negative_scale=False)
        )
        del w
    q = {name: torch.cat([p[name] for p in parts]) for name in parts[0]}
    _guard("load_from_tensors", layer.load_from_tensors, q)
    _guard("transform", layer.transform)
    tensors = {name: t.detach() for name in _WEIGHT_NAMES if (t := getattr(layer, name, None)) is not None}
    return layer, schema, q, tensors


def _base(torch, hm, e, hidden, inter, qtype, group, act_dtype, dev):
    key = (e, hidden, inter, qtype, group, str(act_dtype), dev)
    if key not in _BASE:
        _BASE.clear()
        torch.cuda.empty_cache()
        wcfg = dict(_QTYPES[qtype][0])
        if group > 0:
            wcfg["group_size"] = group
        gen = torch.Generator(device=f"cuda:{dev}")
        gen.manual_seed(0)
        _BASE[key] = {
            "w13": _quantized_layer(torch, hm, e, 2 * inter, hidden, wcfg, act_dtype, gen, dev),
            "w2": _quantized_layer(torch, hm, e, hidden, inter, wcfg, act_dtype, gen, dev),
        }
    return _BASE[key]


def clear_humming_cache():
    """Drop the cached quantized base weights (frees their GPU memory once no peer object holds them)."""
    _BASE.clear()


def _align(torch, flat, e, block):
    """moe_align_block_size in torch: expert-sorted flat top-k ids, each expert padded to `block`."""
    n = flat.numel()
    counts = torch.bincount(flat, minlength=e)
    padded = (counts + block - 1) // block * block
    order = torch.argsort(flat, stable=True)
    se = flat[order]
    rank = torch.arange(n, device=flat.device) - (torch.cumsum(counts, 0) - counts)[se]
    total = int(padded.sum())
    sorted_ids = torch.full((total,), n, dtype=torch.int32, device=flat.device)
    sorted_ids[(torch.cumsum(padded, 0) - padded)[se] + rank] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(e, device=flat.device), padded // block).to(torch.int32)
    ntp = torch.tensor([total], dtype=torch.int32, device=flat.device)
    return {"sorted_ids": sorted_ids, "expert_ids": expert_ids, "num_tokens_padded": ntp}


class _HummingMoE:
    def __init__(self, torch, hm, base, e, hidden, inter, act_dtype, topk, tokens, copies, mode, activation):
        self.torch, self.hm, self.base = torch, hm, base
        self.e, self.hidden, self.inter, self.dtype, self.topk, self.tokens = e, hidden, inter, act_dtype, topk, tokens
        self.mode, self.activation, self._act_why = mode, activation, ""
        self.layers = {w: base[w][0] for w in ("w13", "w2")}
        self.weights = {
            w: [base[w][3]] + [{n: t.clone() for n, t in base[w][3].items()} for _ in range(copies - 1)]
            for w in ("w13", "w2")
        }
        self.compute = json.dumps({"gemm_type": mode})
        self.tuning, self.block = {}, {}
        for w, layer in self.layers.items():
            cfg = _guard(
                f"{w} heuristics",
                hm["heuristics"],
                layer.humming_config,
                shape_m=tokens * topk,
                gemm_type=mode,
                device=layer.locks.device,
            )
            self.tuning[w] = json.dumps(cfg, default=lambda o: getattr(o, "value", str(o)))
            self.block[w] = int(cfg["block_shape"][0])
        self._prepared = None
        self.note = self._make_note()

    def _make_note(self):
        act = (
            "humming ops.process_input(binary_split, silu expr)"
            if self.activation == "humming"
            else f"torch silu*mul{self._act_why}"
        )
        route = (
            "indexed (sorted_ids/expert_ids from a torch moe_align in prepare)"
            if self.mode == "indexed"
            else "grouped_contiguous (expert_layout in prepare; torch index_select gathers x and unpermutes)"
        )
        return (
            f"humming {self.hm['version']} humming_forward/humming_gemm {route}, block_m w13={self.block['w13']}"
            f" w2={self.block['w2']}; SwiGLU: {act}; weighted top-k sum: torch.bmm"
        )

    def prepare(self, x, topk_ids, topk_weights):
        torch, t, k = self.torch, self.tokens, self.topk
        if not (x.is_cuda and x.dtype == self.dtype and tuple(x.shape) == (t, self.hidden)):
            raise ValueError(
                f"x must be a CUDA {self.dtype} ({t}, {self.hidden}) tensor, got {x.dtype} {tuple(x.shape)}"
            )
        if tuple(topk_ids.shape) != (t, k) or tuple(topk_weights.shape) != (t, k):
            raise ValueError(
                f"topk_ids / topk_weights must be ({t}, {k}), got {tuple(topk_ids.shape)} / {tuple(topk_weights.shape)}"
            )
        flat = topk_ids.reshape(-1).to(device=x.device, dtype=torch.int64)
        if int(flat.min()) < 0 or int(flat.max()) >= self.e:
            raise ValueError(f"topk_ids out of range [0, {self.e})")
        dev, n = x.device, t * k
        self._x, self._tw = x, topk_weights.to(device=dev, dtype=self.dtype).reshape(t, 1, k).contiguous()
        if self.mode == "indexed":
            r13 = _align(torch, flat, self.e, self.block["w13"])
            r2 = r13 if self.block["w2"] == self.block["w13"] else _align(torch, flat, self.e, self.block["w2"])
            self._route = {"w13": (r13, k), "w2": (r2, 1)}
        else:
            order = torch.argsort(flat, stable=True)
            layout = torch.nn.functional.pad(torch.cumsum(torch.bincount(flat, minlength=self.e), 0), (1, 0))
            self._src_rows, self._inv = order // k, torch.argsort(order)
            self._xs = torch.empty((n, self.hidden), device=dev, dtype=self.dtype)
            self._yu = torch.empty((n, self.hidden), device=dev, dtype=self.dtype)
            self._route = {w: ({"expert_layout": layout.to(torch.int64)}, 1) for w in ("w13", "w2")}
        self._h1 = torch.empty((n, 2 * self.inter), device=dev, dtype=self.dtype)
        self._a = torch.empty((n, self.inter), device=dev, dtype=self.dtype)
        self._y = torch.empty((n, self.hidden), device=dev, dtype=self.dtype)
        self._out = torch.empty((t, self.hidden), device=dev, dtype=self.dtype)
        self._prepared = (x, topk_ids, topk_weights)
        self._gemm("w13", 0, self._gemm_input())  # JIT-compiles outside the timed region
        if self.activation == "humming":
            try:
                self._act()
                h = self._h1.float()
                ref = torch.nn.functional.silu(h[:, : self.inter]) * h[:, self.inter :]
                err = float((self._a.float() - ref).norm() / ref.norm().clamp_min(1e-30))
                if not err < 2e-2:
                    raise HummingPeerError(f"activation self-check error {err:.3g}")
            except Exception as ex:
                self.activation, self._act_why = "torch", f" (humming's process_input failed: {str(ex)[:80]})"
                self.note = self._make_note()
        self.run(0)
        torch.cuda.synchronize()

    def _gemm_input(self):
        if self.mode == "indexed":
            return self._x
        return self.torch.index_select(self._x, 0, self._src_rows, out=self._xs)

    def _gemm(self, w, i, inputs):
        route, top_k = self._route[w]
        out = self._h1 if w == "w13" else self._y
        _guard(
            f"{w} GEMM ({self.mode})",
            self.hm["forward"],
            self.layers[w].humming_config,
            inputs=inputs,
            outputs=out,
            locks=self.layers[w].locks,
            top_k=top_k,
            compute_config=self.compute,
            tuning_config=self.tuning[w],
            **self.weights[w][i],
            **route,
        )

    def _act(self):
        if self.activation == "humming":
            _guard(
                "process_input activation",
                self.hm["ops"].process_input,
                self._h1,
                outputs=self._a,
                activation_type="binary_split",
                activation_impl=_SILU_MUL,
            )
        else:
            torch = self.torch
            torch.mul(torch.nn.functional.silu(self._h1[:, : self.inter]), self._h1[:, self.inter :], out=self._a)

    def run(self, i):
        if self._prepared is None:
            raise RuntimeError("call prepare(x, topk_ids, topk_weights) before run()")
        torch, t = self.torch, self.tokens
        self._gemm("w13", i, self._gemm_input())
        self._act()
        self._gemm("w2", i, self._a)
        y = self._y if self.mode == "indexed" else torch.index_select(self._y, 0, self._inv, out=self._yu)
        torch.bmm(self._tw, y.view(t, self.topk, self.hidden), out=self._out.view(t, 1, self.hidden))
        return self._out

    def check(self, x, topk_ids, topk_weights, ref):
        p = self._prepared
        if p is None or p[0] is not x or p[1] is not topk_ids or p[2] is not topk_weights:
            self.prepare(x, topk_ids, topk_weights)
        out = self.run(0).float()
        ref = ref.float()
        return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def make_humming_moe(
    torch,
    num_experts: int,
    hidden: int,
    inter: int,
    qtype: str,
    group_size: int,
    act_dtype,
    topk: int,
    tokens: int,
    copies: int = 1,
    *,
    mode: str | None = None,
    activation: str | None = None,
):
    """`copies` weight sets of a humming MoE block (w13: E x 2I x hidden, w2: E x hidden x I), random data
    quantized as `qtype`. mode: 'indexed' (vLLM's default) or 'grouped_contiguous'; activation: 'humming'
    (process_input kernel) or 'torch'. Env BENCHMOE_HUMMING_MODE / BENCHMOE_HUMMING_ACT override the defaults."""
    if qtype not in _QTYPES:
        raise NotImplementedError(f"humming peer: qtype {qtype!r} is not mapped (known: {', '.join(_QTYPES)})")
    mode = (mode or os.environ.get("BENCHMOE_HUMMING_MODE") or "indexed").lower()
    mode = "grouped_contiguous" if mode in ("grouped", "grouped_contiguous") else mode
    activation = (activation or os.environ.get("BENCHMOE_HUMMING_ACT") or "humming").lower()
    if mode not in ("indexed", "grouped_contiguous") or activation not in ("humming", "torch"):
        raise ValueError(f"mode {mode!r} / activation {activation!r}: want indexed|grouped_contiguous, humming|torch")
    if act_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"act_dtype must be torch.float16 or torch.bfloat16, got {act_dtype}")
    fixed = _QTYPES[qtype][1]
    group = int(group_size) if group_size and group_size > 0 else 0
    if fixed is not None and group != fixed:
        raise ValueError(f"{qtype} has group size {fixed}, got {group_size}")
    for name, v in (
        ("num_experts", num_experts),
        ("hidden", hidden),
        ("inter", inter),
        ("topk", topk),
        ("tokens", tokens),
        ("copies", copies),
    ):
        if int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if topk > num_experts:
        raise ValueError(f"topk {topk} > num_experts {num_experts}")
    if hidden % 64 or inter % 32 or (group and (hidden % group or inter % group)):
        raise ValueError(f"hidden {hidden} / inter {inter} must be multiples of 64 / 32 and of the group {group}")
    if not torch.cuda.is_available():
        raise RuntimeError("humming needs a CUDA device")
    hm = _import_humming()
    dev = torch.cuda.current_device()
    base = _base(torch, hm, num_experts, hidden, inter, qtype, group, act_dtype, dev)
    return _HummingMoE(torch, hm, base, num_experts, hidden, inter, act_dtype, topk, tokens, copies, mode, activation)


def humming_moe_reference(torch, h, x, topk_ids, topk_weights):
    """float32 (tokens, hidden): the block on humming's own dequantized weights (HummingWeightSchema.dequant_tensors)."""
    (_, s13, q13, _), (_, s2, q2, _) = h.base["w13"], h.base["w2"]
    xf, tw = x.float(), topk_weights.float().to(x.device)
    ids = topk_ids.to(device=x.device, dtype=torch.int64)
    out = torch.zeros((x.shape[0], h.hidden), device=x.device, dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        rows, slots = torch.nonzero(ids == e, as_tuple=True)
        w13 = _guard("dequant w13", s13.dequant_tensors, {n: t[e] for n, t in q13.items()}).float()
        w2 = _guard("dequant w2", s2.dequant_tensors, {n: t[e] for n, t in q2.items()}).float()
        hh = xf[rows] @ w13.T
        a = torch.nn.functional.silu(hh[:, : h.inter]) * hh[:, h.inter :]
        out.index_add_(0, rows, (a @ w2.T) * tw[rows, slots, None])
    return out
