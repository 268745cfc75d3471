"""The autotuner: time the planner's candidate specs for a problem on the real GPU, keep the
fastest, and remember it in the kernel cache per GPU model and shape bucket.

It sits beside api, not inside the planner: the planner stays pure and proposes (plan() for its
default, candidate_specs() for the search space); this module measures, decides and stores;
api._prepare asks choose_for() before planning. Everything here is pure except the injected
`measure(spec) -> microseconds` and `tuner` callables (jitmarlin.service.measure has the GPU ones), so
the decisions are tested on the CPU.

A choice is stored under tune_key(): the GPU (planning profile name: the driver's GPU name, or
the JITMARLIN_EMULATE profile), its arch, the problem's quant type, activation dtype, group size,
N, K and M bucket, plus the jitmarlin version and the templates' digest, so that a choice made
for other kernel code is never used (it stays on disk, shown as stale by `jitmarlin cache ls`,
until `cache clear`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable

from jitmarlin.kernels import planner
from jitmarlin._version import __version__
from jitmarlin.jit.cache import TUNE_PREFIX, KernelCache
from jitmarlin.errors import JitMarlinError, TuneError
from jitmarlin.kernels.problem import Problem
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.settings import autotune_enabled
from jitmarlin.kernels.spec import spec_from_canonical, spec_kind

log = logging.getLogger("jitmarlin")

MAX_BUCKET = 8192      # M above this shares the 8192 bucket
MARGIN = 0.02          # a candidate replaces the default only when >= 2% faster (noise)
RECORD_FORMAT = 1


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


def tune_key(gpu: str, arch: str, p: Problem, version: str | None = None,
             templates: str | None = None) -> str:
    """The cache key of the tuned choice for problem `p` on GPU `gpu` (a profile name) with arch
    `arch`: 'tune:<gpu>|<arch>|<qtype>|<act>|g<group>|n<N>|k<K>|m<M bucket>|<version>|<templates>'.
    version and templates default to this jitmarlin's."""
    gpu = " ".join(str(gpu).replace("|", "/").split())
    parts = (gpu, arch, p.qtype, p.act, f"g{p.group_size}", f"n{p.n}", f"k{p.k}",
             f"m{shape_bucket(p.m)}", version or __version__, templates or templates_tag())
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
        if not isinstance(d, dict):
            raise ValueError(f"not a record ({type(d).__name__})")
        if d.get("format") != RECORD_FORMAT:
            raise ValueError(f"record format {d.get('format')!r}, this jitmarlin reads {RECORD_FORMAT}")
        kw = {}
        for f in dataclasses.fields(cls):
            if f.name not in d:
                raise ValueError(f"missing field {f.name}")
            v = d[f.name]
            want = {"str": str, "int": int, "float": (int, float)}[f.type]
            if not isinstance(v, want) or isinstance(v, bool):
                raise ValueError(f"field {f.name} is {type(v).__name__}, expected {f.type}")
            if f.type == "float" and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"field {f.name} = {v} is not a finite non-negative number")
            kw[f.name] = float(v) if f.type == "float" else v
        return cls(**kw)


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


def canonical_json(d: dict) -> bytes:
    """A record as deterministic JSON bytes (bundles hash these)."""
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


# ---- choosing ------------------------------------------------------------------------------------

@dataclass
class Selection:
    """What select() measured: the default and the winner with their times (microseconds), every
    (spec, us) timed and every (spec, reason) that failed."""

    default: object
    default_us: float
    winner: object
    winner_us: float
    timings: list = field(default_factory=list)
    failures: list = field(default_factory=list)

    @property
    def tried(self) -> int:
        return len(self.timings) + len(self.failures)


def _time(measure, spec) -> float:
    us = float(measure(spec))
    if not (math.isfinite(us) and us > 0):
        raise TuneError(f"measured {us!r} microseconds")
    return us


