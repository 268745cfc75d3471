"""Tuned MoE choices, the pure part: key, record and lookup (the measuring is
jitmarlin.service.tune_moe's). A choice is the w13 tile, the w2 tile and both K splits that ran
fastest for one MoE problem bucket (token count rounded up to a power of two) on one GPU model,
stored as a "tunemoe:" record of the kernel store beside the dense layers' "tune:" records, with
the same rules: keyed by GPU, arch, problem, jitmarlin version and templates digest; JSON only;
checked on load; carried by bundles.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from jitmarlin._version import __version__
from jitmarlin.errors import JitMarlinError
from jitmarlin.jit.cache import KernelCache
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.jit.records import RecordKind, register_record_kind
from jitmarlin.kernels.moe import wgmma as moe_wgmma
from jitmarlin.kernels.moe.plan import MoEPlan, MoEProblem, plan_moe
from jitmarlin.kernels.moe.spec import MoEGemvSpec, MoESpec
from jitmarlin.kernels.moe.wgmma import MoEWgmmaSpec
from jitmarlin.kernels.spec import spec_from_canonical
from jitmarlin.kernels.tuned import read_record, record_fields, shape_bucket, templates_tag

log = logging.getLogger("jitmarlin")

PREFIX = "tunemoe:"
MEMBER = "tuned_moe.json"
FORMAT = 1


def bucket(p: MoEProblem) -> MoEProblem:
    """`p` with its token count rounded up to its bucket (the problem a bucket is tuned on)."""
    return dataclasses.replace(p, tokens=shape_bucket(p.tokens))


def moe_key(gpu: str, arch: str, p: MoEProblem, version: str | None = None, templates: str | None = None) -> str:
    """'tunemoe:<gpu>|<arch>|<qtype>|<act>|g<group>|e<E>|k<topk>|h<hidden>|i<inter>|<activation>|
    t<T bucket>|<version>|<templates>' (hidden and inter as the layer's, the padded dims follow)."""
    gpu = " ".join(str(gpu).replace("|", "/").split())
    qt = p.qtype if not p.qtype2 else f"{p.qtype}+{p.qtype2}"  # w13 + w2 where they differ
    g = f"g{p.group_size}" if not p.qtype2 else f"g{p.group_size}+{p.group2}"
    parts = (
        gpu,
        arch,
        qt,
        p.act,
        g,
        f"e{p.experts}",
        f"k{p.topk}",
        f"h{p.hidden}",
        f"i{p.inter}",
        p.activation,
        f"t{shape_bucket(p.tokens)}",
        version or __version__,
        templates or templates_tag(),
    )
    return PREFIX + "|".join(map(str, parts))


@dataclass(frozen=True)
class MoETunedChoice:
    """The outcome of tuning one MoE problem bucket on one GPU model. up/down: canonical specs of
    the winning tiles, splits: the winning w2 K splits; default_*: the planner's; us/default_us:
    GPU time of the whole block (graph replay, weights past L2), microseconds."""

    gpu: str
    arch: str
    problem: dict  # MoEProblem fields at the bucket's token count
    up: str
    down: str
    splits: int
    up_splits: int
    us: float
    default_up: str
    default_down: str
    default_splits: int
    default_up_splits: int
    default_us: float
    candidates: int
    failed: int
    jitmarlin: str
    templates: str
    created: float
    format: int = FORMAT

    def moe_problem(self) -> MoEProblem:
        return MoEProblem(**self.problem)

    @property
    def key(self) -> str:
        return moe_key(self.gpu, self.arch, self.moe_problem(), self.jitmarlin, self.templates)

    @property
    def improved(self) -> bool:
        return (self.up, self.down, self.splits, self.up_splits) != (
            self.default_up,
            self.default_down,
            self.default_splits,
            self.default_up_splits,
        )

    def specs(self) -> tuple[MoESpec | MoEGemvSpec, MoESpec | MoEGemvSpec]:
        up, down = _stage_spec(self.up), _stage_spec(self.down)
        return up, down

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d) -> MoETunedChoice:
        """Parse a stored record; ValueError names what is wrong."""
        kw = record_fields(cls, d, FORMAT)
        names = {f.name for f in dataclasses.fields(MoEProblem)}
        if set(kw["problem"]) != names:
            raise ValueError(f"problem fields {sorted(kw['problem'])} are not {sorted(names)}")
        return cls(**kw)


def _stage_spec(text: str) -> MoESpec | MoEGemvSpec | MoEWgmmaSpec:
    """A stored grouped-GEMM spec (any kind); ValueError for any other text."""
    spec = spec_from_canonical(text)
    if not isinstance(spec, (MoESpec, MoEGemvSpec, MoEWgmmaSpec)):
        raise ValueError(f"not a MoE grouped GEMM spec: {text[:120]!r}")
    return spec


def record_problem(key: str, d) -> str | None:
    """What is wrong with stored record `d` under `key`, or None."""
    try:
        c = MoETunedChoice.from_dict(d)
        c.moe_problem()
        c.specs()
        _stage_spec(c.default_up)
        _stage_spec(c.default_down)
    except (ValueError, TypeError) as exc:
        return str(exc)
    if min(c.splits, c.default_splits, c.up_splits, c.default_up_splits) < 1:
        return "splits must be >= 1"
    if c.key != key:
        return "key does not match the record's GPU/arch/problem/version"
    return None


KIND = register_record_kind(
    RecordKind(
        prefix=PREFIX, label="tuned MoE choice", section="tuned_moe", member=MEMBER, format=FORMAT, check=record_problem
    )
)


def lookup(cache: KernelCache, gpu: str, arch: str, p: MoEProblem) -> MoETunedChoice | None:
    """The current tuned choice for `p`'s token bucket, or None (absent, or bad: warned and ignored)."""
    return read_record(cache, moe_key(gpu, arch, bucket(p)), KIND, MoETunedChoice)


def plan_for(profile: DeviceProfile, arch: str, p: MoEProblem, cache: KernelCache) -> MoEPlan:
    """The plan jitmarlin.moe runs for `p`: a stored choice for its bucket on this GPU model where
    one exists, improves on the planner and fits `p` exactly, else the planner's."""
    choice = lookup(cache, profile.name, arch, p)
    if choice is not None and choice.improved and moe_wgmma.WGMMA_DEFAULT is None:  # (a forced kind: no record)
        up, down = choice.specs()
        try:
            return plan_moe(
                profile,
                p,
                up=up,
                down=down,
                splits=min(choice.splits, p.k2 // down.tile_k),
                up_splits=min(choice.up_splits, p.k13 // up.tile_k),
            )
        except JitMarlinError as exc:
            log.warning(
                "jitmarlin: tuned MoE choice %s does not fit T=%d (%s); using the planner's", choice.key, p.tokens, exc
            )
    return plan_moe(profile, p)
