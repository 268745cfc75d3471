"""Fleet prewarm for mixture-of-experts layers: a manifest's optional "moe" object -> the routed
experts' shapes per tensor- or expert-parallel degree -> the MoE family's kernels (routing module,
w13 and w2 grouped GEMMs) for every GPU profile, token count, dtype and quant type.

Manifest format (cache/README.md): "moe": {"experts": E, "topk": k, "intermediate_size": I,
"activation": "silu" | "gelu" | "swigluoai", "ep": [1, 8]}. With TP degree t each GPU holds every
expert with I / t intermediate features; with EP degree d (from "ep", d > 1) it holds E / d whole
experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitmarlin.errors import InputError, JitMarlinError
from jitmarlin.kernels.moe import MoEProblem, plan_moe
from jitmarlin.kernels.moe.spec import ACTIVATIONS
from jitmarlin.weights.qtypes import kernel_dims


@dataclass(frozen=True)
class MoEConfig:
    experts: int
    topk: int
    intermediate: int
    activation: str = "silu"
    ep: tuple[int, ...] = (1,)


@dataclass(frozen=True)
class MoEShape:
    """The routed experts of one layer on one GPU: `experts` local experts of (2 inter, hidden)
    and (hidden, inter), top-k routing."""

    experts: int
    topk: int
    hidden: int
    inter: int
    activation: str
    label: str = ""

    @property
    def k(self) -> int:  # (fleet.Skipped's fields)
        return self.hidden

    @property
    def n(self) -> int:
        return 2 * self.inter


def _pos(d: dict, key: str, where: str) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise InputError(f"{where}: moe.{key} must be a positive integer, got {v!r}")
    return v


def parse_moe(d, where: str) -> MoEConfig | None:
    """The manifest's "moe" object, validated (None when absent)."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise InputError(f"{where}: 'moe' must be an object")
    unknown = set(d) - {"experts", "topk", "intermediate_size", "activation", "ep"}
    if unknown:
        raise InputError(f"{where}: unknown moe field(s) {sorted(unknown)}")
    act = d.get("activation", "silu")
    if act not in ACTIVATIONS:
        raise InputError(f"{where}: moe.activation must be one of {', '.join(ACTIVATIONS)}, got {act!r}")
    ep = d.get("ep", [1])
    if (
        not isinstance(ep, list)
        or not ep
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in ep)
    ):
        raise InputError(f"{where}: moe.ep must be a list of positive integers, got {ep!r}")
    cfg = MoEConfig(
        _pos(d, "experts", where), _pos(d, "topk", where), _pos(d, "intermediate_size", where), act, tuple(ep)
    )
    if cfg.topk > cfg.experts:
        raise InputError(f"{where}: moe.topk ({cfg.topk}) exceeds moe.experts ({cfg.experts})")
    return cfg


def expand(cfg: MoEConfig, model: str, hidden: int, tp: int, first: bool) -> tuple[list[MoEShape], list[tuple]]:
    """Per-GPU MoE shapes for TP degree `tp` (experts split along I), and (on the first TP degree
    only, `first`) for each EP degree (whole experts spread over GPUs). Returns (shapes, skipped)
    with skipped as (label, reason) pairs."""
    shapes, skipped = [], []
    label = f"{model} tp={tp} experts"
    if cfg.intermediate % tp or (cfg.intermediate // tp) % 8:
        skipped.append(
            (label, f"TP={tp} does not split the {cfg.intermediate} intermediate features into multiples of 8")
        )
    else:
        shapes.append(MoEShape(cfg.experts, cfg.topk, hidden, cfg.intermediate // tp, cfg.activation, label))
    for d in cfg.ep if first else ():
        if d == 1:
            continue
        label = f"{model} ep={d} experts"
        if cfg.experts % d:
            skipped.append((label, f"EP={d} does not divide the {cfg.experts} experts"))
            continue
        shapes.append(MoEShape(cfg.experts // d, cfg.topk, hidden, cfg.intermediate, cfg.activation, label))
    return shapes, skipped


def plan_jobs(profs, shapes: list[MoEShape], ms, acts, qtypes, group_sizes, report, jobs: dict) -> None:
    """Add the kernels of every (profile, MoE shape, tokens = M, dtype, quant type, group) to
    `jobs` ({(spec, arch): [profile names]}, fleet.plan_fleet's); planner refusals count in
    report.unsupported as the dense ones do."""
    for s in dict.fromkeys(shapes):
        for g in group_sizes:
            n13, k13 = kernel_dims(2 * s.inter, s.hidden, g)
            n2, k2 = kernel_dims(s.hidden, s.inter, g)
            for p in profs:
                for m in ms:
                    for act in acts:
                        for q in qtypes:
                            prob = MoEProblem(
                                m, s.topk, s.experts, n13, k13, n2, k2, s.inter, s.hidden, act, q, g, s.activation
                            )
                            try:
                                plan = plan_moe(p, prob)
                            except JitMarlinError as e:
                                report.unsupported[(p.name, p.arch, str(e))] += 1
                                continue
                            for spec in (plan.route, plan.up, plan.down):
                                users = jobs.setdefault((spec, p.arch), [])
                                if p.name not in users:
                                    users.append(p.name)
