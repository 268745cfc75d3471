"""Shared measurement code for tools/bench and tools/sweep (see ../shared/BENCH.md): shapes and
anchors, the peers' operands (tinygemm, gemlite), and the pure functions that turn rows into
ratios, a markdown table and issue 6's targets (tested on the CPU in tests/test_bench_tool.py)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from jitmarlin.service.bench import (  # noqa: E402
    BENCH_QTYPES,
    Timer,
    copies_needed,
    copy_bandwidth,
    draw_values,
    floor_us,
    host_overhead,
    qtype_group,
    random_weights,
    weight_bytes,
)

__all__ = [
    "SHAPES",
    "IST_MARLIN",
    "BENCH_CUBLAS",
    "BEST_PEERS",
    "FLOOR_TARGET_SHAPES",
    "select_shapes",
    "anchors_apply",
    "drop_foreign_anchors",
    "make_tinygemm",
    "load_gemlite",
    "make_gemlite",
    "gemlite_config_source",
    "save_gemlite_configs",
    "single_call_ms",
    "kernel_name",
    "best_peer",
    "row_ratios",
    "markdown",
    "evaluate_targets",
    "format_targets",
    "merge_rows",
    "Timer",
    "copies_needed",
    "copy_bandwidth",
    "floor_us",
    "host_overhead",
    "random_weights",
    "draw_values",
    "parse_gpu_state",
    "gpu_state",
    "thermal_slowdown",
    "BENCH_QTYPES",
    "qtype_group",
    "weight_bytes",
    "write_json",
    "INT4_ONLY_PEERS",
    "row_qtype",
]

SHAPES = {
    "L3-8B qkv": (4096, 6144),
    "L3-8B o": (4096, 4096),
    "L3-8B gate_up": (4096, 28672),
    "L3-8B down": (14336, 4096),
    "L3-70B qkv": (8192, 10240),
    "L3-70B o": (8192, 8192),
    "L3-70B gate_up": (8192, 57344),
    "L3-70B down": (28672, 8192),
}
# IST Marlin (fp16, g128, H100 80GB HBM3, graph replay, weights past L2), BENCH.md, in µs.
IST_MARLIN = {
    "L3-8B qkv": {1: 11.5, 16: 11.8, 64: 25.1, 256: 41.4, 1024: 139.9, 4096: 584.9},
    "L3-8B o": {1: 10.9, 16: 11.4, 64: 24.9, 256: 29.7, 1024: 93.5, 4096: 382.7},
    "L3-8B gate_up": {1: 30.7, 16: 32.8, 64: 48.6, 256: 165.4, 1024: 631.2, 4096: 2902.9},
    "L3-8B down": {1: 19.3, 16: 20.7, 64: 42.1, 256: 94.0, 1024: 314.9, 4096: 1336.5},
    "L3-70B qkv": {1: 23.8, 16: 24.4, 64: 42.4, 256: 122.5, 1024: 467.2, 4096: 2271.6},
    "L3-70B o": {1: 24.8, 16: 25.0, 64: 46.1, 256: 130.4, 1024: 443.1, 4096: 1644.6},
    "L3-70B gate_up": {1: 113.6, 16: 115.7, 64: 187.8, 256: 665.3, 1024: 2672.3, 4096: 10957.5},
    "L3-70B down": {1: 57.7, 16: 58.5, 64: 99.5, 256: 331.7, 1024: 1255.4, 4096: 5491.5},
}
# cuBLAS fp16 of the same BENCH.md run, to compare ratios rather than absolute times.
BENCH_CUBLAS = {
    "L3-8B qkv": {1: 21.2, 16: 21.9, 64: 22.2},
    "L3-8B o": {1: 15.1, 16: 17.0, 64: 15.2},
    "L3-8B gate_up": {1: 88.3, 16: 83.5, 64: 100.9},
    "L3-8B down": {1: 44.2, 16: 45.3, 64: 46.9},
    "L3-70B qkv": {1: 62.1, 16: 64.6, 64: 61.6},
    "L3-70B o": {1: 48.1, 16: 48.3, 64: 49.2},
    "L3-70B gate_up": {1: 309.5, 16: 320.3, 64: 350.4},
    "L3-70B down": {1: 159.1, 16: 161.1, 64: 168.7},
}


def select_shapes(text):
    if text == "all":
        return dict(SHAPES)
    if text in ("8b", "70b"):
        return {k: v for k, v in SHAPES.items() if text.upper() in k.split()[0].upper()}
    out = {}
    named = {kn: name for name, kn in SHAPES.items()}
    for part in text.split(","):
        if part in SHAPES:
            out[part] = SHAPES[part]
        else:
            k, n = part.lower().split("x")
            kn = (int(k), int(n))
            # a Llama layer's K x N keeps its name, and with it the IST Marlin anchor
            out[named.get(kn, part)] = kn
    return out


def candidate_filter(paths: str = "", tiles: str = "", stages: str = ""):
    """tools/sweep's selection of candidate specs: paths ("sm90,dequant,gemv": code paths, routes,
    or the decode gemv kernels), tiles ("4x8,1x16x16": fused tiles as TMxTN or TMxTNxTK), stages
    ("3,4": pipeline depths); empty = all. The gemv kernels have neither tiles nor stages: a tile
    or stage filter leaves them out. Returns a predicate on specs."""
    keep_paths = set(filter(None, paths.split(",")))
    keep_tiles = {tuple(int(v) for v in t.split("x")) for t in tiles.split(",") if t}
    keep_depths = {int(v) for v in stages.split(",") if v}

    def wanted(s) -> bool:
        gemv = not hasattr(s, "stages")
        if (
            keep_paths
            and s.path not in keep_paths
            and getattr(s, "route", "") not in keep_paths
            and not (gemv and "gemv" in keep_paths)
        ):
            return False
        if gemv:
            return not keep_tiles and not keep_depths
        if getattr(s, "route", "") != "fused":
            return True
        if keep_tiles and (s.tm, s.tn) not in keep_tiles and (s.tm, s.tn, s.tk) not in keep_tiles:
            return False
        return not keep_depths or s.stages in keep_depths

    return wanted


def make_tinygemm(torch, n, k, g, ncopies):
    """torch's int4 tinygemm operands: (packed weight, scales_and_zeros), `ncopies` of them."""
    out = []
    for _ in range(ncopies):
        w = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        w_u8 = (w[:, ::2] << 4 | w[:, 1::2]).to(torch.uint8)
        packed = torch._convert_weight_to_int4pack(w_u8, 8)
        sz = torch.rand(k // g, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        out.append((packed, sz))
    return out


# --- gemlite (mobiusml/gemlite, Triton) -------------------------------------------------------

# How much of gemlite's autotuning runs on a config-cache miss. A (shape, M) that gemlite's config
# cache holds (its shipped configs/<gpu>.json, plus any --gemlite-config file) runs that config
# in every mode: gemlite consults the cache while pruning. "short": gemlite's fixed default
# configs for its GEMM kernels (two each, timed once) and its "fast" list for the M <= 4 GEMV,
# whose default list has a single config (Triton prunes only lists of more than one, so a single
# config would bypass the cache). "fast" is gemlite's own default, "max" its long search.
GEMLITE_AUTOTUNE = {
    "short": {
        "GEMV": "fast",
        "GEMV_REVSPLITK": "fast",
        "GEMV_SPLITK": "fast",
        "GEMM_SPLITK": "default",
        "GEMM": "default",
    },
    "fast": "fast",
    "max": "max",
}
# gemlite's matmul types and, for each, (kernel module, class) under gemlite.triton_kernels.
_GEMLITE_KERNELS = {
    "GEMV": ("gemv_kernels", "gemv"),
    "GEMV_REVSPLITK": ("gemv_revsplitK_kernels", "gemv_revsplitK"),
    "GEMV_SPLITK": ("gemv_splitK_kernels", "gemv_splitK"),
    "GEMM_SPLITK": ("gemm_splitK_kernels", "gemm_splitK"),
    "GEMM": ("gemm_kernels", "gemm"),
}


def _one_line(e) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def _version_tuple(v: str):
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def load_gemlite(autotune: str = "short", config_files=()):
    """Import gemlite and set its autotuning (GEMLITE_AUTOTUNE); load extra config-cache files
    (those that exist). Returns (module, info dict). Raises RuntimeError with a one-line reason
    when gemlite cannot be used here (not installed, triton missing, import fails)."""
    info = {"autotune": autotune}
    if importlib.util.find_spec("tqdm") is None:
        # gemlite.helper imports tqdm for one progress bar; the GPU machine may not have it.
        stub = types.ModuleType("tqdm")
        stub.tqdm = lambda it=None, *a, **k: it
        sys.modules["tqdm"] = stub
        info["tqdm"] = "stub"
    try:
        import triton
    except Exception as e:
        raise RuntimeError(f"triton is not importable ({_one_line(e)})") from None
    info["triton"] = getattr(triton, "__version__", "?")
    if importlib.util.find_spec("gemlite") is None:
        raise RuntimeError("gemlite is not installed (pip wheel --no-deps gemlite; see tools/gpu_session.sh)")
    try:
        gl = importlib.import_module("gemlite")
        core = importlib.import_module("gemlite.core")
    except Exception as e:
        raise RuntimeError(f"import gemlite failed ({_one_line(e)}; triton {info['triton']})") from None
    info["version"] = getattr(gl, "__version__", "?")
    if _version_tuple(info["triton"]) < (3, 6):
        info["warning"] = f"gemlite {info['version']} asks for triton>=3.6.0, this is {info['triton']}"
    shipped = getattr(core, "selected_tag", None)
    info["config_shipped"] = os.path.basename(shipped) if shipped else None
    try:
        gl.set_autotune(GEMLITE_AUTOTUNE[autotune])
        info["config_files"] = [
            f for f in config_files if f and os.path.exists(f) and gl.load_config(f, print_error=False)
        ]
    except Exception as e:
        raise RuntimeError(f"gemlite set-up failed ({_one_line(e)})") from None
    return gl, info


def _gemlite_rel_err(torch, layer, q, s, z, g, tdt, m):
    """|y - ref| / |ref| of one gemlite call at M = m against x @ W.T in fp32, W = (q - z) * s."""
    n, k = q.shape
    x = torch.randn(m, k, device=q.device, dtype=tdt)
    y = layer(x).float()
    zf = z.float().view(n, k // g, 1) if hasattr(z, "float") else float(z)
    w = ((q.view(n, k // g, g).float() - zf) * s.float().view(n, k // g, 1)).view(n, k)
    ref = x.float() @ w.t()
    del w
    return float((y - ref).norm() / ref.norm())


def make_gemlite(torch, n, k, g, ncopies, act="float16", zeros="group", check_m=16):
    """`ncopies` gemlite 4-bit layers (GemLiteLinearTriton, group size g, act in and out) of random
    codes and scales, `ncopies` so that together they pass 4x L2 as for the other peers.
    zeros="group": a zero point per group, the HQQ-style asymmetric layout gemlite is used with,
    built by gemlite's A16Wn helper (W = (q - z) * s; gemlite stores -z*s and uses an fma).
    zeros="shift": no zero-point tensor, W = (q - 8) * s, the uint4b8 format jitmarlin runs
    (GemLiteLinearTriton.pack with an integer zero). The first copy is checked at M = check_m
    against a dequantized reference (RuntimeError if off): its error is layers[0].bench_rel_err.
    Call a layer as layer(x)."""
    from gemlite.core import DType, GemLiteLinearTriton
    from gemlite.helper import A16Wn

    tdt = torch.float16 if act == "float16" else torch.bfloat16
    dev = f"cuda:{torch.cuda.current_device()}"
    layers = []
    for i in range(ncopies):
        q = torch.randint(0, 16, (n, k), dtype=torch.uint8, device=dev)
        s = (torch.rand(n, k // g, device=dev) * 0.01 + 0.001).to(tdt)
        if zeros == "group":
            z = torch.randint(0, 16, (n, k // g), device=dev).to(tdt)
            layer = A16Wn(device=dev, dtype=tdt).from_weights(q, s, z, W_nbits=4, group_size=g)
        elif zeros == "shift":
            z = 8
            gdt = DType.FP16 if act == "float16" else DType.BF16
            layer = GemLiteLinearTriton(
                4, group_size=g, in_features=k, out_features=n, input_dtype=gdt, output_dtype=gdt
            )
            layer.pack(q, s, 8)
        else:
            raise ValueError(f"zeros must be 'group' or 'shift', not {zeros!r}")
        if i == 0 and check_m:
            err = _gemlite_rel_err(torch, layer, q, s, z, g, tdt, check_m)
            if not err <= 0.02:
                raise RuntimeError(f"gemlite output check failed at M={check_m}: relative error {err:.3g}")
            layer.bench_rel_err = err
        layers.append(layer)
        del q, s, z
    return layers


def gemlite_config_source(m, n, k, g):
    """Which gemlite kernel runs M x (K, N) and whether its config comes from gemlite's config
    cache or from autotuning: e.g. "GEMM_SPLITK (cached config)". gemlite keys its cache by
    (M bucket, N, K, group, codes per 32-bit word = 8, type id); bf16 shares fp16's type id."""
    core = importlib.import_module("gemlite.core")
    mt = core.get_matmul_type(m, 4)
    sig = str((core.utils.get_closest_m(m), n, k, g, 8, core.DType.FP16.value * 100 + 4))
    cached = sig in core.GEMLITE_TRITON_CONFIG_CACHE.get(mt, {})
    return f"{mt} ({'cached config' if cached else 'autotuned'})"


def save_gemlite_configs(path):
    """Write the configs gemlite's autotuner settled on in this run (cached ones included), in
    gemlite's config-cache format, so that a later run loads them (--gemlite-config) instead of
    tuning again. Returns the number of entries."""
    core = importlib.import_module("gemlite.core")
    out = {}
    for mt, (mod, cls) in _GEMLITE_KERNELS.items():
        kernels = getattr(importlib.import_module(f"gemlite.triton_kernels.{mod}"), cls).kernel
        for kern in kernels:
            if hasattr(kern, "cache"):
                out.setdefault(mt, {}).update(core.cache_kernel_config(kern, 6))
    import json

    with open(path, "w") as f:
        json.dump(out, f, indent=0)
    return sum(len(v) for v in out.values())


def single_call_ms(torch, fn):
    """GPU time (ms) of one eager call of fn, after one call to warm it (compile, autotune)."""
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1)


# The GPU's own record of heat: nvidia-smi's "Clocks Event Reasons Counters" (microseconds of
# slowdown since boot, per reason) and its temperatures. A GPU that throttles for heat during a
# run streams memory slower as it warms (an H100 with its HBM at 70 C when idle ran 70B gate_up
# at M = 1 in 127 us, then 248 us, where a cool one takes 90): such a run is not a measurement.
# Power capping is not in the list: at large M the H100 runs at its cap by design (PERF.md 26).
THERMAL_COUNTERS = ("SW Thermal Slowdown", "HW Thermal Slowdown", "HW Power Braking")


def parse_gpu_state(text):
    """Temperatures (C) and slowdown counters (us) from `nvidia-smi -q -d PERFORMANCE,TEMPERATURE`
    output for one GPU: {"gpu_temp_c", "mem_temp_c", "slowdown_us": {reason: us}}; a field the
    driver does not report is None (counters: absent)."""
    out = {"gpu_temp_c": None, "mem_temp_c": None, "slowdown_us": {}}
    section = ""
    for line in text.splitlines():
        if ":" not in line:
            section = line.strip()
            continue
        key, _, val = (part.strip() for part in line.partition(":"))
        if not val:
            section = key
            continue
        num = val.split()[0]
        if key == "GPU Current Temp" and num.isdigit():
            out["gpu_temp_c"] = int(num)
        elif key == "Memory Current Temp" and num.isdigit():
            out["mem_temp_c"] = int(num)
        elif section.endswith("Reasons Counters") and val.endswith(" us") and num.isdigit():
            out["slowdown_us"][key] = int(num)
    return out


def gpu_state(torch, dev):
    """parse_gpu_state of CUDA device `dev` now, through nvidia-smi (found by PCI bus id); None
    where nvidia-smi is missing or fails (the bench then records no state)."""
    import subprocess

    try:
        pr = torch.cuda.get_device_properties(dev)
        ident = f"{pr.pci_domain_id:08X}:{pr.pci_bus_id:02X}:{pr.pci_device_id:02X}.0"
    except Exception:
        ident = str(dev)
    try:
        text = subprocess.run(
            ["nvidia-smi", "-q", "-d", "PERFORMANCE,TEMPERATURE", "-i", ident],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except Exception:
        return None
    return parse_gpu_state(text)


def thermal_slowdown(before, after):
    """Microseconds of heat slowdown (THERMAL_COUNTERS) between two gpu_state records, per reason
    that grew; {} where none did or either record is missing."""
    if not before or not after:
        return {}
    out = {}
    for name in THERMAL_COUNTERS:
        a, b = before["slowdown_us"].get(name), after["slowdown_us"].get(name)
        if a is not None and b is not None and b > a:
            out[name] = b - a
    return out


def kernel_name(qw, act, m):
    """The kernel (spec name) jitmarlin planned for weight `qw` at (act, M): read from the weight's
    launchers, keyed (device, act, M, stream, pdl). Several streams with different plans join with '/'."""
    names = sorted(
        {
            lz.plan.spec.name
            for key, lz in getattr(qw, "_launchers", {}).items()
            if len(key) >= 3 and key[1] == act and key[2] == m
        }
    )
    return "/".join(names) if names else None


def planner_kernel(device, m, n, k, act, group, qtype="uint4b8"):
    """The kernel the planner picks for the bench's weights (`qtype`) at (M, N, K, act, group) on
    GPU `device`. A row whose measured kernel differs ran a choice the autotuner stored for this
    GPU and M bucket (jitmarlin tune, JITMARLIN_AUTOTUNE=1)."""
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.kernels import planner
    from jitmarlin.kernels.problem import Problem

    return planner.plan(planning_profile(device), Problem(m, n, k, act, qtype, group)).spec.name


# --- rows: ratios, table, targets (pure: no GPU) ----------------------------------------------

# The peers "best peer" is taken over: the IST Marlin anchor of BENCH.md (fp16, not re-measured),
# tinygemm, gemlite, humming. cuBLAS fp16 has its own column and target.
ANCHOR = "ist_marlin_benchmd"
BEST_PEERS = (ANCHOR, "tinygemm", "gemlite", "humming")
# Peers that run 4-bit integer weights only: skipped (with the reason in peers_skipped) for other types.
INT4_ONLY_PEERS = ("tinygemm", "gemlite")
INT4_QTYPES = ("uint4b8", "uint4")


def row_qtype(row) -> str:
    """A row's weight type (rows from before --quant: uint4b8)."""
    return row.get("qtype") or "uint4b8"


def anchors_apply(gpu) -> bool:
    """Whether BENCH.md's IST Marlin times stand as a peer for a run on `gpu` (its device name):
    they were measured on an H100, so only on an H100. On any other GPU (an H200's faster memory
    included) they would set jitmarlin against another GPU's times."""
    return isinstance(gpu, str) and "H100" in gpu


def drop_foreign_anchors(run: dict) -> int:
    """Remove the IST Marlin anchor from the rows of `run` (a tools/bench JSON) unless it was made
    on an H100 (runs before session 42 carried it on every GPU). Returns how many rows had it."""
    if anchors_apply(run.get("gpu")):
        return 0
    dropped = 0
    for r in run.get("rows", []):
        if r.get("peers", {}).pop(ANCHOR, None) is not None:
            r.get("peers_method", {}).pop(ANCHOR, None)
            dropped += 1
    return dropped


# Issue 6 target (a): the layers of >= 29 MB of int4 weights, as the issue lists them.
FLOOR_TARGET_SHAPES = ("L3-8B gate_up", "L3-8B down", "L3-70B qkv", "L3-70B gate_up", "L3-70B down")


def _pos(v):
    return v if isinstance(v, (int, float)) and v > 0 and math.isfinite(v) else None


def best_peer(row, names=BEST_PEERS):
    """(name, µs) of the fastest peer of `names` in row["peers"], or (None, None)."""
    cands = [(v, k) for k, v in (row.get("peers") or {}).items() if k in names and _pos(v)]
    if not cands:
        return None, None
    v, k = min(cands)
    return k, v


def row_ratios(row):
    """x_floor, best_peer (name), best_peer_us, x_best_peer, x_cublas, cublas_over_jitmarlin; None
    where a time is missing."""
    t = _pos(row.get("jitmarlin_us"))
    fl = _pos(row.get("floor_us"))
    cb = _pos(row.get("cublas_fp16_us"))
    name, bp = best_peer(row)
    return {
        "x_floor": t / fl if t and fl else None,
        "best_peer": name,
        "best_peer_us": bp,
        "x_best_peer": t / bp if t and bp else None,
        "x_cublas": t / cb if t and cb else None,
        "cublas_over_jitmarlin": cb / t if t and cb else None,
    }


def merge_rows(*row_lists):
    """Rows of several runs, one per (shape, K, N, M, act, qtype): a later run's row replaces an
    earlier one in place."""
    out = {}
    for rows in row_lists:
        for r in rows:
            out[(r["shape"], r["K"], r["N"], r["M"], r["act"], row_qtype(r))] = r
    return list(out.values())


def _f(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def _peer_cell(row, name):
    v = (row.get("peers") or {}).get(name)
    if v is None:
        return "skip" if name in (row.get("peers_skipped") or {}) else "-"
    eager = (row.get("peers_method") or {}).get(name) == "eager"
    return f"{v:.1f}{' (eager)' if eager else ''}"


def _kernel_cell(row):
    k = row.get("kernel") or "-"
    return f"{k} (tuned; planner: {row['planner_kernel']})" if row.get("planner_kernel") else k


def markdown(rows):
    """One line per row: jitmarlin time, × floor, × best peer, × cuBLAS fp16, and the peers; a qtype
    column where the rows hold more than one weight type."""
    multi = len({row_qtype(r) for r in rows}) > 1
    lines = [
        "| layer (K×N) | " + ("qtype | " if multi else "") + "act | M | kernel | jitmarlin µs | floor µs "
        "| × floor | best peer | × best peer | cuBLAS fp16 µs | × cuBLAS | humming µs | tinygemm µs "
        "| gemlite µs | IST Marlin µs (BENCH.md) |",
        "|---|" + ("---|" if multi else "") + "---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        q = row_ratios(r)
        best = "-" if q["best_peer"] is None else f"{q['best_peer'].replace('_benchmd', '')} {q['best_peer_us']:.1f}"
        qt = f"{row_qtype(r)} | " if multi else ""
        lines.append(
            f"| {r['shape']} ({r['K']}×{r['N']}) | {qt}{r['act']} | {r['M']} | {_kernel_cell(r)} "
            f"| {_f(r.get('jitmarlin_us'))} | {_f(r.get('floor_us'))} | {_f(q['x_floor'], 2)} | {best} "
            f"| {_f(q['x_best_peer'], 2)} | {_f(r.get('cublas_fp16_us'))} | {_f(q['x_cublas'], 2)} "
            f"| {_peer_cell(r, 'humming')} | {_peer_cell(r, 'tinygemm')} | {_peer_cell(r, 'gemlite')} | {_peer_cell(r, 'ist_marlin_benchmd')} |"
        )
    return "\n".join(lines)


def _where(r, value, **extra):
    return {
        "shape": r["shape"],
        "K": r["K"],
        "N": r["N"],
        "M": r["M"],
        "act": r["act"],
        "qtype": row_qtype(r),
        "value": round(value, 3),
        "kernel": r.get("kernel"),
        **extra,
    }


def _evaluate(rows, text, applies, key, op, thr):
    evaluated = failing = missing = 0
    worst = None
    for r in rows:
        if not applies(r):
            continue
        v = row_ratios(r)[key]
        if v is None:
            missing += 1
            continue
        evaluated += 1
        failing += not (v <= thr if op == "<=" else v >= thr)
        bad = v if op == "<=" else -v
        if worst is None or bad > worst[0]:
            worst = (bad, r, v)
    return {
        "text": text,
        "threshold": f"{op} {thr}",
        "pass": None if not evaluated else failing == 0,
        "evaluated": evaluated,
        "failing": failing,
        "missing": missing,
        "worst": None if worst is None else _where(worst[1], worst[2]),
    }


def _evaluate_bf16(rows, tol=0.05):
    pairs = {}
    for r in rows:
        pairs.setdefault((r["shape"], r["K"], r["N"], r["M"], row_qtype(r)), {})[r["act"]] = r
    evaluated = failing = missing = 0
    worst = None
    for acts in pairs.values():
        h, b = acts.get("float16"), acts.get("bfloat16")
        th, tb = (_pos(h.get("jitmarlin_us")) if h else None), (_pos(b.get("jitmarlin_us")) if b else None)
        if not (th and tb):
            missing += 1
            continue
        v = tb / th
        evaluated += 1
        failing += abs(v - 1) > tol
        if worst is None or abs(v - 1) > worst[0]:
            worst = (abs(v - 1), b, v, th, tb)
    return {
        "text": "bf16 within 5% of fp16 (jitmarlin, same shape, M and weight type)",
        "threshold": f"|bf16/fp16 - 1| <= {tol}",
        "pass": None if not evaluated else failing == 0,
        "evaluated": evaluated,
        "failing": failing,
        "missing": missing,
        "worst": None
        if worst is None
        else _where(worst[1], worst[2], act="bfloat16/float16", fp16_us=worst[3], bf16_us=worst[4]),
    }


def evaluate_targets(rows):
    """Issue 6's targets on `rows`: {id: {text, threshold, pass (None: no row to judge), evaluated,
    failing, missing (rows it applies to that lack a time), worst (the row furthest from it)}}."""
    return {
        "a": _evaluate(
            rows,
            "M in {1,16}: jitmarlin <= 1.15x the byte floor on the >= 29 MB layers "
            "(8B gate_up, 8B down, 70B qkv, 70B gate_up, 70B down)",
            lambda r: r["M"] in (1, 16) and r["shape"] in FLOOR_TARGET_SHAPES,
            "x_floor",
            "<=",
            1.15,
        ),
        "b": _evaluate(
            rows,
            "M in {1,16}: jitmarlin <= 0.85x the best peer, all shapes",
            lambda r: r["M"] in (1, 16),
            "x_best_peer",
            "<=",
            0.85,
        ),
        "c": _evaluate(
            rows, "M = 64: jitmarlin <= 0.85x the best peer", lambda r: r["M"] == 64, "x_best_peer", "<=", 0.85
        ),
        "d": _evaluate(rows, "M >= 256: jitmarlin <= 1.0x cuBLAS fp16", lambda r: r["M"] >= 256, "x_cublas", "<=", 1.0),
        "e": _evaluate(
            rows,
            "M = 4096: cuBLAS fp16 time / jitmarlin time >= 0.8",
            lambda r: r["M"] == 4096,
            "cublas_over_jitmarlin",
            ">=",
            0.8,
        ),
        "f": _evaluate_bf16(rows),
    }


def format_targets(targets):
    lines = ["## Targets (issue 6), from these rows"]
    for tid, t in targets.items():
        status = "n/a " if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        w = t["worst"]
        qt = "" if not w or w.get("qtype", "uint4b8") == "uint4b8" else f" {w['qtype']}"
        worst = "" if not w else f"; worst {w['value']:.3f} at {w['shape']} M={w['M']} {w['act']}{qt}"
        gap = f"; {t['missing']} rows without the times to judge" if t["missing"] else ""
        lines.append(
            f"({tid}) {status} {t['text']} [{t['threshold']}]: "
            f"{t['evaluated'] - t['failing']}/{t['evaluated']} rows meet it{worst}{gap}"
        )
    return "\n".join(lines)


def write_json(path, result):
    """result with its evaluated targets to path (atomically: a reader never sees half a file)."""
    result["targets"] = evaluate_targets(result["rows"])
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, path)
