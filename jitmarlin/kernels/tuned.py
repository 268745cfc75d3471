"""Tuned choices, the pure part: problem buckets, the tuned-choice key and record format, reading
a stored choice and deciding whether linear() uses it (choose_for).

The measuring part, the autotuner (jitmarlin.service.tune: time the planner's candidates on the
GPU, keep the fastest, store it), sits in the service layer and registers itself here
(set_autotuner) for JITMARLIN_AUTOTUNE=1; nothing here measures, so the decisions are tested on
the CPU.

A choice is stored under tune_key(): the GPU (planning profile name: the driver's GPU name, or
the JITMARLIN_EMULATE profile), its arch, the problem's quant type, activation dtype, group size,
N, K and M bucket, plus the jitmarlin version and the templates' digest, so that a choice made
for other kernel code is never used (it stays on disk, shown as stale by `jitmarlin cache ls`,
until `cache clear`). It is a "tune:" record of the kernel store (jitmarlin.jit.records): the
store keeps it without knowing its format.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from jitmarlin._version import __version__
from jitmarlin.errors import JitMarlinError
from jitmarlin.jit.cache import KernelCache
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.jit.records import RecordKind, canonical_json, register_record_kind  # noqa: F401  (canonical_json: re-exported)
from jitmarlin.kernels import planner
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import spec_from_canonical
from jitmarlin.settings import autotune_enabled

log = logging.getLogger("jitmarlin")

MAX_BUCKET = 8192  # M above this shares the 8192 bucket
MARGIN = 0.02  # a candidate replaces the default only when >= 2% faster (noise)
RECORD_FORMAT = 1
TUNE_PREFIX = "tune:"  # the store's record prefix of tuned choices
TUNED_MEMBER = "tuned.json"  # their member in a bundle


# ---- keys ----------------------------------------------------------------------------------------


def shape_bucket(m: int) -> int:
    """The M bucket of a batch of `m` rows: m rounded up to a power of two, at most MAX_BUCKET
    (1, 2, 4, ..., 8192; M=1, decode, is its own bucket). A bucket is tuned at M = bucket."""
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"M must be an integer >= 1, got {m!r}")
    return min(1 << (m - 1).bit_length(), MAX_BUCKET)


def bucket_problem(p: Problem) -> Problem:
    """`p` with M set to its bucket: the problem a bucket is tuned on."""
    return dataclasses.replace(p, m=shape_bucket(p.m))


@lru_cache(maxsize=1)
def templates_tag() -> str:
    """First 16 hex digits of the templates' digest (read once per process)."""
    from jitmarlin.kernels.render import templates_digest

    return templates_digest()[:16]


def tune_key(gpu: str, arch: str, p: Problem, version: str | None = None, templates: str | None = None) -> str:
    """The cache key of the tuned choice for problem `p` on GPU `gpu` (a profile name) with arch
    `arch`: 'tune:<gpu>|<arch>|<qtype>|<act>|g<group>|n<N>|k<K>|m<M bucket>|<version>|<templates>'.
    version and templates default to this jitmarlin's."""
    gpu = " ".join(str(gpu).replace("|", "/").split())
    parts = (
        gpu,
        arch,
        p.qtype,
        p.act,
        f"g{p.group_size}",
        f"n{p.n}",
        f"k{p.k}",
        f"m{shape_bucket(p.m)}",
        version or __version__,
        templates or templates_tag(),
    )
    return TUNE_PREFIX + "|".join(map(str, parts))


# ---- the record ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TunedChoice:
    """The outcome of tuning one problem bucket on one GPU model (stored as a plain dict).

    gpu, arch: the GPU (profile name) and its arch; qtype, act, group_size, n, k, m_bucket: the
    problem bucket (measured at M = m_bucket). spec, kind: canonical text and spec kind of the
    winner; default_spec, default_kind: the planner's choice for the bucket. us, default_us:
    measured GPU time per call, microseconds (CUDA-graph replay, weights rotated past L2).
    candidates: specs tried, the default included; failed: how many of them could not be compiled
    or run. jitmarlin, templates: the code the times belong to. created: epoch seconds.
    """

    gpu: str
    arch: str
    qtype: str
    act: str
    group_size: int
    n: int
    k: int
    m_bucket: int
    spec: str
    kind: str
    us: float
    default_spec: str
    default_kind: str
    default_us: float
    candidates: int
    failed: int
    jitmarlin: str
    templates: str
    created: float
    format: int = RECORD_FORMAT

    @property
    def problem(self) -> Problem:
        return Problem(self.m_bucket, self.n, self.k, self.act, self.qtype, self.group_size)

    @property
    def key(self) -> str:
        return tune_key(self.gpu, self.arch, self.problem, self.jitmarlin, self.templates)

    @property
    def improved(self) -> bool:
        """The winner is not the planner's default (else the default is used, per exact M)."""
        return (self.spec, self.kind) != (self.default_spec, self.default_kind)

    @property
    def speedup(self) -> float:
        """default_us / us (1.0 when the default won)."""
        return self.default_us / self.us if self.us > 0 else 1.0

    @property
    def stale(self) -> bool:
        """Measured with another jitmarlin version or other templates (never used)."""
        return self.jitmarlin != __version__ or self.templates != templates_tag()

    def winner(self):
        return spec_from_canonical(self.spec, self.kind)

    def default(self):
        return spec_from_canonical(self.default_spec, self.default_kind)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d) -> "TunedChoice":
        """Parse a stored record; ValueError names what is wrong (unknown fields are ignored)."""
        return cls(**record_fields(cls, d, RECORD_FORMAT))


