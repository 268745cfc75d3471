"""`jitmarlin inspect --moe`: the kernels of a MoE layer's routed experts (routing module, w13 and
w2 grouped GEMMs) for a problem, as `inspect` shows a dense one: source, PTX, SASS or resources."""

from __future__ import annotations

import json

from jitmarlin.service.cli_args import positive_int


def add_args(s) -> None:
    s.add_argument(
        "--moe",
        action="store_true",
        help="a MoE layer instead: --m tokens, --experts, --topk, --hidden, --inter; --stage picks "
        "the kernel shown by --source/--ptx/--sass",
    )
    s.add_argument("--experts", type=positive_int, default=8, help="(--moe) experts on this GPU")
    s.add_argument("--topk", type=positive_int, default=2, help="(--moe) experts a token")
    s.add_argument("--hidden", type=positive_int, default=4096, help="(--moe) hidden size")
    s.add_argument("--inter", type=positive_int, default=14336, help="(--moe) intermediate size a GPU")
    s.add_argument("--activation", default="silu", choices=["silu", "gelu", "swigluoai"], help="(--moe)")
    s.add_argument(
        "--stage", default="up", choices=["route", "up", "down"], help="(--moe) the kernel --source/--ptx/--sass show"
    )


def inspect(args, prof) -> int:
    from jitmarlin.jit.cache import default_cache
    from jitmarlin.kernels.moe import MoEProblem, plan_moe
    from jitmarlin.kernels.render import render
    from jitmarlin.weights.qtypes import check_shape, kernel_dims

    check_shape(2 * args.inter, args.hidden)
    check_shape(args.hidden, args.inter)
    g = args.group
    n13, k13 = kernel_dims(2 * args.inter, args.hidden, g)
    n2, k2 = kernel_dims(args.hidden, args.inter, g)
    plan = plan_moe(
        prof,
        MoEProblem(
            args.m,
            args.topk,
            args.experts,
            n13,
            k13,
            n2,
            k2,
            args.inter,
            args.hidden,
            args.act,
            args.quant,
            g,
            args.activation,
        ),
    )
    spec = {"route": plan.route, "up": plan.up, "down": plan.down}[args.stage]
    if args.source:
        print(render(spec), end="")
        return 0
    cache = default_cache()
    if args.ptx or args.sass:
        art = cache.get(spec, prof.arch)[0]
        if args.ptx:
            print(art.ptx, end="")
        else:
            from jitmarlin.jit.nvrtc import disassemble

            print(disassemble(art.cubin), end="")
        return 0
    report = {
        "profile": prof.name,
        "arch": prof.arch,
        "tokens": args.m,
        "topk": args.topk,
        "experts": args.experts,
        "kind": "gemv" if plan.gemv else "wgmma" if plan.wgmma else "mma.sync",
        "direct": plan.direct,  # T = 1 GEMV without the alignment launch (the route module's combine still runs)
        "pdl": plan.pdl,  # w2 GEMV and combine with programmatic dependent launch
        "block_m": plan.block_m,
        "max_blocks": plan.max_blocks,
        "down_k_splits": plan.splits,
        "up_k_splits": plan.up_splits,
        "kernels": [],
    }
    for stage, s, grid, smem in (
        ("route", plan.route, 1, 2 * plan.route.threads * 4),
        ("up", plan.up, plan.grid_up, plan.up.smem_bytes()),
        ("down", plan.down, plan.grid_down, plan.down.smem_bytes()),
    ):
        art, key, status = cache.get(s, prof.arch)
        r = art.resources
        report["kernels"].append(
            {
                "stage": stage,
                "kernel": s.name,
                "spec": json.loads(s.canonical()),
                "grid": grid,
                "threads": s.threads,
                "dynamic_shared_bytes": smem,
                "registers": r.get("registers"),
                "spill_stores": r.get("spill_stores"),
                "local_bytes": r.get("stack_bytes"),
                "cache": status,
                "cache_key": key[:16],
            }
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for k, v in report.items():
        if k != "kernels":
            print(f"{k:<20} {v}")
    for kr in report["kernels"]:
        print(
            f"{kr['stage']:<6} {kr['kernel']:<52} grid {kr['grid']:<6} smem {kr['dynamic_shared_bytes']:<7} "
            f"regs {kr['registers']} spills {kr['spill_stores']} ({kr['cache']})"
        )
    return 0


def add_tune_args(s) -> None:
    s.add_argument(
        "--moe",
        action="store_true",
        help="tune the MoE layers of --model manifests instead (w13/w2 tiles and K splits per token "
        "bucket of --m; jitmarlin.moe uses the choices)",
    )


def tune(args, _csv, _gpus) -> int:
    """`jitmarlin tune --moe`: the routed experts of each --model at each --m token count (cli.py
    passes its comma-list parser and GPU probe)."""
    import sys

    from jitmarlin.jit.cache import default_cache
    from jitmarlin.jit.profiles import live_profile, planning_profile
    from jitmarlin.kernels.moe import MoEProblem
    from jitmarlin.service import fleet, fleet_moe, tune_moe
    from jitmarlin.weights.qtypes import kernel_dims

    if not (args.model or args.manifest):
        print("tune --moe: give --model or --manifest (a MoE model's)", file=sys.stderr)
        return 2
    if not _gpus():
        print(
            "jitmarlin tune: no GPU is visible (CuPy sees none); tuning times kernels on the GPU it tunes for",
            file=sys.stderr,
        )
        return 1
    tp = _csv(args.tp, int, "--tp") or None
    shapes = []
    for ref in _csv(args.model) + ([args.manifest] if args.manifest else []):
        s, _ = fleet.expand_shapes(fleet.load_manifest(ref), tp)
        shapes += [x for x in s if isinstance(x, fleet_moe.MoEShape)]
    if not shapes:
        print("tune --moe: the selected manifests have no MoE layer", file=sys.stderr)
        return 2
    dev = args.device
    profile, arch = planning_profile(dev), live_profile(dev).arch
    cache = default_cache()
    out = []
    for sh in dict.fromkeys(shapes):
        for g in _csv(args.group, int, "--group"):
            n13, k13 = kernel_dims(2 * sh.inter, sh.hidden, g)
            n2, k2 = kernel_dims(sh.hidden, sh.inter, g)
            for t in _csv(args.m, int, "--m"):
                for act in _csv(args.act):
                    for q in _csv(args.quant):
                        p = MoEProblem(
                            t, sh.topk, sh.experts, n13, k13, n2, k2, sh.inter, sh.hidden, act, q, g, sh.activation
                        )
                        c = tune_moe.tune_on_gpu(profile, arch, p, cache, dev, force=args.force)
                        up, down = c.specs()
                        out.append(
                            {
                                "shape": sh.label,
                                "key": c.key,
                                "us": c.us,
                                "default_us": c.default_us,
                                "up": up.name,
                                "down": down.name,
                                "splits": c.splits,
                                "improved": c.improved,
                            }
                        )
                        if not args.json:
                            print(
                                f"{sh.label} T<={c.problem['tokens']} {act} {q} g{g}: {c.us:.1f} us "
                                f"(planner {c.default_us:.1f}) {up.name} {down.name} splits {c.splits}"
                            )
    if args.json:
        print(json.dumps(out, indent=2))
    return 0
