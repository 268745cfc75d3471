"""`jitmarlin inspect --moe`: the kernels of a MoE layer's routed experts (routing module, w13 and
w2 grouped GEMMs) for a problem, as `inspect` shows a dense one: source, PTX, SASS or resources."""
from __future__ import annotations

import json

from jitmarlin.service.cli_args import positive_int


def add_args(s) -> None:
    s.add_argument("--moe", action="store_true",
                   help="a MoE layer instead: --m tokens, --experts, --topk, --hidden, --inter; --stage picks "
                        "the kernel shown by --source/--ptx/--sass")
    s.add_argument("--experts", type=positive_int, default=8, help="(--moe) experts on this GPU")
    s.add_argument("--topk", type=positive_int, default=2, help="(--moe) experts a token")
    s.add_argument("--hidden", type=positive_int, default=4096, help="(--moe) hidden size")
    s.add_argument("--inter", type=positive_int, default=14336, help="(--moe) intermediate size a GPU")
    s.add_argument("--activation", default="silu", choices=["silu", "gelu", "swigluoai"], help="(--moe)")
    s.add_argument("--stage", default="up", choices=["route", "up", "down"],
                   help="(--moe) the kernel --source/--ptx/--sass show")


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
    plan = plan_moe(prof, MoEProblem(args.m, args.topk, args.experts, n13, k13, n2, k2, args.inter, args.hidden,
                                     args.act, args.quant, g, args.activation))
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
    report = {"profile": prof.name, "arch": prof.arch, "tokens": args.m, "topk": args.topk,
              "experts": args.experts, "block_m": plan.block_m, "max_blocks": plan.max_blocks,
              "down_k_splits": plan.splits, "kernels": []}
    for stage, s, grid, smem in (("route", plan.route, 1, 2 * plan.route.threads * 4),
                                 ("up", plan.up, plan.grid_up, plan.up.smem_bytes()),
                                 ("down", plan.down, plan.grid_down, plan.down.smem_bytes())):
        art, key, status = cache.get(s, prof.arch)
        r = art.resources
        report["kernels"].append({"stage": stage, "kernel": s.name, "spec": json.loads(s.canonical()),
                                  "grid": grid, "threads": s.threads, "dynamic_shared_bytes": smem,
                                  "registers": r.get("registers"), "spill_stores": r.get("spill_stores"),
                                  "local_bytes": r.get("stack_bytes"), "cache": status, "cache_key": key[:16]})
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for k, v in report.items():
        if k != "kernels":
            print(f"{k:<20} {v}")
    for kr in report["kernels"]:
        print(f"{kr['stage']:<6} {kr['kernel']:<52} grid {kr['grid']:<6} smem {kr['dynamic_shared_bytes']:<7} "
              f"regs {kr['registers']} spills {kr['spill_stores']} ({kr['cache']})")
    return 0
