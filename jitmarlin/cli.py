"""The `jitmarlin` command (also `python -m jitmarlin`): info, inspect, prewarm, cache."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import __version__


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
    from . import nvrtc
    from .cache import default_cache
    from .profiles import emulated_name
    from .render import templates_dir, templates_digest

    info = {"jitmarlin": __version__}
    try:
        info["nvrtc"] = ".".join(map(str, nvrtc.version()))
        info["nvrtc_archs"] = list(nvrtc.supported_archs())
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
    info["cache_entries"] = sum(1 for _ in cache.entries())
    info["templates"] = str(templates_dir())
    info["templates_sha256"] = templates_digest()[:16]
    info["emulate"] = emulated_name()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    w = max(len(k) for k in info)
    for k, v in info.items():
        if isinstance(v, list):
            v = ", ".join(str(x if not isinstance(x, dict) else f"[{x['index']}] {x['name']} (cc {x['cc']})") for x in v) or "none"
        print(f"{k:<{w}}  {v}")
    return 0


def _profile_from(args):
    from .profiles import get_profile

    return get_profile(args.profile or args.arch)


def cmd_inspect(args) -> int:
    from .api import plan_for
    from .cache import default_cache
    from .render import render

    prof = _profile_from(args)
    plan = plan_for(prof, args.m, args.n, args.k, args.act, args.quant, args.group)
    spec = plan.spec
    if args.source:
        print(render(spec), end="")
        return 0
    art, key, status = default_cache().get(spec, prof.arch)
    if args.ptx:
        print(art.ptx, end="")
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
        "kernel": spec.name, "spec": json.loads(spec.canonical()), "profile": prof.name,
        "arch": prof.arch, "grid": plan.grid, "iters": plan.iters, "cache": status,
        "cache_key": key[:16], "compile_seconds": round(art.seconds, 3), **res,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k:<20} {v}")
    return 0


def _parse_shapes(text: str):
    shapes = []
    for part in text.split(","):
        k, n = part.lower().split("x")
        shapes.append((int(k), int(n)))
    return shapes


def cmd_prewarm(args) -> int:
    from .api import prewarm
    from .cache import KernelCache, default_cache

    names = []
    if args.profile:
        names += [s.strip() for s in args.profile.split(",") if s.strip()]
    if args.arch:
        names += [s.strip() for s in args.arch.split(",") if s.strip()]
    if not names:
        print("prewarm: give --arch or --profile", file=sys.stderr)
        return 2
    cache = KernelCache(args.cache_dir) if args.cache_dir else default_cache()
    t0 = time.perf_counter()
    results = prewarm(names, _parse_shapes(args.shapes), [int(m) for m in args.m.split(",")],
                      act=args.act, qtype=args.quant, group_size=args.group, cache=cache)
    wall = time.perf_counter() - t0
    failed = [r for r in results if r.status == "failed"]
    for r in results:
        extra = f" {r.seconds:.2f}s" if r.status == "compiled" else ""
        extra += f"  {r.detail}" if r.detail else ""
        print(f"{r.status:9s} {r.arch:7s} {r.kernel}{extra}")
    n_comp = sum(r.status == "compiled" for r in results)
    n_cached = sum(r.status == "cached" for r in results)
    print(f"prewarm: {n_comp} compiled, {n_cached} already cached, {len(failed)} failed "
          f"in {wall:.1f} s -> {cache.directory}")
    return 1 if failed else 0


def cmd_cache(args) -> int:
    from .cache import default_cache

    cache = default_cache()
    if args.action == "clear":
        n = cache.clear()
        print(f"removed {n} entries from {cache.directory}")
        return 0
    rows = []
    total = 0
    for key, e in cache.entries():
        if not isinstance(e, dict):
            continue
        size = len(e.get("cubin", b"")) + len(e.get("ptx", ""))
        total += size
        rows.append((key[:16], e.get("name", "?"), e.get("arch", "?"), size,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(e.get("created", 0)))))
    if args.action == "ls":
        for r in rows:
            print(f"{r[0]}  {r[2]:7s} {r[3]:>9d}  {r[4]}  {r[1]}")
    print(f"{len(rows)} entries, {total / 1e6:.1f} MB in {cache.directory}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jitmarlin", description=f"jitmarlin {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("info", help="versions, NVRTC archs, GPUs, cache")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_info)

    def problem_args(s):
        s.add_argument("--arch", default=None, help="target arch, e.g. sm_90 (uses its reference GPU)")
        s.add_argument("--profile", default=None, help="named GPU profile, e.g. h100, v100, rtx-pro-6000")
        s.add_argument("--quant", default="uint4b8")
        s.add_argument("--group", type=int, default=128)
        s.add_argument("--act", default="float16", choices=["float16", "bfloat16"])

    s = sub.add_parser("inspect", help="show the kernel for a problem: source, PTX or resources (no GPU needed)")
    problem_args(s)
    s.add_argument("--m", type=int, default=16)
    s.add_argument("--n", type=int, default=4096)
    s.add_argument("--k", type=int, default=4096)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--source", action="store_true", help="the generated CUDA source")
    g.add_argument("--ptx", action="store_true", help="the PTX")
    g.add_argument("--resources", action="store_true", help="registers, shared memory, spills (default)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("prewarm", help="compile the kernels a fleet will need (no GPU needed)")
    problem_args(s)
    s.add_argument("--shapes", required=True, help="KxN list, e.g. 4096x4096,4096x14336")
    s.add_argument("--m", default="1,16,64", help="batch sizes (M) to plan for")
    s.add_argument("--cache-dir", default=None)
    s.set_defaults(func=cmd_prewarm)

    s = sub.add_parser("cache", help="list, summarise or clear the kernel cache")
    s.add_argument("action", choices=["ls", "stats", "clear"])
    s.set_defaults(func=cmd_cache)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "func", None) is cmd_inspect and not (args.arch or args.profile):
        args.arch = "sm_90"
    from .errors import JitMarlinError

    try:
        return args.func(args)
    except JitMarlinError as e:
        print(f"jitmarlin: {e}", file=sys.stderr)
        return 2
