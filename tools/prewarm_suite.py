#!/usr/bin/env python3
"""Prewarm a kernel cache with every kernel the GPU test suite and tools/bench will request on
a given profile. Run it with the same NVRTC version as the GPU machine (the version is part of
the cache key) and carry the cache there: the GPU session then compiles nothing.

    JITMARLIN_CACHE_DIR=.jmcache python tools/prewarm_suite.py --profile h100 [--emulate t4,v100] [--jobs N]

A MoE kit (the MoE GPU tests, the bench's plans of three models, with and without the planner
switches that wait for a GPU test):

    JITMARLIN_CACHE_DIR=/tmp/kit python tools/prewarm_suite.py --moe-only --moe-switches \
        --moe-bench 1,16,256,1024,4096 --moe-models qwen3-30b-a3b,mixtral-8x7b,gpt-oss-20b --jobs 2
"""

import argparse
import os
import sys
import time
from dataclasses import replace

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from jitmarlin.errors import JitMarlinError  # noqa: E402
from jitmarlin.jit import nvrtc  # noqa: E402
from jitmarlin.jit.cache import default_cache  # noqa: E402
from jitmarlin.jit.profiles import get_profile  # noqa: E402
from jitmarlin.ops.linear import plan_for  # noqa: E402


def problems():
    from gpu_cases import cases

    for c in cases():
        yield c.m, c.n, c.k, c.act, c.group, "uint4b8"
    # tests/test_api.py: every quant type (1088 x 1536), padded shapes, act-order
    from test_api import TYPE_CASES

    for qt, g, act in TYPE_CASES:
        for m in (1, 33, 300):
            yield m, 1088, 1536, act, g, qt
    for m in (3, 70):
        yield m, 256, 192, "float16", -1, "uint4b8"
        yield m, 128, 256, "float16", 32, "uint4"
    for m in (1, 40):
        yield m, 512, 1024, "float16", 128, "uint4b8"
    extra = [
        (2, 256, 4096, "float16", 128),
        (16, 6144, 4096, "float16", 128),
        (7, 4096, 4096, "bfloat16", 128),
        (7, 4096, 4096, "float16", 128),
        (3, 256, 128, "float16", 64),
        (4, 256, 128, "float16", 64),
        (33, 4096, 4096, "float16", -1),
        (33, 4096, 4096, "float16", 128),
    ]
    for e in extra:
        yield e + ("uint4b8",)


def bench_problems(qtypes=("uint4b8",), ms=(1, 16, 64, 256, 1024, 4096)):
    """tools/bench's problems for `qtypes` (each with its bench group: the format's own for nvfp4 /
    mxfp4, else 128) at `ms`, both dtypes."""
    from jitmarlin.weights.qtypes import get_qtype

    bench = [
        (4096, 6144),
        (4096, 4096),
        (4096, 28672),
        (14336, 4096),
        (8192, 10240),
        (8192, 8192),
        (8192, 57344),
        (28672, 8192),
        (512, 512),
    ]
    for qt in qtypes:
        g = get_qtype(qt).fixed_group or 128
        for k, n in bench:
            for m in ms:
                for act in ("float16", "bfloat16"):
                    yield m, n, k, act, g, qt


def cluster_specs():
    """Cluster kernels tests/test_api.py forces on an sm_90 GPU."""
    from test_api import CLUSTER_CASES, cluster_case_spec

    for case in CLUSTER_CASES:
        yield cluster_case_spec(case)


