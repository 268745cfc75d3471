#!/usr/bin/env python3
"""Where the wgmma kernel's Stream-K tail goes (session 35, tools/PERF.md entry 72): run one
layer through the kernel rendered with the `wg_timeline` substitution of variant_bench.py, which
has thread 0 of every block write %globaltimer (ns) at its start and, for each tile piece it
works on, at the end of the piece's main loop, after its partial sums are counted in (a
contributor: after its stores are issued, after its fence, after it is counted in; a finisher:
after its wait, after its loads), and after the tile's output. The
stamps go to the workspace past the plan's partial-sum slots (128 x 128 tiles only: the 256-wide
ones fill it). Not a benchmark: one launch a sample, the timer's resolution is what the GPU gives.
    JM_PROBE_SUB=wg_timeline python3 tools/probe/variant_bench.py probe/timeline.py --layer "8B qkv" --m 256
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

sys.path.insert(0, os.path.join(HERE, ".."))
from benchlib import SHAPES  # noqa: E402

LAYERS = {name[3:]: kn for name, kn in SHAPES.items()}   # "8B qkv": (K, N)
EV = 16   # stamps a block: start, then 5 a piece (loop end, counted in, waited, loaded, tile out)


def analyse(st: np.ndarray, pl, quiet: bool) -> dict:
    """Summary (us) of one launch's stamps st[grid, EV] (0: not written)."""
    kt = pl.k_tiles
    t0 = st[:, 0].min()
    rel = np.where(st > 0, (st.astype(np.int64) - int(t0)) / 1e3, np.nan)
    end = np.nanmax(rel, axis=1)
    span = np.nanmax(end)
    loop_ends, contrib, wait, load, epi, stores, fence = [], [], [], [], [], [], []
    pub = []   # KernelSpec.async_publish: loop end of the contributing piece -> counted in
    for b in range(pl.grid):
        if not np.isnan(rel[b, 15]) and not np.isnan(rel[b, 2]):
            pub.append(rel[b, 15] - rel[b, 1])
        for p in range(3):
            e = rel[b, 1 + 5 * p: 6 + 5 * p]
            if np.isnan(e[0]):
                continue
            loop_ends.append((b, p, e[0]))
            if not np.isnan(e[1]):      # contributor: stores issued, fenced, counted in
                contrib.append(e[3] - e[0])
                stores.append(e[1] - e[0])
                fence.append(e[2] - e[1] if not np.isnan(e[2]) else e[3] - e[1])   # wg_relfence: to counted in
            elif not np.isnan(e[2]):    # finisher: waited, loaded
                wait.append(e[2] - e[0])
                load.append(e[3] - e[2])
            if not np.isnan(e[4]):
                epi.append(e[4] - e[3])
    last_loop = np.array([max(t for bb, _, t in loop_ends if bb == b) for b in range(pl.grid)])
    cb = int(np.nanargmax(end))
    out = dict(span=span, start_skew=np.nanmax(rel[:, 0]), compute_done=last_loop.max(),
               loop_end_med=np.median(last_loop), loop_end_min=last_loop.min(),
               tail=span - last_loop.max())
    for name, xs in (("wait", wait), ("load", load), ("contrib", contrib), ("stores", stores),
                     ("fence", fence), ("pub", pub), ("epi", epi)):
        out[name + "_med"], out[name + "_max"] = (np.median(xs), max(xs)) if xs else (0, 0)
    if not quiet:
        print(f"  critical block {cb}: " + ", ".join(
            f"{i}:{v:.2f}" for i, v in enumerate(rel[cb]) if not np.isnan(v)))
        s0, s1 = cb * pl.iters, min(cb * pl.iters + pl.iters, pl.total_iters)
        print(f"    its range [{s0}, {s1}) of {pl.total_iters} steps, K-tiles {kt}: tiles {s0 // kt}..{(s1 - 1) // kt}")
        order = np.argsort(last_loop)
        print("  blocks' last loop ends (us): " + " ".join(f"{last_loop[i]:.2f}" for i in order[::max(1, pl.grid // 12)]))
        d = np.diff(np.unique(st[st > 0]))
        print(f"  timer: smallest step between distinct stamps {d[d > 0].min() if d.size else 0} ns")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", default="8B qkv", choices=list(LAYERS))
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--act", default="float16")
    ap.add_argument("--samples", type=int, default=7)
    a = ap.parse_args()
    import cupy as cp

    import jitmarlin
    from jitmarlin import launch, planner
    from jitmarlin.problem import Problem
    from jitmarlin.profiles import live_profile

    k, n = LAYERS[a.layer]
    rng = np.random.default_rng()
    w = rng.standard_normal((n, k), dtype=np.float32) * 0.02
    qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype=a.act)
    pl = planner.plan(live_profile(0), Problem(a.m, n, k, a.act, "uint4b8", 128))
    spec = pl.spec
    need = pl.grid * spec.tile_m * spec.tile_n + pl.grid * EV * 2
    x = cp.asarray(rng.standard_normal((a.m, k), dtype=np.float32)).astype(a.act)
    out = cp.empty((a.m, n), dtype=a.act)
    for _ in range(20):
        jitmarlin.linear(x, qw, out=out)
    cp.cuda.Device().synchronize()
    # the calls' stream's workspace (launch.workspace: one a device and stream; -1: graphs')
    ws = [v for (dev, sp), v in launch._workspaces.items() if sp != -1]
    assert len(ws) == 1, f"{len(ws)} workspaces: {list(launch._workspaces)}"
    ws = ws[0]
    if need > ws.capacity[1]:
        raise SystemExit(f"{spec.name}: no room for the stamps past {pl.grid} slots")
    region = ws.partials[pl.grid * spec.tile_m * spec.tile_n:][: pl.grid * EV * 2].view(cp.uint64).reshape(pl.grid, EV)
    print(f"{a.layer} M={a.m} {a.act}: {spec.name} grid {pl.grid} iters {pl.iters} whole {pl.whole} "
          f"k_tiles {pl.k_tiles} tiles {pl.m_chunks * pl.n_tiles}")
    rows = []
    for i in range(a.samples):
        region.fill(0)
        cp.cuda.Device().synchronize()
        jitmarlin.linear(x, qw, out=out)
        cp.cuda.Device().synchronize()
        st = cp.asnumpy(region)
        rows.append(analyse(st, pl, quiet=i != a.samples - 1))
    keys = list(rows[0])
    print("  median of %d launches (us): " % a.samples + ", ".join(f"{k} {np.median([r[k] for r in rows]):.2f}" for k in keys))


if __name__ == "__main__":
    main()
