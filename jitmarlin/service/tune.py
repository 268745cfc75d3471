"""The autotuner: time the planner's candidate specs for a problem on the real GPU, keep the
fastest, and remember it in the kernel store per GPU model and shape bucket.

It sits in the service layer, not inside the planner: the planner stays pure and proposes (plan()
for its default, candidate_specs() for the search space); this module measures, decides and
stores. The record format, the keys and choose_for() (what linear() asks before planning) are the
pure part, jitmarlin.kernels.tuned (re-exported here); jitmarlin.service.autotune registers the
autotuner (this module's tune() on GPU measurements) there for JITMARLIN_AUTOTUNE=1. Everything
here is pure except the injected `measure(spec) -> microseconds` and `tuner` callables
(jitmarlin.service.measure has the GPU ones), so the decisions are tested on the CPU.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from jitmarlin._version import __version__
from jitmarlin.errors import TuneError
from jitmarlin.jit.cache import KernelCache
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels import planner
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import spec_kind
from jitmarlin.kernels.tuned import (  # noqa: F401  (the pure part, re-exported)
    MARGIN,
    MAX_BUCKET,
    RECORD_FORMAT,
    TUNE_PREFIX,
    TUNED_MEMBER,
    TunedChoice,
    bucket_problem,
    canonical_json,
    choose_for,
    describe_spec,
    lookup,
    record_problem,
    shape_bucket,
    templates_tag,
    tune_key,
)

log = logging.getLogger("jitmarlin")


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


def select(
    default,
    candidates: Iterable,
    measure: Callable[[object], float],
    *,
    margin: float = MARGIN,
    failures: Iterable = (),
    confirm: bool = True,
    verify: Callable[[object, object], object] | None = None,
) -> Selection:
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
                raise TuneError(
                    f"the planner's choice {getattr(spec, 'name', spec)} could not be measured ({why})"
                ) from exc
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
                with contextlib.suppress(Exception):  # (its first time stands)
                    sel.default_us = sel.winner_us = min(sel.default_us, _time(measure, default))
            try:
                best_us = min(best_us, _time(measure, best))
            except Exception as exc:  # flaky: not a winner
                sel.failures.append((best, f"failed when measured again: {type(exc).__name__}: {exc}"))
                sel.timings = [t for t in sel.timings if t[0] != best]
                return sel
        if best_us >= sel.default_us * (1.0 - margin):
            return sel
        if verify is not None:
            try:
                verify(best, default)
            except Exception as exc:  # wrong output: never a winner
                sel.failures.append((best, f"output check failed: {type(exc).__name__}: {exc}"))
                sel.timings = [t for t in sel.timings if t[0] != best]
                log.warning("jitmarlin: tune: %s rejected (%s)", getattr(best, "name", best), exc)
                continue
        sel.winner, sel.winner_us = best, best_us
        return sel


def tune(
    profile: DeviceProfile,
    arch: str,
    p: Problem,
    measure: Callable[[object], float],
    *,
    candidates: Iterable | None = None,
    margin: float = MARGIN,
    precompile: Callable[[list], dict] | None = None,
    verify: Callable[[object, object], object] | None = None,
) -> TunedChoice:
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
        gpu=profile.name,
        arch=arch,
        qtype=bp.qtype,
        act=bp.act,
        group_size=bp.group_size,
        n=bp.n,
        k=bp.k,
        m_bucket=bp.m,
        spec=sel.winner.canonical(),
        kind=spec_kind(sel.winner),
        us=sel.winner_us,
        default_spec=sel.default.canonical(),
        default_kind=spec_kind(sel.default),
        default_us=sel.default_us,
        candidates=sel.tried,
        failed=len(sel.failures),
        jitmarlin=__version__,
        templates=templates_tag(),
        created=time.time(),
    )


def store(cache: KernelCache, choice: TunedChoice) -> bool:
    """Persist `choice` (replacing an earlier one for the same key); False if not writable."""
    return cache.put_record(choice.key, choice.to_dict())
