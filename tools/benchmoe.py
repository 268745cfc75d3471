"""tools/bench --moe: the MoE block (jitmarlin.moe) on the six models' expert shapes, by the dense
bench's method (../shared/BENCH.md): CUDA-graph replay, weight copies rotated past 4x L2 (by the
bytes the routing touches), random data, warm-up outside the timed region.

Routing: random top-k (distinct experts a token, seed 0), and for T >= 2 one skewed routing where
half the tokens put their first slot on expert 0. Floor: the bytes of the experts the routing
touches (w13 + w2 codes and scales) plus x and the output, over the copy bandwidth of the same run.
Peers, same run, same routing:
  humming      humming-kernels' MoE GEMMs (tools/benchmoe_humming.py; its note says which modes),
               timed on SwiGLU models only: gpt-oss-20b-silu (gpt-oss-20b's mxfp4 experts with SwiGLU),
               qwen3-30b-a3b-mxfp4 and mixtral-8x7b-mxfp4 (those shapes with mxfp4 codes) are the
               like-for-like mxfp4 rows
  torch-bf16   torch's grouped GEMM (torch._grouped_mm) on bf16 weights, sort and sum in torch
  dense-loop   jitmarlin.linear looped over the touched experts (host knows the routing)
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time

import numpy as np

# The six models' quant types as served (GPTQ-style int4 g128; gpt-oss ships MXFP4); their expert
# shapes come from the shipped prewarm manifests (cache/<model>.json).
QUANT = {
    "mixtral-8x7b": ("uint4b8", 128),
    "qwen3-30b-a3b": ("uint4b8", 128),
    "qwen3-235b-a22b": ("uint4b8", 128),
    "deepseek-v2-lite": ("uint4b8", 128),
    "gpt-oss-20b": ("mxfp4", 32),
    "gpt-oss-120b": ("mxfp4", 32),
}


def model_shape(name: str) -> tuple:
    """(experts, top-k, hidden, intermediate, quant type, group, activation) of a MoE model."""
    from jitmarlin.service.fleet import load_manifest

    m = load_manifest(name)
    return (m.moe.experts, m.moe.topk, m.hidden_size, m.moe.intermediate, *QUANT[name], m.moe.activation)


MODELS = {name: model_shape(name) for name in QUANT}
# gpt-oss-20b's experts with SwiGLU in place of their clamped swigluoai: humming's MoE path runs
# SwiGLU only, so this row compares the mxfp4 grouped GEMMs with humming like for like.
MODELS["gpt-oss-20b-silu"] = MODELS["gpt-oss-20b"][:6] + ("silu",)
# humming's MoE heuristics assert on gpt-oss's expert shapes (hidden = intermediate = 2880), so the
# mxfp4 comparison with humming (#59: uint4b8 and mxfp4 at least) also runs on these models'
# shapes with mxfp4 codes (groups of 32, e8m0-valued scales).
for _name in ("qwen3-30b-a3b", "mixtral-8x7b"):
    MODELS[f"{_name}-mxfp4"] = MODELS[_name][:4] + ("mxfp4", 32, "silu")


def model_names(shapes: str | None) -> list:
    """--shapes ('all' or comma-separated names) -> model names; unknown names are an error."""
    names = list(MODELS) if shapes in ("all", None) else [s for s in shapes.split(",") if s]
    bad = [n for n in names if n not in MODELS]
    if bad:
        raise SystemExit(f"tools/bench --moe: unknown model(s) {', '.join(bad)}; known: {', '.join(MODELS)}")
    return names


TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


def _model_weights(model: str):
    """(rng seeded 0, code bits, w13, w2): random MoE weights of `model`'s expert shapes."""
    from jitmarlin.service.tune_moe import random_moe
    from jitmarlin.weights.qtypes import get_qtype

    e, _, hidden, inter, qtype, group, _ = MODELS[model]
    rng = np.random.default_rng(0)
    return (
        rng,
        get_qtype(qtype).bits,
        random_moe(rng, e, 2 * inter, hidden, qtype, group, gated=True),
        random_moe(rng, e, hidden, inter, qtype, group),
    )


