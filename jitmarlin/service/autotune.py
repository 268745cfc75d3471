"""JITMARLIN_AUTOTUNE=1: tune a problem bucket on the GPU at its first call when no tuned choice
is stored. Registered into jitmarlin.kernels.tuned (set_autotuner) when the service layer is
imported, so that ops (linear) reach the GPU measurements (jitmarlin.service.measure) without
importing the service layer: choose_for() calls _tune_now through the hook."""

from __future__ import annotations

import logging

from jitmarlin.kernels import planner, tuned
from jitmarlin.kernels.tuned import TunedChoice, bucket_problem, describe_spec, lookup, tune_key
from jitmarlin.service.measure import gpu_tuner
from jitmarlin.service.tune import store

log = logging.getLogger("jitmarlin")


_failed: set = set()  # keys whose tuning failed in this process: not retried at every call


def _tune_now(profile, arch, p, cache, device, tuner) -> TunedChoice | None:
    key = tune_key(profile.name, arch, p)
    if key in _failed:
        return None
    planner.check_problem(profile, p)  # a bad problem fails with its own clear error
    if tuner is None:
        tuner = gpu_tuner(device)
    with cache.record_lock(key):
        choice = lookup(cache, profile.name, arch, p)  # another process may have tuned it
        if choice is not None:
            return choice
        bp = bucket_problem(p)
        log.info(
            "jitmarlin: autotune %s %s g%d N=%d K=%d M<=%d on %s",
            p.qtype,
            p.act,
            p.group_size,
            p.n,
            p.k,
            bp.m,
            profile.name,
        )
        try:
            choice = tuner(profile, arch, bp)
        except Exception as exc:
            _failed.add(key)
            log.warning(
                "jitmarlin: autotune of %s failed (%s: %s); using the planner's choice", key, type(exc).__name__, exc
            )
            return None
        log.info(
            "jitmarlin: tuned %s: %s %.1f us, default %.1f us (%d candidates, %d failed)",
            key,
            describe_spec(choice.spec, choice.kind),
            choice.us,
            choice.default_us,
            choice.candidates,
            choice.failed,
        )
        store(cache, choice)
    return choice


tuned.set_autotuner(_tune_now)