def select(default, candidates: Iterable, measure: Callable[[object], float], *,
           margin: float = MARGIN, failures: Iterable = (), confirm: bool = True,
           verify: Callable[[object, object], object] | None = None) -> Selection:
    """Measure `default` (always) and every other candidate with measure(spec) -> microseconds;
    a candidate that raises, or returns a time that is not a positive number, is skipped and
    recorded with the reason. `failures`: (spec, reason) pairs already known (e.g. compile
    errors), recorded as they are and not measured. With `confirm`, the default and the fastest
    other are measured once more and keep their better time (the default went first, perhaps
    before the clocks settled). The fastest replaces the default only when it is faster by more
    than `margin` (a fraction), so noise does not flip choices. verify(spec, default), where
    given, must return for a would-be winner (it raises when spec's output disagrees with the
    default's); one that fails is recorded and the next fastest is weighed instead, so a wrong
    kernel is never chosen for its speed. Raises TuneError when the default itself cannot be
    measured."""
    sel = Selection(default, math.inf, default, math.inf, failures=list(failures))
    seen = {spec for spec, _ in sel.failures}
    for spec in [default] + [c for c in candidates if c != default]:
        if spec in seen and spec != default:
            continue
        seen.add(spec)
        try:
            us = _time(measure, spec)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            if spec == default:
                raise TuneError(f"the planner's choice {getattr(spec, 'name', spec)} could not be "
                                f"measured ({why})") from exc
            sel.failures.append((spec, why))
            log.info("jitmarlin: tune: %s failed (%s)", getattr(spec, "name", spec), why)
            continue
        sel.timings.append((spec, us))
        if spec == default:
            sel.default_us = sel.winner_us = us
    confirmed_default = False
    while True:
        best, best_us = min(sel.timings, key=lambda t: t[1])
        if best == default:
            return sel
        if confirm:
            if not confirmed_default:
                confirmed_default = True
                with contextlib.suppress(Exception):      # (its first time stands)
                    sel.default_us = sel.winner_us = min(sel.default_us, _time(measure, default))
            try:
                best_us = min(best_us, _time(measure, best))
            except Exception as exc:                  # flaky: not a winner
                sel.failures.append((best, f"failed when measured again: {type(exc).__name__}: {exc}"))
                sel.timings = [t for t in sel.timings if t[0] != best]
                return sel
        if best_us >= sel.default_us * (1.0 - margin):
            return sel
        if verify is not None:
            try:
                verify(best, default)
            except Exception as exc:                  # wrong output: never a winner
                sel.failures.append((best, f"output check failed: {type(exc).__name__}: {exc}"))
                sel.timings = [t for t in sel.timings if t[0] != best]
                log.warning("jitmarlin: tune: %s rejected (%s)", getattr(best, "name", best), exc)
                continue
        sel.winner, sel.winner_us = best, best_us
        return sel


def tune(profile: DeviceProfile, arch: str, p: Problem, measure: Callable[[object], float], *,
         candidates: Iterable | None = None, margin: float = MARGIN,
         precompile: Callable[[list], dict] | None = None,
         verify: Callable[[object, object], object] | None = None) -> TunedChoice:
    """Tune problem `p`'s bucket on `profile` (compiled for `arch`): the planner's default and its
    candidate_specs() (or `candidates`), each timed with `measure` at M = the bucket.
    precompile(specs) -> {spec: reason} compiles them up front (in parallel) and names the ones
    that fail; verify(spec, default) checks a would-be winner's output (see select()). Returns
    the TunedChoice (not stored: see store())."""
    bp = bucket_problem(p)
    default = planner.plan(profile, bp).spec
    cands = list(planner.candidate_specs(profile, bp) if candidates is None else candidates)
    failed = dict(precompile([default] + [c for c in cands if c != default])) if precompile else {}
    known = [(s, why) for s, why in failed.items() if s != default]
    sel = select(default, cands, measure, margin=margin, failures=known, verify=verify)
    return choice_from(profile, arch, bp, sel)


def choice_from(profile: DeviceProfile, arch: str, bp: Problem, sel: Selection) -> TunedChoice:
    """The record of selection `sel` (its default is the planner's) for bucket problem `bp`."""
    return TunedChoice(
        gpu=profile.name, arch=arch, qtype=bp.qtype, act=bp.act, group_size=bp.group_size,
        n=bp.n, k=bp.k, m_bucket=bp.m, spec=sel.winner.canonical(), kind=spec_kind(sel.winner),
        us=sel.winner_us, default_spec=sel.default.canonical(), default_kind=spec_kind(sel.default),
        default_us=sel.default_us, candidates=sel.tried, failed=len(sel.failures),
        jitmarlin=__version__, templates=templates_tag(), created=time.time())