def routing(rng, t, k, e, skew=False):
    ids = np.argsort(rng.random((t, e)), axis=1)[:, :k].astype(np.int32)
    if skew:
        half = t // 2
        ids[:half, 0] = 0
        for j in range(1, k):  # keep a token's experts distinct
            clash = ids[:half, j] == 0
            ids[:half, j][clash] = (ids[:half, 0][clash] + 1 + j) % e
    w = rng.random((t, k)).astype(np.float32) + 0.05
    return ids, w / w.sum(1, keepdims=True)


def touched_bytes(mw13, mw2, ids) -> int:
    per = sum(a[0].nbytes for mw in (mw13, mw2) for a in (mw.packed, mw.scales, mw.offsets) if a is not None)
    return len(np.unique(ids)) * per


def _device_copies(cp, mw, dev, act, copies):
    """`copies` MoEWeights sharing the host arrays, each with its own device copy of the codes."""
    import copy as _copy

    out = [mw]
    base = mw.to_device(dev, act)
    for _ in range(copies - 1):
        c = _copy.copy(mw)
        object.__setattr__(c, "_device", {(dev, act): (cp.array(base[0]),) + tuple(base[1:])})
        out.append(c)
    return out


def _row(torch, cp, rng, prof, w13, w2, t, k, e, skew, dev, act, tdt, hidden):
    """One row's routing, weight copies (rotated past 4x L2 by the bytes it touches), x and out."""
    ids, tw = routing(rng, t, k, e, skew)
    tb = touched_bytes(w13, w2, ids)
    copies = max(1, min(16, math.ceil(4 * prof.l2_bytes / tb)))
    m13, m2 = _device_copies(cp, w13, dev, act, copies), _device_copies(cp, w2, dev, act, copies)
    x = (torch.randn(t, hidden, device="cuda") * 0.5).to(tdt)
    ids_d, tw_d = torch.from_numpy(ids).cuda(), torch.from_numpy(tw).cuda()
    return ids, tb, copies, m13, m2, x, ids_d, tw_d, torch.empty_like(x)