def wgmma_specs():
    """Kernels tests/test_wgmma.py forces on an sm_90 GPU, and every wgmma candidate of the sweep."""
    from test_wgmma import GROUP_OF, OCC2_TILES, TILES

    from jitmarlin.kernels.planner import ALL_QTYPES, candidate_specs, group_blocks
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.kernels.spec import KernelSpec

    for tm, tn in TILES:
        for st in (2, 4):
            for g in (-1, 64):
                for act in ("float16", "bfloat16"):
                    yield KernelSpec("sm90", "uint4b8", act, -1 if g < 0 else g // 16, tm, tn, 4, st)
    for tm, tn in OCC2_TILES:  # test_two_blocks_per_sm_match_reference
        yield KernelSpec("sm90", "uint4b8", "float16", 8, tm, tn, 4, 5, occupancy=2)
        yield KernelSpec("sm90", "uint4b8", "bfloat16", -1, tm, tn, 4, 5, occupancy=2)
    for qt in ALL_QTYPES:
        g = GROUP_OF.get(qt, 32)
        for act in ("float16", "bfloat16"):
            for tm, tn in ((8, 8), (8, 16), (16, 8)):
                yield KernelSpec("sm90", qt, act, group_blocks(Problem(64, 448, 1024, act, qt, g)), tm, tn, 4, 3)
    for act in ("float16", "bfloat16"):
        for s in candidate_specs(get_profile("h100"), Problem(4096, 8192, 8192, act, "uint4b8", 128)):
            if s.wgmma:
                yield s


def moe_specs(prof):
    """The MoE kernels tests/test_moe_gpu.py and the MoE probes plan on `prof`."""
    from test_moe_gpu import DIRECT, QTYPES, SHAPES

    from jitmarlin.kernels.moe import MoEProblem, plan_moe
    from jitmarlin.weights.qtypes import kernel_dims

    def problem(t, k, e, hidden, inter, act, qt, g, activation="silu"):
        n13, k13 = kernel_dims(2 * inter, hidden, g)
        n2, k2 = kernel_dims(hidden, inter, g)
        return MoEProblem(t, k, e, n13, k13, n2, k2, inter, hidden, act, qt, g, activation)

    probs = []
    for qt, g in QTYPES:
        for act in ("float16", "bfloat16"):
            probs += [problem(t, k, e, 256, 128, act, qt, g) for e, k, t in SHAPES]
    for activation in ("silu", "gelu", "swigluoai"):
        probs.append(problem(64, 4, 8, 256, 128, "float16", "mxfp4", 32, activation))
    probs += [
        problem(1000, 2, 64, 256, 128, "float16", "uint4b8", 128),
        problem(300, 6, 32, 256, 128, "float16", "uint4b8", 128),
        problem(16, 4, 32, 256, 128, "float16", "uint4b8", 128),
        problem(8, 2, 16, 256, 128, "float16", "uint4b8", 128),
    ]
    for t in (1, 4, 16, 64, 256, 1024):  # tools/probe/moe_time.py, tools/bench --moe
        for act in ("float16", "bfloat16"):
            probs.append(problem(t, 2, 8, 4096, 14336, act, "uint4b8", 128))
            probs.append(problem(t, 8, 128, 2048, 768, act, "uint4b8", 128))
            probs.append(problem(t, 4, 32, 2880, 2880, act, "mxfp4", 32, "swigluoai"))
    probs += [problem(t, 2, 8, 512, 2048, "float16", "uint4b8", 128) for t in (1, 5)]  # forced K splits
    probs += [problem(1, k, e, 256, 128, act, qt, g) for e, k, qt, g, act, _, _ in DIRECT]  # direct at T = 1
    probs.append(problem(1, 4, 32, 256, 128, "float16", "uint4b8", 128))  # the direct graph replay
    probs.append(problem(5, 2, 8, 256, 128, "float16", "mxfp4", 32))  # the pdl plans (sorted at T = 5)
    for p in probs:
        try:
            plan = plan_moe(prof, p)
        except JitMarlinError:
            continue
        yield from (plan.route, plan.up, plan.down)
        if plan.gemv:  # the GPU tests force the mma.sync kind at decode too
            other = plan_moe(prof, p, gemv=False)
            yield from (other.route, other.up, other.down)
        if plan.gemv and p.tokens == 1:  # and the other mode at T = 1 (direct and sorted)
            other = plan_moe(prof, p, direct=not plan.direct)
            yield from (other.up, other.down)
        if plan.gemv and prof.cc >= (9, 0):  # and the pdl GEMV plans (test_moe_gpu.py -k pdl)
            pdl = plan_moe(prof, p, pdl=True)
            yield from (pdl.route, pdl.up, pdl.down)
    if prof.path == "sm80":  # the GEMV kind in 16-row blocks (test_moe_gpu.py -k sixteen)
        from jitmarlin.kernels.moe.plan import gemv_rows16

        for qt, g in QTYPES:
            for t in (64, 100):
                g16 = plan_moe(prof, problem(t, 2, 8, 256, 128, "float16", qt, g), gemv=True)
                plan = plan_moe(prof, g16.problem, up=gemv_rows16(g16.up), down=gemv_rows16(g16.down))
                yield from (plan.route, plan.up, plan.down)


class _RecordMoEWgmma:
    """pytest plugin: tests/test_moe_wgmma.py's GPU tests run on the CPU as planning only: the
    module's `_run` records the plan's kernels instead of launching them, on an H100 profile."""

    def __init__(self):
        self.specs = []

    def _run(self, rng, seed, w13, w2, ids, tw, act, *, plan=None, activation="silu", **_):
        from jitmarlin.kernels.moe import tuned as moe_tuned
        from jitmarlin.ops.moe import moe_problem

        if plan is None:  # as the op's runner plans it
            p = moe_problem(w13, w2, act, ids.shape[0], ids.shape[1], activation)
            plan = moe_tuned.plan_for(get_profile("h100"), "sm_90", p, default_cache())
        self.specs += [plan.route, plan.up, plan.down]
        return plan

    def pytest_collection_modifyitems(self, config, items):
        for item in items:  # (tests/conftest.py skips GPU tests where there is none)
            item.own_markers = [m for m in item.own_markers if m.name != "skip"]
            if getattr(item, "module", None) is not None and hasattr(item.module, "_run"):
                item.module._run = self._run


def moe_wgmma_test_specs():
    """The kernels tests/test_moe_wgmma.py's GPU tests launch on an H100 (tests whose checks need
    outputs fail here after their plans are recorded: that is expected)."""
    import pytest

    from jitmarlin.jit import profiles

    rec, real = _RecordMoEWgmma(), profiles.planning_profile
    profiles.planning_profile = lambda device=0: get_profile("h100")
    try:
        pytest.main(["-q", "-p", "no:cacheprovider", "-m", "gpu", os.path.join(ROOT, "tests", "test_moe_wgmma.py")],
                    plugins=[rec])  # fmt: skip
    finally:
        profiles.planning_profile = real
    return rec.specs


def _bench_moe_problems(tokens, acts, models=None):
    """The MoEProblems of tools/bench --moe's models (default: all) at `tokens` and `acts`."""
    import benchmoe

    from jitmarlin.kernels.moe import MoEProblem
    from jitmarlin.weights.qtypes import kernel_dims

    for name, (e, k, hidden, inter, qt, g, activation) in benchmoe.MODELS.items():
        if models and name not in models:
            continue
        n13, k13 = kernel_dims(2 * inter, hidden, g)
        n2, k2 = kernel_dims(hidden, inter, g)
        for t in tokens:
            for act in acts:
                yield MoEProblem(t, k, e, n13, k13, n2, k2, inter, hidden, act, qt, g, activation)


def moe_bench_specs(prof, tokens, models=None):
    """The planner's kernels of tools/bench --moe for `models` (default: all) at `tokens`, fp16
    and bf16."""
    from jitmarlin.kernels.moe import plan_moe

    for p in _bench_moe_problems(tokens, ("float16", "bfloat16"), models):
        try:
            plan = plan_moe(prof, p)
        except JitMarlinError:
            continue
        yield from (plan.route, plan.up, plan.down)


def moe_sweep_specs(prof, tokens=(1, 16, 256), models=None):
    """Every kernel tools/bench --moe --sweep times (fp16) for `models` (default: all) at `tokens`."""
    import benchmoe

    from jitmarlin.kernels.moe import plan_moe

    for p in _bench_moe_problems(tokens, ("float16",), models):
        try:
            base = plan_moe(prof, p)
        except JitMarlinError:
            continue
        yield from (base.route, base.up, base.down)
        for _, _, kw in benchmoe.sweep_trials(prof, p, base):
            try:
                plan = plan_moe(prof, p, **kw)
            except (JitMarlinError, ValueError):
                continue
            yield from (plan.route, plan.up, plan.down)


def _compile(job):
    spec, arch = job
    return default_cache().get(spec, arch)[2] == "compiled"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h100")
    ap.add_argument("--emulate", default="", help="also plan as these profiles (JITMARLIN_EMULATE runs)")
    ap.add_argument("--arch", default=None, help="compile arch (default: the profile's)")
    ap.add_argument("--sweep", action="store_true", help="also every candidate spec for the bench shapes (tools/sweep)")
    ap.add_argument("--jobs", type=int, default=1, help="compile in this many processes")
    ap.add_argument(
        "--moe-sweep",
        default="",
        metavar="T,...",
        help="also every candidate tools/bench --moe --sweep times at these T (all models, or --moe-models)",
    )
    ap.add_argument("--moe-models", default="", help="comma-separated tools/bench --moe model names")
    ap.add_argument(
        "--moe-bench", default="", metavar="T,...", help="also the planner's tools/bench --moe kernels at these T"
    )
    ap.add_argument("--moe-only", action="store_true", help="MoE kernels only (no dense test or bench problems)")
    ap.add_argument(
        "--moe-switches",
        action="store_true",
        help="MoE plans also with the planner switches that wait for a GPU test turned on "
        "(kernels.moe.wgmma.SORTED_LAYOUTS, kernels.moe.plan.AUTO_PDL)",
    )
    ap.add_argument(
        "--bench-quant",
        default="",
        metavar="TYPES[:M,...]",
        help="also tools/bench --quant's problems of these types (comma-separated), at these M (default 1,16,64)",
    )
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    live = get_profile(args.profile)
    arch = args.arch or live.arch
    cache = default_cache()
    profiles = [live] + [
        replace(
            get_profile(e),
            sms=min(get_profile(e).sms, live.sms),
            smem_per_block=min(get_profile(e).smem_per_block, live.smem_per_block),
        )
        for e in args.emulate.split(",")
        if e
    ]
    seen, t0 = [], time.time()

    def add(spec):
        if spec not in seen:
            seen.append(spec)

    for i, prof in enumerate(profiles):
        if args.moe_only:
            break
        probs = list(problems()) + (list(bench_problems()) if i == 0 else [])
        if args.bench_quant and i == 0:
            types, _, ms = args.bench_quant.partition(":")
            ms = tuple(int(m) for m in (ms or "1,16,64").split(","))
            probs += list(bench_problems(tuple(t for t in types.split(",") if t), ms))
        for m, n, k, act, g, qt in probs:
            try:
                add(plan_for(prof, m, n, k, act, qt, g).spec)
            except JitMarlinError:
                continue
    from jitmarlin.kernels.moe import plan as moe_plan
    from jitmarlin.kernels.moe import wgmma as moe_wgmma

    models = [m for m in args.moe_models.split(",") if m]
    for switches in (False, True) if args.moe_switches else (None,):
        if switches is not None:
            moe_wgmma.SORTED_LAYOUTS = moe_plan.AUTO_PDL = switches
        for prof in profiles:
            for spec in moe_specs(prof):
                add(spec)
        if args.moe_sweep:
            for spec in moe_sweep_specs(live, [int(t) for t in args.moe_sweep.split(",")], models):
                add(spec)
        if args.moe_bench:
            for spec in moe_bench_specs(live, [int(t) for t in args.moe_bench.split(",")], models):
                add(spec)
        if live.cc == (9, 0):
            for spec in moe_wgmma_test_specs():
                add(spec)
    if live.cc == (9, 0) and not args.moe_only:
        for spec in list(wgmma_specs()) + list(cluster_specs()):
            add(spec)
    if args.sweep:
        from jitmarlin.kernels import planner
        from jitmarlin.kernels.problem import Problem

        for m in (1, 16, 64):
            for act in ("float16",):
                for spec in planner.candidate_specs(live, Problem(m, 4096, 4096, act, "uint4b8", 128)):
                    add(spec)
    jobs = [(spec, arch) for spec in seen]
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            n_new = sum(pool.imap_unordered(_compile, jobs))
    else:
        n_new = sum(map(_compile, jobs))
    print(
        f"{len(seen)} kernels for {arch} ({n_new} compiled) with NVRTC {nvrtc.version()} "
        f"in {time.time() - t0:.0f} s -> {cache.directory}"
    )


if __name__ == "__main__":
    main()
