"""The MoE autotuner: for one MoE problem bucket on the live GPU, time the planner's plan, every w13
tile, every w2 tile and every K split of each GEMM (each against the planner's other choices), then the
best of each combined; keep the combination where it beats the planner by MARGIN, and store the
outcome as a "tunemoe:" record (jitmarlin.kernels.moe.tuned), which jitmarlin.moe then uses for
that GPU model and token bucket.

tune_moe() takes the measurement as a function (plan -> µs), so the selection is tested on the
CPU; GpuMoeMeasure is the GPU one (graph replay of the whole block, weight copies rotated past 4x
L2 by the bytes the routing touches, uniform random routing with a fixed seed).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from jitmarlin._version import __version__
from jitmarlin.jit.cache import KernelCache
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.moe import MoEPlan, MoEProblem, plan_moe
from jitmarlin.kernels.moe.plan import stage_candidates
from jitmarlin.kernels.moe.tuned import MoETunedChoice, bucket, moe_key
from jitmarlin.kernels.tuned import templates_tag

MARGIN = 0.02  # the combination replaces the planner's plan only when >= 2% faster
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


def _try(measure, plan) -> float:
    try:
        us = float(measure(plan))
    except Exception:  # a candidate that does not build or run is skipped, not fatal
        return math.inf
    return us if math.isfinite(us) and us > 0 else math.inf


def tune_moe(profile: DeviceProfile, arch: str, p: MoEProblem, measure: Callable[[MoEPlan], float]) -> MoETunedChoice:
    """Tune `p`'s token bucket with `measure` (plan -> GPU µs); returns the choice (not stored)."""
    bp = bucket(p)
    base = plan_moe(profile, bp)
    default_us = _try(measure, base)
    if not math.isfinite(default_us):
        raise RuntimeError(f"the planner's MoE plan for {bp} did not run")
    tried, failed = 1, 0
    best = {
        "up": (default_us, base.up),
        "down": (default_us, base.down),
        "splits": (default_us, base.splits),
        "up_splits": (default_us, base.up_splits),
    }
    # The other kind first (decode on sm_80+: GEMV against mma.sync); the stages' candidates are
    # then of the faster kind (ref).
    ref = base
    try:
        other = plan_moe(profile, bp, gemv=not base.gemv)
    except Exception:  # no plan of the other kind for this problem or GPU
        other = None
    if other is not None:
        o_us = _try(measure, other)
        tried += 1
        failed += not math.isfinite(o_us)
        if o_us < default_us:
            ref = other
            best = {
                "up": (o_us, other.up),
                "down": (o_us, other.down),
                "splits": (o_us, other.splits),
                "up_splits": (o_us, other.up_splits),
            }
    trials = [("up", s) for s in stage_candidates(profile, bp, ref, "up") if s != ref.up]
    trials += [("down", s) for s in stage_candidates(profile, bp, ref, "down") if s != ref.down]
    if not ref.gemv:
        trials += [
            ("splits", n)
            for n in SPLITS
            if n != ref.splits and n <= bp.k2 // ref.down.tile_k and (n == 1 or ref.down.path == "sm80")
        ]
        trials += [
            ("up_splits", n)
            for n in SPLITS
            if n != ref.up_splits and n <= bp.k13 // ref.up.tile_k and (n == 1 or ref.up.path == "sm80")
        ]
    others = {"up": ref.down, "down": ref.up}
    for what, choice in trials:
        kw = {what: choice}
        if what in others:  # the other stage as ref's (its kind)
            kw["down" if what == "up" else "up"] = others[what]
        else:
            kw.update(up=ref.up, down=ref.down)
        try:
            plan = plan_moe(profile, bp, **kw)
        except Exception:  # a candidate this problem cannot take: counted as failed
            tried += 1
            failed += 1
            continue
        us = _try(measure, plan)
        tried += 1
        failed += not math.isfinite(us)
        if us < best[what][0]:
            best[what] = (us, choice)
    winner, us = base, default_us
    combo = (best["up"][1], best["down"][1], best["splits"][1], best["up_splits"][1])
    if combo != (base.up, base.down, base.splits, base.up_splits):
        try:
            plan = plan_moe(
                profile,
                bp,
                up=combo[0],
                down=combo[1],
                splits=min(combo[2], bp.k2 // combo[1].tile_k),
                up_splits=min(combo[3], bp.k13 // combo[0].tile_k),
            )
        except Exception:
            plan = None
        if plan is not None:
            c_us = _try(measure, plan)
            tried += 1
            if c_us < default_us * (1 - MARGIN):
                winner, us = plan, c_us
    return MoETunedChoice(
        gpu=profile.name,
        arch=arch,
        problem=dict(bp.__dict__),
        up=winner.up.canonical(),
        down=winner.down.canonical(),
        splits=winner.splits,
        up_splits=winner.up_splits,
        us=round(us, 3),
        default_up=base.up.canonical(),
        default_down=base.down.canonical(),
        default_splits=base.splits,
        default_up_splits=base.up_splits,
        default_us=round(default_us, 3),
        candidates=tried,
        failed=failed,
        jitmarlin=__version__,
        templates=templates_tag(),
        created=time.time(),
    )


def store(cache: KernelCache, choice: MoETunedChoice) -> bool:
    """Keep `choice` in the store (False when the store is not writable)."""
    key = moe_key(choice.gpu, choice.arch, choice.moe_problem(), choice.jitmarlin, choice.templates)
    return cache.put_record(key, choice.to_dict())


def random_moe(rng, experts: int, out_features: int, in_features: int, qtype: str, group: int, *, gated: bool = False):
    """A host MoEWeight of random codes (fp8 without its NaN codes) and random power-of-two scales
    (2^-8 .. 2^-6, valid in every scale format; offsets -2^-8 for zero-point types): for timing
    only (the tuner, tools/bench --moe)."""
    from jitmarlin.weights.moe import MoEWeight
    from jitmarlin.weights.qtypes import get_qtype, kernel_dims

    n, k = kernel_dims(out_features, in_features, group)
    qt = get_qtype(qtype)
    packed = rng.integers(0, 2**31 - 1, (experts, k // 16, n * qt.bits // 2), dtype=np.int64).astype(np.int32)
    if qtype == "float8_e4m3fn":
        packed &= 0x3F3F3F3F
    if group == -1:
        shape = (experts, 1, n) if qt.zero_points else (experts, n)
    else:
        shape = (experts, k // group, n)
    scales = (rng.integers(0, 3, shape) + 0x1C00).astype(np.uint16)
    offsets = np.full(shape, 0x9C00, np.uint16) if qt.zero_points else None
    return MoEWeight(
        qtype,
        group,
        experts,
        n,
        k,
        packed,
        scales,
        offsets=offsets,
        gated=gated,
        out_features=out_features,
        in_features=in_features,
    )


class GpuMoeMeasure:
    """plan -> GPU µs of the whole MoE block on GPU `device` (CUDA-graph replay; needs torch)."""

    def __init__(self, p: MoEProblem, device: int = 0, target_ms: float = 5.0, seed: int = 0):
        import cupy as cp
        import torch

        from jitmarlin.jit.profiles import live_profile
        from jitmarlin.service.bench import Timer

        rng = np.random.default_rng(seed)

        self.p, self.device = p, device
        self.w13 = random_moe(rng, p.experts, 2 * p.inter, p.hidden, p.qtype, p.group_size, gated=True)
        self.w2 = random_moe(rng, p.experts, p.hidden, p.inter, p.down_qtype, p.down_group)
        ids = np.argsort(rng.random((p.tokens, p.experts)), axis=1)[:, : p.topk].astype(np.int32)
        per = sum(a[0].nbytes for w in (self.w13, self.w2) for a in (w.packed, w.scales))
        self.copies = max(1, min(16, math.ceil(4 * live_profile(device).l2_bytes / (len(np.unique(ids)) * per))))
        self.stream = torch.cuda.Stream(device)
        self.timer = Timer(torch, target_ms, stream=self.stream)
        tdt = torch.float16 if p.act == "float16" else torch.bfloat16
        self.x = (torch.randn(p.tokens, p.hidden, device=f"cuda:{device}") * 0.5).to(tdt)
        self.ids = torch.from_numpy(ids).to(self.x.device)
        self.tw = torch.full((p.tokens, p.topk), 1.0 / p.topk, device=self.x.device)
        self.y = torch.empty_like(self.x)
        import copy

        self.w13s, self.w2s = [self.w13], [self.w2]
        for _ in range(self.copies - 1):  # own device copies of the codes, shared host arrays
            for src, dst in ((self.w13, self.w13s), (self.w2, self.w2s)):
                c = copy.copy(src)
                base = src.to_device(device, p.act)
                object.__setattr__(c, "_device", {(device, p.act): (cp.array(base[0]),) + tuple(base[1:])})
                dst.append(c)

    def __call__(self, plan: MoEPlan) -> float:
        from jitmarlin.ops import moe as moe_ops

        p = self.p
        rs = [
            moe_ops._Runner(
                self.w13s[i],
                self.w2s[i],
                self.device,
                p.act,
                p.tokens,
                p.topk,
                self.stream.cuda_stream,
                p.activation,
                False,
                plan=plan,
            )
            for i in range(self.copies)
        ]
        ptrs = (self.x.data_ptr(), self.ids.data_ptr(), self.tw.data_ptr(), 0, p.experts, self.y.data_ptr())
        return self.timer([lambda r=r: r(*ptrs) for r in rs])


def tune_on_gpu(
    profile: DeviceProfile, arch: str, p: MoEProblem, cache: KernelCache, device: int = 0, force: bool = False
) -> MoETunedChoice:
    """Tune `p`'s bucket on GPU `device` and store the choice (a stored current one is returned
    as it is unless `force`)."""
    from jitmarlin.kernels.moe.tuned import lookup

    if not force:
        have = lookup(cache, profile.name, arch, p)
        if have is not None:
            return have
    bp = bucket(p)
    choice = tune_moe(profile, arch, bp, GpuMoeMeasure(bp, device))
    store(cache, choice)
    return choice