def store(cache: KernelCache, choice: TunedChoice) -> bool:
    """Persist `choice` (replacing an earlier one for the same key); False if not writable."""
    return cache.put_tuned(choice.key, choice.to_dict())


def lookup(cache: KernelCache, gpu: str, arch: str, p: Problem) -> TunedChoice | None:
    """The current tuned choice for `p`'s bucket on GPU `gpu` / `arch`, or None (absent, or a bad
    record: warned and ignored)."""
    key = tune_key(gpu, arch, p)
    d = cache.get_tuned(key)
    if d is None:
        return None
    why = record_problem(key, d)
    if why:
        log.warning("jitmarlin: tuned choice %s is bad (%s); ignoring it", key, why)
        return None
    return TunedChoice.from_dict(d)


_failed: set = set()   # keys whose tuning failed in this process: not retried at every call


def choose_for(profile: DeviceProfile, arch: str, p: Problem, cache: KernelCache, *,
               device: int = 0, capturing: bool = False, autotune: bool | None = None,
               tuner: Callable[[DeviceProfile, str, Problem], TunedChoice] | None = None):
    """The spec api._prepare should use for problem `p`, or None for the planner's default.

    A stored choice for (profile.name, arch, bucket of p) is used when its winner is not the
    default and planner.plan() accepts it for the exact problem (a wgmma winner built for p's
    short last row block, planner.tail_spec, where p has one). With none stored, and
    `autotune` (default: JITMARLIN_AUTOTUNE=1) outside CUDA-graph capture, the bucket is tuned
    now by tuner(profile, arch, p) (default: jitmarlin.service.measure on GPU `device`), under a
    per-key lock, and stored. A failed tuning is logged and not retried in this process.
    During capture a stored choice is used only when its kernel is already compiled."""
    choice = lookup(cache, profile.name, arch, p)
    if choice is None and not capturing and (autotune_enabled() if autotune is None else autotune):
        choice = _tune_now(profile, arch, p, cache, device, tuner)
    if choice is None or not choice.improved:
        return None
    try:
        # tuned at the bucket's M: built for this M's short last row block where it has one
        spec = planner.tail_spec(p, choice.winner())
        planner.plan(profile, p, spec)
    except (JitMarlinError, ValueError) as exc:
        log.warning("jitmarlin: tuned choice %s does not fit M=%d (%s); using the planner's",
                    choice.key, p.m, exc)
        return None
    if capturing and cache.get(spec, arch, compile_missing=False)[0] is None:
        return None    # (stored after warm-up, not compiled: nothing may compile during capture)
    return spec


def _tune_now(profile, arch, p, cache, device, tuner) -> TunedChoice | None:
    key = tune_key(profile.name, arch, p)
    if key in _failed:
        return None
    planner.check_problem(profile, p)       # a bad problem fails with its own clear error
    if tuner is None:
        from jitmarlin.service.measure import gpu_tuner

        tuner = gpu_tuner(device)
    with cache.tune_lock(key):
        choice = lookup(cache, profile.name, arch, p)    # another process may have tuned it
        if choice is not None:
            return choice
        bp = bucket_problem(p)
        log.info("jitmarlin: autotune %s %s g%d N=%d K=%d M<=%d on %s", p.qtype, p.act,
                 p.group_size, p.n, p.k, bp.m, profile.name)
        try:
            choice = tuner(profile, arch, bp)
        except Exception as exc:
            _failed.add(key)
            log.warning("jitmarlin: autotune of %s failed (%s: %s); using the planner's choice",
                        key, type(exc).__name__, exc)
            return None
        log.info("jitmarlin: tuned %s: %s %.1f us, default %.1f us (%d candidates, %d failed)",
                 key, describe_spec(choice.spec, choice.kind), choice.us, choice.default_us,
                 choice.candidates, choice.failed)
        store(cache, choice)
    return choice


def describe_spec(text: str, kind: str) -> str:
    """A spec's readable name from its stored text (the text itself if it does not parse)."""
    try:
        return spec_from_canonical(text, kind).name
    except (ValueError, AttributeError):
        return text