def record_fields(cls, d, fmt: int) -> dict:
    """The fields of dataclass `cls` read from stored record `d` (JSON), each of its annotated
    type (str, int, float: finite and >= 0, dict), the record's format `fmt`; ValueError names
    what is wrong. Unknown fields are ignored."""
    if not isinstance(d, dict):
        raise ValueError(f"not a record ({type(d).__name__})")
    if d.get("format") != fmt:
        raise ValueError(f"record format {d.get('format')!r}, this jitmarlin reads {fmt}")
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            raise ValueError(f"missing field {f.name}")
        v = d[f.name]
        want = {"str": str, "int": int, "float": (int, float), "dict": dict}[f.type]
        if not isinstance(v, want) or isinstance(v, bool):
            raise ValueError(f"field {f.name} is {type(v).__name__}, expected {f.type}")
        if f.type == "float" and not (math.isfinite(v) and v >= 0):
            raise ValueError(f"field {f.name} = {v} is not a finite non-negative number")
        kw[f.name] = float(v) if f.type == "float" else v
    return kw


def record_problem(key: str, d) -> str | None:
    """What is wrong with stored record `d` under `key` (fields, specs, key), or None."""
    try:
        c = TunedChoice.from_dict(d)
        c.winner()
        c.default()
    except ValueError as exc:
        return str(exc)
    if c.key != key:
        return "key does not match the record's GPU/arch/problem/version"
    return None


# The tuned choices are the store's "tune:" records (jitmarlin.jit.records): verify() checks them
# with record_problem, bundles carry them in tuned.json (manifest section "tuned").
TUNED_KIND = register_record_kind(
    RecordKind(
        prefix=TUNE_PREFIX,
        label="tuned choice",
        section="tuned",
        member=TUNED_MEMBER,
        format=RECORD_FORMAT,
        check=record_problem,
    )
)


# ---- the autotune hook (registered by jitmarlin.service.tune) ---------------------------------------

Autotuner = Callable[..., "TunedChoice | None"]
_autotuner: Autotuner | None = None


def set_autotuner(fn: Autotuner | None) -> None:
    """Register fn(profile, arch, p, cache, device, tuner) -> TunedChoice or None: tunes `p`'s
    bucket now and stores the choice (JITMARLIN_AUTOTUNE=1). The service layer registers the GPU
    one; without one, choose_for() only reads stored choices."""
    global _autotuner
    _autotuner = fn


def _autotune(profile, arch, p, cache, device, tuner):
    return None if _autotuner is None else _autotuner(profile, arch, p, cache, device, tuner)


def lookup(cache: KernelCache, gpu: str, arch: str, p: Problem) -> TunedChoice | None:
    """The current tuned choice for `p`'s bucket on GPU `gpu` / `arch`, or None (absent, or a bad
    record: warned and ignored)."""
    return read_record(cache, tune_key(gpu, arch, p), TUNED_KIND, TunedChoice)


def read_record(cache: KernelCache, key: str, kind: RecordKind, cls):
    """The stored record under `key` parsed as `cls`, or None (absent, or failing `kind`'s check:
    warned and ignored)."""
    d = cache.get_record(key)
    if d is None:
        return None
    why = kind.check(key, d)
    if why:
        log.warning("jitmarlin: %s %s is bad (%s); ignoring it", kind.label, key, why)
        return None
    return cls.from_dict(d)


def choose_for(
    profile: DeviceProfile,
    arch: str,
    p: Problem,
    cache: KernelCache,
    *,
    device: int = 0,
    capturing: bool = False,
    autotune: bool | None = None,
    tuner: Callable[[DeviceProfile, str, Problem], TunedChoice] | None = None,
):
    """The spec ops.linear._prepare should use for problem `p`, or None for the planner's default.

    A stored choice for (profile.name, arch, bucket of p) is used when its winner is not the
    default and planner.plan() accepts it for the exact problem (a wgmma winner built for p's
    short last row block, planner.tail_spec, where p has one). With none stored, and
    `autotune` (default: JITMARLIN_AUTOTUNE=1) outside CUDA-graph capture, the bucket is tuned
    now by the registered autotuner (jitmarlin.service.tune registers it: tuner(profile, arch, p),
    default jitmarlin.service.measure on GPU `device`, under a per-key lock), and stored. A
    failed tuning is logged and not retried in this process.
    During capture a stored choice is used only when its kernel is already compiled."""
    choice = lookup(cache, profile.name, arch, p)
    if choice is None and not capturing and (autotune_enabled() if autotune is None else autotune):
        choice = _autotune(profile, arch, p, cache, device, tuner)
    if choice is None or not choice.improved:
        return None
    try:
        # tuned at the bucket's M: built for this M's short last row block where it has one
        spec = planner.tail_spec(p, choice.winner())
        planner.plan(profile, p, spec)
    except (JitMarlinError, ValueError) as exc:
        log.warning("jitmarlin: tuned choice %s does not fit M=%d (%s); using the planner's", choice.key, p.m, exc)
        return None
    if capturing and cache.get(spec, arch, compile_missing=False)[0] is None:
        return None  # (stored after warm-up, not compiled: nothing may compile during capture)
    return spec


def describe_spec(text: str, kind: str) -> str:
    """A spec's readable name from its stored text (the text itself if it does not parse)."""
    try:
        return spec_from_canonical(text, kind).name
    except (ValueError, AttributeError):
        return text