def _torch_grouped(torch, e, hidden, inter, copies, act_dtype):
    if not hasattr(torch, "_grouped_mm"):
        raise RuntimeError("torch._grouped_mm is not in this torch")
    ws = []
    for _ in range(copies):
        # (E, K, N) views of (E, N, K) storage: the layout grouped GEMMs take for their B operand
        w13 = (torch.randn(e, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16) * 0.02).transpose(-2, -1)
        w2 = (torch.randn(e, hidden, inter, device="cuda", dtype=torch.bfloat16) * 0.02).transpose(-2, -1)
        ws.append((w13, w2))

    def block(i, x, ids, tw):
        t, k = ids.shape
        flat = ids.reshape(-1)
        order = torch.argsort(flat)
        counts = torch.zeros(e, dtype=torch.int32, device=x.device).scatter_add_(
            0, flat.long(), torch.ones_like(flat, dtype=torch.int32)
        )
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        xs = x.to(torch.bfloat16).index_select(0, order // k)
        h = torch._grouped_mm(xs, ws[i][0], offs=offs)
        a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        y = torch._grouped_mm(a, ws[i][1], offs=offs) * tw.reshape(-1)[order, None]
        out = torch.zeros(t, hidden, device=x.device, dtype=torch.float32)
        out.index_add_(0, order // k, y.float())
        return out.to(act_dtype)

    return block


def _dense_loop(torch, jitmarlin, mws13, mws2, ids_np, tw, activation, x):
    """jitmarlin.linear over the experts this routing touches (routing known on the host)."""
    t, k = ids_np.shape
    plan = []
    for e in np.unique(ids_np):
        rows, slots = np.nonzero(ids_np == e)
        qws = [(mws13[i].expert(int(e)), mws2[i].expert(int(e))) for i in range(len(mws13))]
        plan.append((qws, torch.from_numpy(rows).cuda(), torch.from_numpy(slots).cuda()))
    inter = mws13[0].out_features // 2

    def run(i):
        out = torch.zeros(x.shape, device=x.device, dtype=torch.float32)
        for qws, rows, slots in plan:
            xe = x.index_select(0, rows)
            h = jitmarlin.linear(xe, qws[i][0])
            h = h.view(-1, inter // 8, 2, 8)  # interleaved gate / up blocks of 8
            a = (torch.nn.functional.silu(h[:, :, 0].float()) * h[:, :, 1].float()).reshape(-1, inter).to(x.dtype)
            y = jitmarlin.linear(a, qws[i][1])
            out.index_add_(0, rows, y.float() * tw[rows, slots, None])
        return out.to(x.dtype)

    return run


MOE_KINDS = ("auto", "mma", "wgmma")


def moe_kinds(spec: str | None) -> list:
    """--moe-kind (comma-separated): auto (the planner's), mma (mma.sync, no GEMV at decode), wgmma
    (the sm_90 warpgroup kind); the first one's time is the row's jitmarlin_us."""
    kinds = [k for k in (spec or "auto").split(",") if k]
    bad = [k for k in kinds if k not in MOE_KINDS]
    if bad or not kinds:
        raise SystemExit(
            f"tools/bench --moe-kind: unknown kind(s) {', '.join(bad) or repr(spec)}; known: {', '.join(MOE_KINDS)}"
        )
    return list(dict.fromkeys(kinds))


class moe_kind:
    """Force one kind of MoE plan for the whole process while in the block (the planner's
    defaults patched); runners made under another kind are dropped on the way in and out."""

    def __init__(self, kind: str):
        self.kind = kind

    def __enter__(self):
        from jitmarlin.kernels.moe import plan as moe_plan
        from jitmarlin.kernels.moe import wgmma as moe_wgmma
        from jitmarlin.ops import moe as moe_ops

        self.saved = (moe_wgmma.WGMMA_DEFAULT, moe_plan.GEMV_MAX_ROWS)
        moe_wgmma.WGMMA_DEFAULT = {"auto": None, "mma": False, "wgmma": True}[self.kind]
        if self.kind == "mma":
            moe_plan.GEMV_MAX_ROWS = 0
        moe_ops._runners.clear()
        return self

    def plans(self, w13) -> str:
        """The grouped GEMMs the runners of `w13` ran (up / down kernel names)."""
        from jitmarlin.ops import moe as moe_ops

        return "; ".join(
            sorted({f"{r.plan.up.name} / {r.plan.down.name}" for r in moe_ops._runners.get(w13, {}).values()})
        )

    def __exit__(self, *exc):
        from jitmarlin.kernels.moe import plan as moe_plan
        from jitmarlin.kernels.moe import wgmma as moe_wgmma
        from jitmarlin.ops import moe as moe_ops

        moe_wgmma.WGMMA_DEFAULT, moe_plan.GEMV_MAX_ROWS = self.saved
        moe_ops._runners.clear()
        return False


def main_moe(args):
    import cupy as cp
    import torch

    import jitmarlin
    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.service.bench import Timer, copy_bandwidth

    dev = torch.cuda.current_device()
    prof = live_profile(dev)
    gpu = torch.cuda.get_device_name(dev)
    bw = copy_bandwidth(torch)
    timer = Timer(torch, args.target_ms or 25.0, stream=torch.cuda.Stream())
    acts = args.act.split(",")
    peers = [p for p in (args.peers or "humming,torch-bf16,dense-loop").split(",") if p and p != "cublas"]
    models = model_names(args.shapes)
    ts = [int(v) for v in args.m.split(",")] if args.m else list(TOKENS)
    kinds = moe_kinds(getattr(args, "moe_kind", None))
    result = {
        "gpu": gpu,
        "date": dt.date.today().isoformat(),
        "copy_tbps": round(bw, 3),
        "mode": "moe",
        "method": "CUDA-graph replay of the whole routed-expert block, weight copies rotated past 4x L2 "
        "by touched bytes, median of 5 replays",
        "rows": [],
        "peers_requested": peers,
    }
    print(f"# jitmarlin MoE bench on {gpu} ({prof.arch}); copy bandwidth {bw:.2f} TB/s", flush=True)
    hum = None
    if "humming" in peers:
        try:
            import benchmoe_humming as hum
        except Exception as e:  # not installed, or its import fails: the run goes on without it
            print(f"# humming unavailable: {type(e).__name__}: {str(e)[:200]}", flush=True)
    t_start = time.monotonic()
    for model in models:
        e, k, hidden, inter, qtype, group, activation = MODELS[model]
        rng, bits, w13, w2 = _model_weights(model)
        for act in acts:
            tdt = torch.float16 if act == "float16" else torch.bfloat16
            for t in ts:
                if args.deadline_s and time.monotonic() - t_start > args.deadline_s:
                    result["stopped_early"] = f"--deadline-s {args.deadline_s:g} reached"
                    break
                for skew in (False, True) if t >= 2 else (False,):
                    ids, tb, copies, m13, m2, x, ids_d, tw_d, out = _row(
                        torch, cp, rng, prof, w13, w2, t, k, e, skew, dev, act, tdt, hidden
                    )
                    fns = [
                        lambda i=i: jitmarlin.moe(x, m13[i], m2[i], tw_d, ids_d, activation=activation, out=out)
                        for i in range(copies)
                    ]
                    kind_us, kind_plans = {}, {}
                    for kind in kinds:  # (--moe-kind: each kind timed on the same routing and copies)
                        with moe_kind(kind) as mk:
                            try:
                                kind_us[kind] = timer(fns)
                                kind_plans[kind] = mk.plans(m13[0])
                            except Exception as ex:
                                if kind == kinds[0]:
                                    raise
                                kind_plans[kind] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    us = kind_us[kinds[0]]
                    floor = (tb + 2 * t * hidden * 2) / (bw * 1e12) * 1e6
                    row = {
                        "model": model,
                        "E": e,
                        "k": k,
                        "hidden": hidden,
                        "inter": inter,
                        "qtype": qtype,
                        "T": t,
                        "act": act,
                        "routing": "skewed" if skew else "uniform",
                        "copies": copies,
                        "touched_experts": int(len(np.unique(ids))),
                        "floor_us": round(floor, 2),
                        "jitmarlin_us": round(us, 2),
                        "peers": {},
                        "peer_errors": {},
                    }
                    if kinds != ["auto"]:
                        row["kinds"] = {kd: round(v, 2) for kd, v in kind_us.items()}
                        row["kind_plans"] = kind_plans
                    if "dense-loop" in peers and activation == "silu":
                        try:
                            run = _dense_loop(torch, jitmarlin, m13, m2, ids, tw_d, activation, x)
                            row["peers"]["dense-loop"] = round(timer([lambda i=i: run(i) for i in range(copies)]), 2)
                        except Exception as ex:
                            row["peer_errors"]["dense-loop"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    if "torch-bf16" in peers:
                        try:
                            nc = max(1, min(8, math.ceil(4 * prof.l2_bytes / (tb * 4 / max(bits, 1)))))
                            blk = _torch_grouped(torch, e, hidden, inter, nc, tdt)
                            row["peers"]["torch-bf16"] = round(
                                timer([lambda i=i: blk(i, x, ids_d, tw_d) for i in range(nc)]), 2
                            )
                            del blk
                        except Exception as ex:
                            row["peer_errors"]["torch-bf16"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    if hum is not None and activation == "silu":
                        try:
                            h = hum.make_humming_moe(torch, e, hidden, inter, qtype, group, tdt, k, t, copies)
                            h.prepare(x, ids_d, tw_d)
                            ref = hum.humming_moe_reference(torch, h, x, ids_d, tw_d)
                            row["humming_rel_err"] = round(float(h.check(x, ids_d, tw_d, ref)), 5)
                            row["peers"]["humming"] = round(timer([lambda i=i: h.run(i) for i in range(copies)]), 2)
                            row["humming_note"] = h.note
                            del h
                        except Exception as ex:
                            row["peer_errors"]["humming"] = f"{type(ex).__name__}: {str(ex)[:160]}"
                    result["rows"].append(row)
                    cells = "  ".join(
                        [f"{kd} {v:.1f}" for kd, v in kind_us.items()][1:]
                        + [f"{p} {v:.1f} ({us / v:.2f}x)" for p, v in row["peers"].items()]
                    )
                    print(
                        f"{model:<17} {act:<8} T={t:<5} {row['routing']:<8} {us:9.1f} us  floor {floor:8.1f}"
                        f"  x{us / floor:5.2f}  {cells}",
                        flush=True,
                    )
                    m13 = m2 = fns = None  # free the device copies before the next row
                    torch.cuda.empty_cache()
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump(result, f, indent=1)
    return 0


def wgmma_tiles(prof, problem, tm):
    """The planner's wgmma tiles of both stages at `tm` m16 blocks a row block (plan_moe overrides)."""
    from jitmarlin.kernels.moe.wgmma import wgmma_stage_spec

    return {
        "up": wgmma_stage_spec(prof, problem.dense("up"), tm, "up", problem.activation),
        "down": wgmma_stage_spec(prof, problem.dense("down"), tm, "down", ""),
    }


def sweep_trials(prof, problem, base):
    """The alternatives tools/bench --moe --sweep times against the planner's plan `base`: a list of
    (what, choice, plan_moe keyword arguments). tools/prewarm_suite.py compiles the same list."""
    from dataclasses import replace as dc_replace

    from jitmarlin.kernels.moe import plan_moe
    from jitmarlin.kernels.moe.plan import gemv_rows16, stage_candidates
    from jitmarlin.kernels.moe.wgmma import rows_per_expert

    rows = rows_per_expert(problem.pairs, problem.experts)  # under an even routing

    trials = [("up", s, {"up": s, "down": base.down}) for s in stage_candidates(prof, problem, base, "up")]
    trials += [("down", s, {"down": s, "up": base.up}) for s in stage_candidates(prof, problem, base, "down")]
    if not base.gemv:
        trials += [
            ("splits", n, {"splits": n})
            for n in (1, 2, 3, 4, 6, 8, 12, 16)
            if n <= problem.k2 // base.down.tile_k and (n == 1 or base.down.path == "sm80")
        ]
        trials += [
            ("up_splits", n, {"up_splits": n})
            for n in (2, 3, 4, 5, 7, 8)
            if n <= problem.k13 // base.up.tile_k and base.up.path == "sm80"
        ]
    if base.wgmma:  # the wgmma kind's other row blocks (both stages share one), and mma.sync
        # (256-row blocks where an even routing gives an expert more than 64 rows)
        tms = (2, 4, 8, 16) if rows > 64 else (2, 4, 8)
        trials += [("tm", tm, wgmma_tiles(prof, problem, tm)) for tm in tms if tm != base.up.tm]
        # its down stage's K splits (by override only until timed)
        trials += [("splits", n, {"splits": n}) for n in (2, 3, 4) if n <= problem.k2 // base.down.tile_k]
        trials += [  # larger row blocks with a split w2 (the ragged last wave of e115's skewed routing)
            ("tm+splits", f"{tm}/{n}", {**wgmma_tiles(prof, problem, tm), "splits": n})
            for tm in (4, 8)
            for n in (2, 3)
            if tm > base.up.tm and n <= problem.k2 // 64
        ]
        # the column-tile-major block order (an expert's row blocks read a weight tile side by side)
        tiles = {"up": dc_replace(base.up, tile_major=True), "down": dc_replace(base.down, tile_major=True)}
        trials.append(("order", "tile-major", tiles))
        # the A-operand layouts, each trial naming all of them (the planner's are sorted_h, and
        # sorted_x from 64 rows an expert: e132): x and H gathered by pair id ("unsorted"); H in
        # the aligned list's order, read by the down stage as TMA boxes; x copied in that order
        # first and read by the up stage as TMA boxes; both; and with the order
        layouts = (
            ("unsorted", False, False, False),
            ("sorted_h", True, False, False),
            ("sorted_h+order", True, False, True),
            ("sorted_x", False, True, False),
            ("sorted_hx", True, True, False),
            ("sorted_hx+order", True, True, True),
        )
        for what, sh, sx, tm_ in layouts:
            up = dc_replace(base.up, sorted_x=sx, sorted_h=sh, tile_major=tm_)
            down = dc_replace(base.down, sorted_h=sh, tile_major=tm_)
            if (up, down) != (base.up, base.down):
                trials.append((what, "on", {"up": up, "down": down}))
        trials.append(("kind", "mma", {"wgmma": False}))
    if problem.tokens > 1 and rows <= 16:  # GEMV blocks of 16 rows (two token blocks)
        try:
            g = plan_moe(prof, problem, gemv=True)
            trials.append(("rows", 16, {"up": gemv_rows16(g.up), "down": gemv_rows16(g.down)}))
        except Exception:
            pass
    if base.gemv and prof.cc >= (9, 0):  # the w2 GEMV and the combine behind their predecessors (PDL)
        trials.append(("pdl", not base.pdl, {"pdl": not base.pdl}))
    if base.gemv and problem.tokens == 1:  # the GEMV kind with(out) the alignment launch: the other mode
        trials.append(("direct", not base.direct, {"direct": not base.direct}))
    try:  # the other kind's plan (GEMV against mma.sync at decode)
        trials.append(("kind", "gemv" if not base.gemv else "mma", {"gemv": not base.gemv}))
        plan_moe(prof, problem, gemv=not base.gemv)
    except Exception:
        trials.pop()
    return trials


def sweep_moe(args):
    """tools/bench --moe --sweep [uniform|skewed]: at each model and T, under that routing, time the
    planner's MoE plan, then every w13 tile (with the planner's w2), every w2 tile and every K split
    (with the planner's w13), and for the wgmma kind its other row blocks, alone and with a split
    w2, and for the GEMV kind at T = 1 the direct plan (no alignment launch); print the default and
    the fastest of each, and write them to --json."""
    import torch

    from jitmarlin.jit.profiles import live_profile
    from jitmarlin.kernels.moe import MoEProblem, plan_moe
    from jitmarlin.ops import moe as moe_ops
    from jitmarlin.service.bench import Timer, copy_bandwidth

    dev = torch.cuda.current_device()
    prof = live_profile(dev)
    bw = copy_bandwidth(torch)
    stream = torch.cuda.Stream()
    timer = Timer(torch, args.target_ms or 10.0, stream=stream)
    models = model_names(args.shapes)
    ts = [int(v) for v in args.m.split(",")] if args.m else [1, 16, 256]
    act = args.act.split(",")[0]
    tdt = torch.float16 if act == "float16" else torch.bfloat16
    out = {
        "gpu": torch.cuda.get_device_name(dev),
        "date": dt.date.today().isoformat(),
        "mode": "moe-sweep",
        "copy_tbps": round(bw, 3),
        "rows": [],
    }
    t_start = time.monotonic()
    for model in models:
        e, k, hidden, inter, qtype, group, activation = MODELS[model]
        rng, bits, w13, w2 = _model_weights(model)
        for t in ts:
            if args.deadline_s and time.monotonic() - t_start > args.deadline_s:
                break
            skew = args.sweep == "skewed" and t >= 2
            ids, tb, copies, m13, m2, x, ids_d, tw_d, y = _row(
                torch, __import__("cupy"), rng, prof, w13, w2, t, k, e, skew, dev, act, tdt, hidden
            )
            problem = MoEProblem(t, k, e, w13.n, w13.k, w2.n, w2.k, inter, hidden, act, qtype, group, activation)
            base = plan_moe(prof, problem)

            def time_plan(plan):
                rs = [
                    moe_ops._Runner(m13[i], m2[i], dev, act, t, k, stream.cuda_stream, activation, False, plan=plan)
                    for i in range(copies)
                ]
                return timer(
                    [lambda r=r: r(x.data_ptr(), ids_d.data_ptr(), tw_d.data_ptr(), 0, e, y.data_ptr()) for r in rs]
                )

            floor = (tb + 2 * t * hidden * 2) / (bw * 1e12) * 1e6
            row = {
                "model": model,
                "T": t,
                "act": act,
                "routing": "skewed" if skew else "uniform",
                "floor_us": round(floor, 2),
                "default": {
                    "up": base.up.name,
                    "down": base.down.name,
                    "splits": base.splits,
                    "us": round(time_plan(base), 2),
                },
                "best": {},
            }
            trials = sweep_trials(prof, problem, base)
            if args.sweep_only:
                trials = [tr for tr in trials if tr[0] in args.sweep_only.split(",")]
            for what, choice, kw in trials:
                try:
                    us = time_plan(plan_moe(prof, problem, **kw))
                except Exception as ex:  # a candidate that does not build or run: next one
                    print(f"  {what} {getattr(choice, 'name', choice)}: {type(ex).__name__}: {str(ex)[:120]}")
                    continue
                best = row["best"].get(what)
                if best is None or us < best["us"]:
                    row["best"][what] = {"choice": getattr(choice, "name", choice), "us": round(us, 2)}
            out["rows"].append(row)
            d = row["default"]
            print(
                f"{model:<17} T={t:<5} {row['routing']:<8} default {d['us']:8.1f} us (floor {floor:.1f}; {d['up']}, {d['down']}, "
                f"splits {d['splits']})",
                flush=True,
            )
            for what, b in row["best"].items():
                print(f"    best {what:<6} {b['us']:8.1f} us  {b['choice']}", flush=True)
            m13 = m2 = None
            torch.cuda.empty_cache()
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=1)
    return 0
