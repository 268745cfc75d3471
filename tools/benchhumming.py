"""humming-kernels (vllm-project/humming, PyPI humming-kernels 0.1.20) as a dense peer of tools/bench.

One (K, N) layer per quant type, built the way tools/benchmoe_humming.py builds its experts (the same
qtype -> HummingWeightSchema mapping, _QTYPES there): layer.py HummingLayer(shape_n, shape_k,
weight_config, torch_dtype) on the GPU, random normal weights quantized by humming's own
schema/humming.py HummingWeightSchema.quant_tensor (positive scales), load_from_tensors, transform()
(symmetric ints become e0m<b-1> for float activations; humming_config set). Copies: the transformed
tensors cloned, each called through forward.py humming_forward with the layer's config and locks and
humming's own default tuning (tuning_config None: its heuristics per shape) and no programmatic dependent
launch (use_pdl=False, as jitmarlin in tools/bench), the output written into a buffer kept per M. humming_forward launches on torch's current stream with no host sync and says it
supports full-graph capture: the callables are meant to be captured in a CUDA graph (tools/bench times
them eagerly if capture fails, and says so).

The check: copy 0 at M = check_m against x @ W.T in fp32, W = HummingWeightSchema.dequant_tensors of the
pre-transform tensors (humming's own dequantized weights); its relative error is `rel_err` of every
callable (tools/bench records it as humming_rel_err). torch only; humming is imported on first use.
"""

from __future__ import annotations

from benchmoe_humming import _QTYPES, _WEIGHT_NAMES, HummingPeerError, _guard, _import_humming

__all__ = ["HUMMING_QTYPES", "HummingPeerError", "humming_group", "humming_weight_config", "make_humming"]

HUMMING_QTYPES = tuple(_QTYPES)
CHECK_TOL = 0.03  # relative error above this: the peer computes something else; refused


def humming_group(qtype: str, group: int) -> int:
    """humming's group_size for a bench row: the format's own (nvfp4 16, mxfp4 32), 0 for per channel."""
    fixed = _QTYPES[qtype][1]
    if fixed is not None:
        return fixed
    return 0 if group in (-1, 0, None) else int(group)


def humming_weight_config(qtype: str, group: int) -> dict:
    """The HummingLayer weight_config of `qtype` at `group` (copy of benchmoe_humming's mapping)."""
    if qtype not in _QTYPES:
        raise NotImplementedError(f"humming peer: qtype {qtype!r} is not mapped (known: {', '.join(_QTYPES)})")
    wcfg = dict(_QTYPES[qtype][0])
    g = humming_group(qtype, group)
    if g > 0:
        wcfg["group_size"] = g
    return wcfg


class HummingDense:
    """One copy of the layer: f(x) -> y (act dtype, shape (M, N)), an output buffer kept per M."""

    def __init__(self, torch, hm, layer, tensors, note):
        self.torch, self.hm, self.layer, self.tensors, self.note = torch, hm, layer, tensors, note
        self.rel_err = None
        self._out = {}

    def __call__(self, x):
        m = x.shape[0]
        out = self._out.get(m)
        if out is None:
            out = self._out[m] = self.torch.empty((m, self.layer.shape_n), device=x.device, dtype=x.dtype)
        # use_pdl=False: as jitmarlin's calls in tools/bench, no call overlaps the previous one of the graph
        return self.hm["forward"](
            self.layer.humming_config, inputs=x, outputs=out, locks=self.layer.locks, use_pdl=False, **self.tensors
        )


def _check(torch, f, schema, q, k, dtype, m):
    x = torch.randn((m, k), device=q["weight"].device, dtype=dtype)
    y = _guard("forward (check)", f, x).float()
    w = _guard("dequant_tensors", schema.dequant_tensors, q).float()
    ref = x.float() @ w.T
    del w
    return float((y - ref).norm() / ref.norm().clamp_min(1e-30))


def make_humming(torch, n, k, qtype, group, act_dtype, copies, *, check_m=16, seed=0):
    """`copies` callables f(x) -> y of a humming dense layer (N = n outputs, K = k inputs) of `qtype`
    (tools/bench's names: uint4b8, uint4, uint8b128, float8_e4m3fn, nvfp4, mxfp4) at `group` (-1: per
    channel; nvfp4 / mxfp4 use their own), activations `act_dtype` (torch.float16 / torch.bfloat16).
    Copy 0 is checked at M = check_m (0: no check) against humming's dequantized weights:
    HummingPeerError if the relative error passes CHECK_TOL. Raises ImportError when humming is not
    importable, HummingPeerError (the step that failed) for a failure inside humming."""
    wcfg = humming_weight_config(qtype, group)
    if act_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"act_dtype must be torch.float16 or torch.bfloat16, got {act_dtype}")
    if int(copies) < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    if not torch.cuda.is_available():
        raise RuntimeError("humming needs a CUDA device")
    hm = _import_humming()
    dev = f"cuda:{torch.cuda.current_device()}"
    layer = _guard(
        "HummingLayer()", hm["Layer"], shape_n=n, shape_k=k, weight_config=dict(wcfg), torch_dtype=act_dtype
    ).to(dev)
    schema = layer.weight_schema  # transform() replaces it: keep the quantized one
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    w = torch.randn((n, k), generator=gen, device=dev, dtype=act_dtype).mul_(k**-0.5)
    # positive scales only (what humming's kernel tests use for block-scaled MMA); valid for every format
    q = _guard("quant_tensor", hm["Schema"].quant_tensor, w, schema, act_dtype, allow_negative_scale=False)
    del w
    _guard("load_from_tensors", layer.load_from_tensors, q)
    _guard("transform", layer.transform)
    base = {name: t.detach() for name in _WEIGHT_NAMES if (t := getattr(layer, name, None)) is not None}
    note = (
        f"humming {hm['version']} HummingLayer {wcfg} (quant_tensor, transform), humming_forward "
        f"with its default tuning"
    )
    fns = [HummingDense(torch, hm, layer, base, note)]
    fns += [
        HummingDense(torch, hm, layer, {nm: t.clone() for nm, t in base.items()}, note) for _ in range(int(copies) - 1)
    ]
    if check_m:
        err = _check(torch, fns[0], schema, q, k, act_dtype, int(check_m))
        if not err <= CHECK_TOL:
            raise HummingPeerError(f"humming output check failed at M={check_m}: relative error {err:.3g}")
        for f in fns:
            f.rel_err = err
    del q
    torch.cuda.synchronize()
    return fns
