"""The `jitmarlin` command (also `python -m jitmarlin`): info, inspect, prewarm, tune, cache, bench."""

from __future__ import annotations

import argparse
import json
import os
import sys

from jitmarlin._version import __version__
from jitmarlin.service import cli_moe
from jitmarlin.service.cli_args import HelpFormatter, arch_notes, group_size, jobs, positive_int, run_main
from jitmarlin.service.cli_cache import cmd_cache


def _gpus():
    """[(index, name, cc)] of visible GPUs, or [] (never raises)."""
    try:
        from cupy.cuda import runtime

        out = []
        for i in range(runtime.getDeviceCount()):
            p = runtime.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            out.append((i, name, f"{p['major']}.{p['minor']}"))
        return out
    except Exception:
        return []


def cmd_info(args) -> int:
    from jitmarlin.jit import nvrtc
    from jitmarlin.jit.cache import default_cache
    from jitmarlin.jit.profiles import emulated_name
    from jitmarlin.kernels.render import templates_digest, templates_dir

    info = {"jitmarlin": __version__}
    try:
        info["nvrtc"] = ".".join(map(str, nvrtc.version()))
        info["nvrtc_archs"] = list(nvrtc.supported_archs())
        info["arch_profiles"] = arch_notes()  # plannable (its profile) or compile-only
    except Exception as e:
        info["nvrtc"] = f"unavailable ({e})"
    for mod in ("cuda.bindings", "cupy", "numpy", "jinja2", "diskcache", "torch"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            info[mod] = getattr(m, "__version__", "?")
        except Exception:
            info[mod] = None
    try:
        from cupy.cuda import runtime

        info["driver"] = runtime.driverGetVersion()
    except Exception:
        info["driver"] = None
    info["gpus"] = [{"index": i, "name": n, "cc": cc} for i, n, cc in _gpus()]
    cache = default_cache()
    info["cache_dir"] = str(cache.directory)
    try:
        state, problem = cache.health()
        info["cache_state"] = state if problem is None else f"{state}: {problem}"
        if state in ("ok", "read-only"):  # a refused or corrupt store has no entries to count
            st = cache.stats()
            info["cache_entries"] = st["entries"]
            info["cache_mb"] = round(st["bytes"] / 2**20, 1)
    except Exception as e:  # an unusable cache dir must not break `info`
        info["cache_state"] = f"unavailable ({e})"
    info["templates"] = str(templates_dir())
    info["templates_sha256"] = templates_digest()[:16]
    info["emulate"] = emulated_name()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    w = max(len(k) for k in info)
    for k, v in info.items():
        if k == "arch_profiles":
            continue
        if k == "nvrtc_archs":
            v = ", ".join(f"{a} ({info['arch_profiles'].get(a, '?')})" for a in v)
        if isinstance(v, list):
            v = (
                ", ".join(
                    str(x if not isinstance(x, dict) else f"[{x['index']}] {x['name']} (cc {x['cc']})") for x in v
                )
                or "none"
            )
        print(f"{k:<{w}}  {v}")
    return 0


def _profile_from(args):
    from jitmarlin.errors import InputError
    from jitmarlin.jit.profiles import get_profile

    prof = get_profile(args.profile or args.arch)
    if args.profile and args.arch and args.arch.strip().lower() != prof.arch:
        raise InputError(
            f"--profile {args.profile} is {prof.arch}, not --arch {args.arch}: give one "
            "of them (or both naming the same arch)"
        )
    return prof


def cmd_inspect(args) -> int:
    from jitmarlin.jit.cache import default_cache
    from jitmarlin.kernels.render import render
    from jitmarlin.ops.linear import plan_for

    prof = _profile_from(args)
    if args.moe:  # a MoE layer's kernels (service/cli_moe.py)
        return cli_moe.inspect(args, prof)
    plan = plan_for(prof, args.m, args.n, args.k, args.act, args.quant, args.group)
    if args.pdl and plan.route == "fused":  # the variant linear(enable_pdl=True) runs on sm_90+
        from dataclasses import replace

        from jitmarlin.kernels.planner import plan as make_plan

        plan = make_plan(prof, plan.problem, replace(plan.spec, pdl=True))
    spec = plan.spec
    if args.source:
        print(render(spec), end="")
        return 0
    art, key, status = default_cache().get(spec, prof.arch)
    if args.ptx:
        print(art.ptx, end="")
        return 0
    if args.sass:
        from jitmarlin.jit.nvrtc import disassemble

        print(disassemble(art.cubin), end="")
        return 0
    res = dict(art.resources)
    res["dynamic_shared_bytes"] = plan.smem_bytes
    res["shared_bytes"] = plan.smem_bytes + (res.get("static_shared_bytes") or 0)
    res["local_bytes"] = res.get("stack_bytes")
    regs = res.get("registers") or 0
    blocks_regs = prof.regs_per_sm // max(1, regs * spec.threads) if regs else 0
    blocks_smem = prof.smem_per_sm // max(1, res["shared_bytes"] + 1024)
    blocks = min(blocks_regs, blocks_smem, prof.max_threads_per_sm // spec.threads)
    res["blocks_per_sm"] = blocks
    res["occupancy"] = round(blocks * spec.threads / prof.max_threads_per_sm, 3)
    report = {
        "kernel": spec.name,
        "route": plan.route,
        "spec": json.loads(spec.canonical()),
        "profile": prof.name,
        "arch": prof.arch,
        "grid": plan.grid,
        "iters": plan.iters,
        "whole_tiles": plan.whole,
        "cache": status,
        "cache_key": key[:16],
        "compile_seconds": round(art.seconds, 3),
        **res,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k:<20} {v}")
    return 0


def _parse_shapes(text: str):
    """'4096x4096,4096x14336' -> [(K, N), ...]: K = in_features, N = out_features (per rank)."""
    from jitmarlin.errors import InputError

    shapes = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        k, _, n = part.partition("x")
        try:
            kn = (int(k), int(n))
        except ValueError:
            raise InputError(f"--shapes takes KxN pairs such as 4096x14336, got {part!r}") from None
        if min(kn) < 1:
            raise InputError(f"--shapes: K and N must be positive integers, got {part!r}")
        shapes.append(kn)
    if not shapes:
        raise InputError("--shapes is empty")
    return shapes


def _csv(text, conv=str, flag=""):
    """'a,b,c' -> [conv(a), conv(b), conv(c)] (blanks dropped)."""
    from jitmarlin.errors import InputError

    try:
        return [conv(x.strip()) for x in (text or "").split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} takes a comma list of integers, got {text!r}") from None


def _selected_shapes(args):
    """(shapes, skipped) from --shapes, --model and --manifest (split per --tp): prewarm's and
    tune's shape selection. shapes: (K, N) pairs or fleet.Shape; skipped: fleet.Skipped."""
    from jitmarlin.errors import InputError
    from jitmarlin.service import fleet

    tp = _csv(args.tp, int, "--tp") or None
    shapes, skipped = [], []
    if args.shapes:
        if tp and not (args.model or args.manifest):
            raise InputError("--tp splits manifest layers; --shapes are already per-rank KxN")
        shapes += _parse_shapes(args.shapes)
    for ref in _csv(args.model) + ([args.manifest] if args.manifest else []):
        s, sk = fleet.expand_shapes(fleet.load_manifest(ref), tp)
        shapes += s
        skipped += sk
    return shapes, skipped


def cmd_prewarm(args) -> int:
    """Plan and compile every kernel the named GPUs need for the given models or shapes."""
    from jitmarlin.jit.cache import KernelCache, default_cache
    from jitmarlin.service import fleet

    if args.list_models:
        print(fleet.describe_models())
        return 0
    csv = _csv
    names = csv(args.profile) + csv(args.arch)
    if not names:
        print("prewarm: give --arch and/or --profile (comma lists)", file=sys.stderr)
        return 2
    if not (args.model or args.manifest or args.shapes):
        print("prewarm: give --model, --manifest or --shapes (see --list-models)", file=sys.stderr)
        return 2
    shapes, skipped = _selected_shapes(args)
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    cache = KernelCache(args.cache_dir) if args.cache_dir else default_cache()
    if not cache.writable:  # compiling kernels nobody can keep would only waste the time
        print(
            f"jitmarlin: error: prewarm cannot save any kernel: {_unwritable(cache)}; set "
            "--cache-dir or JITMARLIN_CACHE_DIR to a directory this user can write",
            file=sys.stderr,
        )
        return 1
    bar = fleet.TextProgress(sys.stderr)
    try:
        report = fleet.prewarm_fleet(
            names,
            shapes,
            csv(args.m, int, "--m"),
            csv(args.act),
            csv(args.quant),
            csv(args.group, int, "--group"),
            jobs=jobs,
            cache=cache,
            progress=bar,
            pdl=args.pdl,
        )
    except KeyboardInterrupt:
        print("\nprewarm: interrupted (kernels compiled so far are cached)", file=sys.stderr)
        return 130
    report.skipped[:0] = skipped  # TP splits that were skipped before planning
    bar.finish(report)
    print(fleet.format_report(report, cache.directory))
    if not report.results:
        why = (
            "every shape was skipped"
            if not report.unsupported
            else "every problem was skipped or is unsupported on these GPUs"
        )
        print(f"jitmarlin: error: prewarm compiled nothing: {why} (reasons above)", file=sys.stderr)
        return 1
    return 1 if report.failed else 0


def _unwritable(cache) -> str:
    """Why `cache`'s directory cannot be written (for prewarm's error)."""
    if cache.problem:
        return cache.problem
    try:
        os.makedirs(cache.directory, exist_ok=True)
    except OSError as e:
        return f"cannot create {cache.directory} ({e.strerror or e})"
    return f"{cache.directory} is not writable"


def cmd_tune(args) -> int:
    """Time the candidate kernels of every selected problem on the live GPU and store the
    fastest per GPU model and M bucket (see jitmarlin.service.tune)."""
    from jitmarlin.errors import JitMarlinError, TuneError
    from jitmarlin.jit.cache import default_cache
    from jitmarlin.jit.profiles import live_profile, planning_profile
    from jitmarlin.kernels import planner
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.service import fleet, measure, tune
    from jitmarlin.weights.qtypes import kernel_dims

    if args.moe:  # the MoE layers of MoE manifests (service/cli_moe.py)
        return cli_moe.tune(args, _csv, _gpus)
    if not (args.model or args.manifest or args.shapes):
        print("tune: give --model, --manifest or --shapes (see prewarm --list-models)", file=sys.stderr)
        return 2
    gpus = _gpus()
    if not gpus:
        print(
            "jitmarlin tune: no GPU is visible (CuPy sees none). Tuning times the kernels on "
            "the GPU it tunes for: run it on a GPU node (`jitmarlin cache export` then carries "
            "the choices to the others); `jitmarlin prewarm` compiles without a GPU.",
            file=sys.stderr,
        )
        return 1
    if not 0 <= args.device < len(gpus):
        print(f"jitmarlin tune: --device {args.device}: {len(gpus)} GPU(s) visible", file=sys.stderr)
        return 2
    if args.cache_dir:  # linear() must find the choices: tune into the cache it will read
        os.environ["JITMARLIN_CACHE_DIR"] = args.cache_dir
    shapes, skipped = _selected_shapes(args)
    ms, acts = _csv(args.m, int, "--m"), _csv(args.act)
    quants, groups = _csv(args.quant), _csv(args.group, int, "--group")
    fleet._check_choices(ms, acts, quants, groups)
    try:
        measure._torch()
    except TuneError as e:
        print(f"jitmarlin tune: {e}", file=sys.stderr)
        return 1

    dev = args.device
    profile, arch = planning_profile(dev), live_profile(dev).arch
    cache = default_cache()
    problems: dict[str, Problem] = {}  # one per tune key, in selection order

    for sh in map(fleet._as_shape, shapes):
        why = fleet.shape_problem(sh.k, sh.n)
        if why:
            skipped.append(fleet.Skipped(sh.label, sh.k, sh.n, why))
            continue
        for g in groups:
            n, k = kernel_dims(sh.n, sh.k, g)  # the padded dims linear() plans with
            for act in acts:
                for q in quants:
                    for m in ms:
                        p = Problem(tune.shape_bucket(m), n, k, act, q, g)
                        problems.setdefault(tune.tune_key(profile.name, arch, p), p)
    if not args.json:
        print(f"tuning on [{dev}] {profile.name} ({arch}); choices stored in {cache.directory}", flush=True)
        for sk in skipped:
            print(f"  skipped {sk.label}: {sk.reason}")
    rows, failed = [], 0
    for _key, p in problems.items():
        row = {"K": p.k, "N": p.n, "M_bucket": p.m, "quant": p.qtype, "act": p.act, "group": p.group_size}
        try:
            planner.check_problem(profile, p)
        except JitMarlinError as e:
            row.update(status="unsupported", reason=str(e))
        else:
            try:
                choice = None if args.force else tune.lookup(cache, profile.name, arch, p)
                row["status"] = "stored"
                if choice is None:
                    choice = measure.tune_on_gpu(p, dev, jobs=args.jobs or None)
                    tune.store(cache, choice)
                    row["status"] = "tuned"
            except Exception as e:  # one problem's failure (compile, CUDA) must not stop the rest
                failed += 1
                row.update(status="failed", reason=f"{type(e).__name__}: {e}")
            else:
                row.update(
                    default=tune.describe_spec(choice.default_spec, choice.default_kind),
                    default_us=round(choice.default_us, 2),
                    winner=tune.describe_spec(choice.spec, choice.kind),
                    winner_us=round(choice.us, 2),
                    speedup=round(choice.speedup, 3),
                    candidates=choice.candidates,
                    failed=choice.failed,
                )
        rows.append(row)
        if not args.json:
            print(_tune_line(row), flush=True)
    if args.json:
        print(
            json.dumps({"gpu": profile.name, "arch": arch, "cache_dir": str(cache.directory), "rows": rows}, indent=1)
        )
    elif failed:
        print(f"{failed} problem(s) failed to tune", file=sys.stderr)
    return 1 if failed else 0


def _tune_line(r: dict) -> str:
    head = f"  {r['K']:>6}x{r['N']:<6} M<={r['M_bucket']:<5} {r['quant']} {r['act']} g{r['group']}"
    if r["status"] in ("unsupported", "failed"):
        return f"{head}  {r['status']}: {r['reason']}"
    same = " (planner's choice kept)" if r["winner"] == r["default"] else ""
    return (
        f"{head}  default {r['default']} {r['default_us']:.1f} us  winner {r['winner']} "
        f"{r['winner_us']:.1f} us  x{r['speedup']:.2f}{same}  [{r['status']}, "
        f"{r['candidates']} candidates, {r['failed']} failed]"
    )


def cmd_bench(args) -> int:
    try:
        import cupy
        import torch
    except ImportError as e:
        print(f"jitmarlin bench needs torch and CuPy ({e}); tools/bench is the full benchmark", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("jitmarlin bench needs a CUDA GPU", file=sys.stderr)
        return 2
    from jitmarlin.service import bench

    shapes = _parse_shapes(args.shapes)
    ms = [int(m) for m in args.m.split(",")]
    bw, rows = bench.quick(shapes, ms, args.act, args.group)
    report = {"gpu": torch.cuda.get_device_name(), "copy_tbps": round(bw, 3), "rows": rows}
    if args.overhead:
        report["host_overhead_us"] = bench.host_overhead(torch, cupy)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{report['gpu']}: copy bandwidth {bw:.2f} TB/s (read + write); graph replay, weights past 4x L2")
    print(
        f"{'K x N':>13} {'M':>5} {'jitmarlin us':>13} {'floor us':>9} {'x floor':>8} "
        f"{'cuBLAS fp16 us':>15} {'x cuBLAS':>9}"
    )
    for r in rows:
        print(
            f"{r['K']:>6}x{r['N']:<6} {r['M']:>5} {r['jitmarlin_us']:>13.1f} {r['floor_us']:>9.1f} "
            f"{r['jitmarlin_us'] / r['floor_us']:>8.2f} {r['cublas_fp16_us']:>15.1f} "
            f"{r['jitmarlin_us'] / r['cublas_fp16_us']:>9.2f}"
        )
    if args.overhead:
        o = report["host_overhead_us"]
        print(
            f"host overhead per eager call: jitmarlin {o['jitmarlin_torch_us']:.1f} us (torch input), "
            f"{o['jitmarlin_cupy_us']:.1f} us (CuPy input); torch fp16 matmul {o['torch_matmul_fp16_us']:.1f} us"
        )
    return 0


def _shape_args(s, m_help: str) -> None:
    """The problem-selection options prewarm and tune share."""
    s.add_argument(
        "--model", default=None, help="manifest names, e.g. llama-3-8b,qwen2.5-7b (see prewarm --list-models)"
    )
    s.add_argument("--manifest", default=None, help="a manifest JSON file (format: cache/README.md)")
    s.add_argument(
        "--shapes",
        default=None,
        help="per-rank KxN list (K = in_features, N = "
        "out_features, positive multiples of 8), e.g. 4096x4096,4096x14336",
    )
    s.add_argument("--tp", default=None, help="tensor-parallel degrees, e.g. 1,2 (default: the manifest's)")
    s.add_argument(
        "--quant",
        default="uint4b8",
        help="quant types, comma list (uint4b8, uint4, uint8b128, uint8, float8_e4m3fn, nvfp4, mxfp4)",
    )
    s.add_argument("--group", default="128", help="group sizes, comma list (-1: per channel; nvfp4 takes 16, mxfp4 32)")
    s.add_argument("--act", default="float16", help="activation dtypes, comma list: float16,bfloat16")
    s.add_argument("--m", default="1,16,64", help=m_help)


class _Parser(argparse.ArgumentParser):
    """Every (sub)parser shows option defaults in --help (subparsers are made of the parent's
    class, so this reaches them all)."""

    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*a, **kw)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jitmarlin", description=f"jitmarlin {__version__}: runtime-JIT quantized GEMM kernels")
    p.add_argument("--version", action="version", version=f"jitmarlin {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)  # every subparser is a _Parser too

    s = sub.add_parser("info", help="versions, NVRTC archs (with the profile each plans for), GPUs, cache")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_info)

    def problem_args(s):
        s.add_argument(
            "--arch",
            default=None,
            help="target arch, e.g. sm_90 (uses its reference GPU; default sm_90 when --profile is not given either)",
        )
        s.add_argument(
            "--profile",
            default=None,
            help="named GPU profile, e.g. h100, v100, rtx-pro-6000 (with --arch: must be that arch)",
        )
        s.add_argument("--quant", default="uint4b8", help="quant type")
        s.add_argument("--group", type=group_size, default=128, help="group size (-1: per channel)")
        s.add_argument("--act", default="float16", choices=["float16", "bfloat16"], help="activation dtype")

    s = sub.add_parser(
        "inspect",
        help="show the kernel for a problem: source, PTX or resources (no GPU "
        "needed); where the planner takes the dequant + cuBLAS route (large M), its "
        "dequantisation kernel",
    )
    problem_args(s)
    s.add_argument("--m", type=positive_int, default=16, help="rows of x (batch x tokens)")
    s.add_argument("--n", type=positive_int, default=4096, help="out_features (a multiple of 8)")
    s.add_argument("--k", type=positive_int, default=4096, help="in_features (a multiple of 8)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--source", action="store_true", help="the generated CUDA source")
    g.add_argument("--ptx", action="store_true", help="the PTX")
    g.add_argument("--sass", action="store_true", help="the SASS (needs cuobjdump or nvdisasm)")
    g.add_argument("--resources", action="store_true", help="registers, shared memory, spills (default)")
    s.add_argument(
        "--pdl",
        action="store_true",
        help="the kernel built for programmatic dependent launch (linear(enable_pdl=True))",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    cli_moe.add_args(s)
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("prewarm", help="compile the kernels a fleet will need (no GPU needed)")
    s.add_argument(
        "--arch",
        default=None,
        help="target archs, e.g. sm_70,sm_90 (each as its reference GPU; `jitmarlin info` lists the plannable ones)",
    )
    s.add_argument(
        "--profile",
        default=None,
        help="GPU profiles, e.g. v100,t4,h100,rtx-pro-6000 (with --arch: the GPUs of both lists are prewarmed)",
    )
    _shape_args(s, "batch sizes (M buckets) to plan for")
    s.add_argument("--jobs", type=jobs, default=1, help="compile processes, >= 1 or 'auto' (one per CPU)")
    s.add_argument(
        "--cache-dir", default=None, help="cache to compile into (default: JITMARLIN_CACHE_DIR or ~/.cache/jitmarlin)"
    )
    s.add_argument("--list-models", action="store_true", help="list the shipped manifests and exit")
    s.add_argument(
        "--pdl",
        action="store_true",
        help="also the sm_90+ builds for programmatic dependent launch (linear(enable_pdl=True))",
    )
    s.set_defaults(func=cmd_prewarm)

    s = sub.add_parser(
        "tune",
        help="time the candidate kernels on this GPU and store the fastest "
        "per shape bucket (used by linear(); carried by cache export)",
    )
    _shape_args(s, "batch sizes; each tunes its M bucket (power of two)")
    s.add_argument("--device", type=int, default=0, help="GPU index")
    s.add_argument("--jobs", type=jobs, default="auto", help="compile processes, >= 1 or 'auto' (one per CPU)")
    s.add_argument("--force", action="store_true", help="re-tune problems that have a stored choice")
    cli_moe.add_tune_args(s)
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument(
        "--cache-dir",
        default=None,
        help="cache to store the choices in (default: JITMARLIN_CACHE_DIR or ~/.cache/jitmarlin)",
    )
    s.set_defaults(func=cmd_tune)

    s = sub.add_parser("cache", help="list, check, bundle or clear the kernel cache")
    # --cache-dir is accepted before or after the action; SUPPRESS keeps the action's parser
    # from overwriting a value given before it
    s.add_argument(
        "--cache-dir", default=None, help="cache directory (default: JITMARLIN_CACHE_DIR or ~/.cache/jitmarlin)"
    )
    s.set_defaults(func=cmd_cache)
    acts = s.add_subparsers(dest="action", required=True)

    def cache_action(name, what):
        a = acts.add_parser(name, help=what)
        a.add_argument("--cache-dir", default=argparse.SUPPRESS, help="cache directory")
        return a

    cache_action("ls", "one line per kernel: key, arch, size, created, last used, name; then the tuned choices")
    cache_action("stats", "entries, size, cap, per-arch counts").add_argument("--json", action="store_true")
    cache_action("verify", "check every entry (exit 1 if any is bad)").add_argument(
        "--fix", action="store_true", help="delete the bad entries"
    )
    cache_action("clear", "remove every entry")
    a = cache_action("export", "write a portable bundle (tar) of the cached kernels")
    a.add_argument("file")
    a.add_argument("--arch", default=None, help="only these archs, e.g. sm_90,sm_80")
    a = cache_action("import", "merge a bundle into the cache")
    a.add_argument("file")
    a.add_argument(
        "--sha256", default=None, metavar="HEX", help="import only if the bundle's sha256 digest is HEX (pins it)"
    )
    s = sub.add_parser("bench", help="quick GPU benchmark: time vs byte floor and fp16 cuBLAS, host overhead")
    s.add_argument("--shapes", default="4096x4096,4096x14336", help="KxN list")
    s.add_argument("--m", default="1,16,64", help="batch sizes, comma list")
    s.add_argument("--act", default="float16", choices=["float16", "bfloat16"], help="activation dtype")
    s.add_argument("--group", type=group_size, default=128, help="group size (-1: per channel)")
    s.add_argument("--overhead", action="store_true", help="also host overhead per eager call")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_bench)
    return p


def main(argv=None) -> int:
    """The `jitmarlin` command. Returns the exit status: 0 ok, 1 failed (or nothing done), 2 bad
    arguments or an unsupported request, 130 interrupted, 141 stdout closed early."""
    args = build_parser().parse_args(argv)
    if getattr(args, "func", None) is cmd_inspect and not (args.arch or args.profile):
        args.arch = "sm_90"
    return run_main(args.func, args)
