"""Fleet prewarm: model manifests -> layer shapes -> every kernel a fleet of GPUs will ask for.

A manifest (cache/<model>.json in a checkout, jitmarlin/manifests/ in a wheel) lists a model's
linear layers at tensor-parallel degree 1 and the TP degrees it is served with. expand_shapes()
splits the layers per TP degree; prewarm_fleet() plans every (GPU profile, shape, M, activation,
quant type, group size) with the same planner linear() uses, keeps one compile per distinct
(spec, arch) and runs the compiles in worker processes. No GPU is needed anywhere.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Callable, Iterable

from jitmarlin.errors import InputError, JitMarlinError
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import KernelCache, default_cache
from jitmarlin.jit.launch import PDL_MIN_CC
from jitmarlin.jit.profiles import DeviceProfile, get_profile
from jitmarlin.kernels.spec import AnySpec
from jitmarlin.ops.linear import PrewarmResult, plan_for
from jitmarlin.service import fleet_moe
from jitmarlin.weights import qtypes
from jitmarlin.weights.qtypes import ACT_DTYPES, GROUP_SIZES, get_qtype

_PKG = Path(__file__).resolve().parents[1]  # the jitmarlin package folder

# Layer dims are multiples of this (qtypes.FEATURE_MULTIPLE); the planner sees them padded to
# the kernel's tiles (qtypes.kernel_dims), as linear() does.
SHAPE_MULTIPLE = qtypes.FEATURE_MULTIPLE
SPLITS = ("column", "row")


# ---- manifests -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One linear layer at TP=1: W has shape (n, k) = (out_features, in_features).

    split: 'column' (qkv, gate_up: each rank holds n / tp output features) or 'row' (o, down: each
    rank holds k / tp input features).
    """

    name: str
    k: int
    n: int
    split: str


@dataclass(frozen=True)
class Manifest:
    """A model's quantized linear layers and the TP degrees it is prewarmed for."""

    name: str
    layers: tuple[Layer, ...]
    tp: tuple[int, ...]
    hf_id: str = ""
    hidden_size: int = 0
    num_attention_heads: int = 0  # 0: unknown (no head check when splitting)
    num_key_value_heads: int = 0
    path: str = ""
    moe: fleet_moe.MoEConfig | None = None  # the routed experts (fleet_moe), if the model has them


@dataclass(frozen=True)
class Shape:
    """One GEMM weight shape to prewarm: K = in_features, N = out_features (per rank), plus where
    it comes from (e.g. 'llama-3-8b tp=2 down_proj'), for messages."""

    k: int
    n: int
    label: str = ""


@dataclass(frozen=True)
class Skipped:
    """A shape left out before planning, and why (it would fail on every GPU)."""

    label: str
    k: int
    n: int
    reason: str
    group_size: int | None = None


def manifests_dir() -> Path:
    """The manifest folder: jitmarlin/manifests in an installed wheel, cache/ in a checkout."""
    for cand in (_PKG / "manifests", _PKG.parent / "cache"):
        if cand.is_dir() and any(cand.glob("*.json")):
            return cand
    raise FileNotFoundError("jitmarlin prewarm manifests not found next to the package or the checkout")


def list_models() -> list[str]:
    """Names of the shipped manifests (file stems), sorted."""
    return sorted(p.stem for p in manifests_dir().glob("*.json"))


def _find_manifest(name: str) -> Path:
    """Path of the shipped manifest called `name` (file stem, model name or HF id; any case)."""
    want = name.strip().lower()
    files = sorted(manifests_dir().glob("*.json"))
    for p in files:
        if p.stem.lower() == want:
            return p
    for p in files:
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if want in (str(d.get("model", "")).lower(), str(d.get("hf_id", "")).lower()):
            return p
    raise InputError(
        f"unknown model manifest {name!r}; known: {', '.join(list_models())} (or give a manifest file path)"
    )


def _int(d: dict, key: str, where: str, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (v == 0 and default is None):
        raise InputError(f"{where}: {key!r} must be a positive integer, got {v!r}")
    return v


def parse_manifest(d: dict, where: str = "manifest") -> Manifest:
    """Validate a manifest dict (the JSON format documented in cache/README.md)."""
    if not isinstance(d, dict):
        raise InputError(f"{where}: a manifest is a JSON object")
    if d.get("format", 1) != 1:
        raise InputError(f"{where}: unknown manifest format {d.get('format')!r} (this jitmarlin reads 1)")
    name = d.get("model")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: 'model' (the model name) is required")
    raw_layers = d.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers:
        raise InputError(f"{where}: 'layers' must be a non-empty list")
    layers = []
    for i, ld in enumerate(raw_layers):
        at = f"{where}: layers[{i}]"
        if not isinstance(ld, dict) or not isinstance(ld.get("name"), str):
            raise InputError(f"{at} must be an object with a 'name'")
        split = ld.get("split")
        if split not in SPLITS:
            raise InputError(f"{at} ({ld['name']}): 'split' must be 'column' or 'row', got {split!r}")
        layers.append(Layer(ld["name"], _int(ld, "in_features", at), _int(ld, "out_features", at), split))
    tp = d.get("tp", [1])
    if not isinstance(tp, list) or not tp or not all(isinstance(t, int) and t >= 1 for t in tp):
        raise InputError(f"{where}: 'tp' must be a list of positive integers, got {tp!r}")
    return Manifest(
        name=name,
        layers=tuple(layers),
        tp=tuple(tp),
        hf_id=str(d.get("hf_id", "")),
        hidden_size=_int(d, "hidden_size", where, 0),
        num_attention_heads=_int(d, "num_attention_heads", where, 0),
        num_key_value_heads=_int(d, "num_key_value_heads", where, 0),
        path=where,
        moe=fleet_moe.parse_moe(d.get("moe"), where),
    )


def load_manifest(name_or_path: str | os.PathLike) -> Manifest:
    """A shipped manifest by name ('llama-3-8b', also its HF id) or any manifest file by path."""
    text = str(name_or_path)
    p = Path(text).expanduser()
    # HF ids contain '/', so only an existing file or a *.json name is taken as a path.
    if not (p.is_file() or text.endswith(".json")):
        p = _find_manifest(text)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise InputError(f"cannot read manifest {p}: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"manifest {p} is not valid JSON: {e}") from None
    return parse_manifest(d, str(p))


def _tp_problem(m: Manifest, tp: int) -> str | None:
    """Why `m` cannot be split over `tp` ranks (None if it can). Serving engines give each rank an
    equal share of the attention heads, so TP must divide the head counts for N / tp to be the
    per-rank qkv width (with fewer KV heads than ranks they replicate KV heads instead)."""
    for count, what in ((m.num_attention_heads, "attention heads"), (m.num_key_value_heads, "KV heads")):
        if count and count % tp:
            return f"TP={tp} does not divide the {count} {what}"
    return None


def expand_shapes(manifest: Manifest, tp: Iterable[int] | None = None) -> tuple[list[Shape], list[Skipped]]:
    """Per-rank (K, N) shapes of every layer for each TP degree (default: the manifest's).

    Column-parallel layers divide N by tp, row-parallel layers divide K by tp. Returns
    (shapes, skipped): a degree that does not split a layer evenly is skipped with its reason.
    Shapes are not deduplicated here (labels say where each came from).
    """
    shapes, skipped = [], []
    for t in manifest.tp if tp is None else tuple(tp):
        if t < 1:
            raise InputError(f"TP degrees must be >= 1, got {t}")
        why = _tp_problem(manifest, t)
        for layer in manifest.layers:
            label = f"{manifest.name} tp={t} {layer.name}"
            split_dim = layer.n if layer.split == "column" else layer.k
            if why is None and split_dim % t:
                why_layer = f"TP={t} does not divide {'N' if layer.split == 'column' else 'K'}={split_dim}"
            else:
                why_layer = why
            if why_layer:
                skipped.append(Skipped(label, layer.k, layer.n, why_layer))
            elif layer.split == "column":
                shapes.append(Shape(layer.k, layer.n // t, label))
            else:
                shapes.append(Shape(layer.k // t, layer.n, label))
        if manifest.moe is not None:  # MoEShapes travel with the dense ones to plan_fleet
            if not manifest.hidden_size:
                raise InputError(f"{manifest.path}: a manifest with 'moe' needs 'hidden_size'")
            ms, sk = fleet_moe.expand(
                manifest.moe, manifest.name, manifest.hidden_size, t, t == (manifest.tp if tp is None else tuple(tp))[0]
            )
            shapes += ms
            skipped += [Skipped(label, manifest.hidden_size, 0, why) for label, why in sk]
    return shapes, skipped


def shape_problem(k: int, n: int, group_size: int | None = None) -> str | None:
    """Why no GPU can run a K x N weight (None if one can): the one shape rule linear() and
    quantize() apply too (qtypes.shape_problem). K is padded to whole groups and N, K to the
    kernel's tiles as the weight would be, so group_size no longer matters here."""
    return qtypes.shape_problem(n, k)


# ---- planning ------------------------------------------------------------------------------------


@dataclass
class FleetReport:
    """What prewarm_fleet did.

    results: one PrewarmResult per distinct (kernel, arch); its `profile` lists every profile
    that needs the kernel ('l4,rtx4090'). unsupported: (profile, arch, reason) -> number of
    problems (shape x M x act x quant x group) the planner rejects on that GPU. skipped: shapes
    left out before planning. seconds: wall time.
    """

    results: list[PrewarmResult] = field(default_factory=list)
    unsupported: Counter = field(default_factory=Counter)
    skipped: list[Skipped] = field(default_factory=list)
    archs: dict[str, list[str]] = field(default_factory=dict)  # arch -> profile names
    seconds: float = 0.0
    duplicates: int = 0  # planned problems whose kernel another problem had already asked for

    def count(self, status: str, arch: str | None = None) -> int:
        """Kernels with `status` ('compiled', 'cached', 'failed'), or unsupported problems."""
        if status == "unsupported":
            return sum(c for (_, a, _), c in self.unsupported.items() if arch in (None, a))
        return sum(r.status == status and arch in (None, r.arch) for r in self.results)

    @property
    def failed(self) -> list[PrewarmResult]:
        return [r for r in self.results if r.status == "failed"]


def _profiles(profiles) -> list[DeviceProfile]:
    """DeviceProfiles from names, archs ('sm_90') or profiles; duplicates dropped, order kept.
    ('v100,sm_70' is one profile; an emulated profile that keeps its name but not its limits is
    a second one.)"""
    out: dict[DeviceProfile, None] = {}
    for p in profiles:
        out.setdefault(p if isinstance(p, DeviceProfile) else get_profile(p), None)
    return list(out)


def _as_shape(s) -> Shape:
    if isinstance(s, (Shape, fleet_moe.MoEShape)):
        return s
    k, n = s
    return Shape(int(k), int(n), f"{k}x{n}")


def _check_choices(ms, acts, qtypes, group_sizes) -> None:
    """Fail fast on typos: a bad value would otherwise be counted as 'unsupported' everywhere."""
    for m in ms:
        if not isinstance(m, int) or m < 1:
            raise InputError(f"M buckets must be integers >= 1, got {m!r}")
    for a in acts:
        if a not in ACT_DTYPES:
            raise InputError(f"activation dtype must be float16 or bfloat16, got {a!r}")
    for q in qtypes:
        get_qtype(q)
    for g in group_sizes:
        if g not in GROUP_SIZES + (16,):  # 16: nvfp4's groups
            raise InputError(
                f"group size must be one of {GROUP_SIZES} (-1 = per output channel) or 16 (nvfp4), got {g!r}"
            )


def plan_fleet(profiles, shapes, ms, acts, qtypes, group_sizes, report: FleetReport, pdl: bool = False):
    """Plan every combination; returns {(spec, arch): [profile names]} in first-seen order and
    fills report.unsupported, report.skipped and report.archs. pdl: also the programmatic-
    dependent-launch builds of the fused kernels on sm_90+ (linear(enable_pdl=True))."""
    profs = _profiles(profiles)
    _check_choices(ms, acts, qtypes, group_sizes)
    # The same (K, N) often comes from several layers or TP degrees: plan it once.
    unique: dict[tuple[int, int], Shape] = {}
    repeats: Counter = Counter()
    moe_shapes = []
    for s in map(_as_shape, shapes):
        if isinstance(s, fleet_moe.MoEShape):
            moe_shapes.append(s)
            continue
        if (s.k, s.n) in unique:
            repeats[(s.k, s.n)] += 1
        unique.setdefault((s.k, s.n), s)
    jobs: dict[tuple[AnySpec, str], list[str]] = {}
    for p in profs:
        names = report.archs.setdefault(p.arch, [])
        if p.name not in names:
            names.append(p.name)
    for (k, n), s in unique.items():
        why = shape_problem(k, n)
        if why:
            report.skipped.append(Skipped(s.label, k, n, why))
            continue
        for g in group_sizes:
            for p, m, act, q in product(profs, ms, acts, qtypes):
                try:
                    spec = plan_for(p, m, n, k, act, q, g).spec
                except JitMarlinError as e:
                    report.unsupported[(p.name, p.arch, str(e))] += 1
                    continue
                builds = [spec]
                if pdl and spec.route == "fused" and p.cc >= PDL_MIN_CC:
                    builds.append(replace(spec, pdl=True))
                for b in builds:
                    # a repeated shape asks for each of its kernels once more per repeat
                    report.duplicates += ((b, p.arch) in jobs) + repeats[(k, n)]
                    users = jobs.setdefault((b, p.arch), [])
                    if p.name not in users:
                        users.append(p.name)
    fleet_moe.plan_jobs(profs, moe_shapes, ms, acts, qtypes, group_sizes, report, jobs)
    return jobs


# ---- compiling -----------------------------------------------------------------------------------

_WORKER_CACHES: dict[str, KernelCache] = {}


def _compile(cache: KernelCache, spec: AnySpec, arch: str) -> tuple[str, float, str]:
    """(status, compile seconds, failure reason) for one kernel; never raises."""
    try:
        art, _, status = cache.get(spec, arch)
    except JitMarlinError as e:
        return "failed", 0.0, str(e)
    except Exception as e:  # an NVRTC binding error is still one failed kernel, not a crash
        return "failed", 0.0, f"{type(e).__name__}: {e}"
    if status == "compiled":
        return "compiled", art.seconds, ""
    return "cached", 0.0, ""


def _worker_compile(cache_dir: str, spec: AnySpec, arch: str) -> tuple[str, float, str]:
    """Worker-process entry point: one KernelCache per directory per worker (it keeps the
    diskcache connection open between kernels)."""
    cache = _WORKER_CACHES.get(cache_dir)
    if cache is None:
        cache = _WORKER_CACHES[cache_dir] = KernelCache(cache_dir)
    return _compile(cache, spec, arch)


def _die_with_parent(parent: int) -> None:
    """Worker initializer: end this worker when the prewarm process dies, even by SIGKILL (no
    orphaned compiles). Linux: the kernel sends SIGKILL (prctl PR_SET_PDEATHSIG); elsewhere a
    daemon thread polls the parent pid."""
    import signal

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        import threading

        def watch():
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True, name="jitmarlin-parent-watch").start()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _run_jobs(todo: list[tuple[AnySpec, str]], jobs: int, cache: KernelCache):
    """Yield ((spec, arch), (status, seconds, reason)) as kernels finish."""
    if jobs > 1:
        # Look for cache hits here first: a warm cache then needs no worker processes at all.
        missing = []
        for key in todo:
            try:
                art, _, _ = cache.get(*key, compile_missing=False)
            except Exception:
                art = None  # let the compile report what is wrong
            if art is None:
                missing.append(key)
            else:
                yield key, ("cached", 0.0, "")
        todo = missing
    if jobs <= 1 or len(todo) <= 1:
        for key in todo:
            yield key, _compile(cache, *key)
        return
    # 'spawn' rather than fork: NVRTC and CUDA libraries are not fork-safe once loaded, and
    # spawn behaves the same on every platform.
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(todo)), mp_context=ctx, initializer=_die_with_parent, initargs=(os.getpid(),)
    )
    try:
        pending = {pool.submit(_worker_compile, str(cache.directory), *key): key for key in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                key = pending.pop(fut)
                try:
                    yield key, fut.result()
                except Exception as e:  # a worker died (killed, out of memory)
                    yield key, ("failed", 0.0, f"worker process failed: {type(e).__name__}: {e}")
    finally:
        # On Ctrl-C (or an early close of this generator) drop the queued compiles.
        pool.shutdown(wait=True, cancel_futures=True)


def prewarm_fleet(
    profiles,
    shapes,
    ms=(1, 16, 64),
    acts=("float16",),
    qtypes=("uint4b8",),
    group_sizes=(128,),
    jobs: int = 1,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[int, int, PrewarmResult | None], None] | None = None,
    cache: KernelCache | None = None,
    pdl: bool = False,
) -> FleetReport:
    """Compile (or find cached) every kernel the planner picks for the fleet. Needs no GPU.

    profiles: names ('h100'), archs ('sm_90', its reference GPU) or DeviceProfiles. shapes: (K, N)
    pairs (in_features, out_features per rank) or Shapes. ms: batch sizes (rows of x) to plan for.
    acts, qtypes, group_sizes: every combination is planned. jobs: compile processes (1: in this
    process). cache_dir: kernel cache root (default: JITMARLIN_CACHE_DIR); `cache` instead reuses
    an open KernelCache. progress(done, total, result) is called once before the first compile
    (result None) and after each kernel. pdl: also build the kernels linear(enable_pdl=True) runs
    on sm_90+.
    """
    t0 = time.perf_counter()
    cache = cache or (KernelCache(cache_dir) if cache_dir else default_cache())
    report = FleetReport()
    planned = plan_fleet(profiles, shapes, list(ms), list(acts), list(qtypes), list(group_sizes), report, pdl)
    # One arch check per arch, in this process: a whole arch NVRTC cannot build (sm_70 with
    # NVRTC 13) fails with one clear reason instead of spawning a compile per kernel.
    arch_error = {}
    for arch in report.archs:
        try:
            nvrtc.check_arch(arch)
        except JitMarlinError as e:
            arch_error[arch] = str(e)
    total = len(planned)
    done = 0

    def record(key, outcome):
        nonlocal done
        spec, arch = key
        status, seconds, reason = outcome
        r = PrewarmResult(",".join(planned[key]), arch, spec.name, status, seconds, reason)
        report.results.append(r)
        done += 1
        if progress:
            progress(done, total, r)

    if progress:
        progress(0, total, None)
    todo = []
    for key in planned:
        if key[1] in arch_error:
            record(key, ("failed", 0.0, arch_error[key[1]]))
        else:
            todo.append(key)
    for key, outcome in _run_jobs(todo, jobs, cache):
        record(key, outcome)
    # Workers finish in any order: report in planning order so output is reproducible.
    order = {(spec.name, arch): i for i, (spec, arch) in enumerate(planned)}
    report.results.sort(key=lambda r: order[(r.kernel, r.arch)])
    report.seconds = time.perf_counter() - t0
    return report


# ---- text output (the CLI's) ---------------------------------------------------------------------


class TextProgress:
    """progress callback for prewarm_fleet: on a terminal one bar line on `stream`, redrawn with
    \\r; otherwise (CI logs) plain lines: one when compiling starts, then one every
    `every_s` seconds or tenth of the kernels, whichever comes first. finish() always writes one
    final line.
    """

    def __init__(self, stream, width: int = 28, every_s: float = 5.0):
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.width = width
        self.every_s = every_s
        self.t0 = time.perf_counter()
        self._shown = 0  # characters on the line now, to blank out a longer previous line
        self._last = (0, self.t0)  # (done, time) of the last plain line
        self._counts: Counter = Counter()

    def _line(self, done: int, total: int, result: PrewarmResult | None) -> None:
        now = time.perf_counter()
        if result is not None:
            self._counts[result.status] += 1
        if result is None:
            text = f"prewarm: {total} kernels to compile or find in the cache"
        elif done < total and (done - self._last[0] < max(1, total // 10) and now - self._last[1] < self.every_s):
            return
        elif done == total:
            return  # finish() writes the last line
        else:
            c = self._counts
            text = (
                f"prewarm: {done}/{total} kernels ({c['compiled']} compiled, {c['cached']} "
                f"cached, {c['failed']} failed) {now - self.t0:.1f} s"
            )
        self._last = (done, now)
        self.stream.write(text + "\n")
        self.stream.flush()

    def __call__(self, done: int, total: int, result: PrewarmResult | None) -> None:
        if not self.tty:
            self._line(done, total, result)
            return
        fill = self.width * done // total if total else self.width
        last = f"  {result.status} {result.arch} {result.kernel}" if result else ""
        line = (
            f"prewarm [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} "
            f"{time.perf_counter() - self.t0:5.1f} s{last}"
        )
        line = line[: max(20, shutil.get_terminal_size().columns - 1)]
        self.stream.write("\r" + line.ljust(self._shown))
        self.stream.flush()
        self._shown = len(line)

    def finish(self, report: FleetReport) -> None:
        if self.tty and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
        self.stream.write(
            f"prewarm: {len(report.results)} kernels done ({report.count('failed')} failed) in {report.seconds:.1f} s\n"
        )
        self.stream.flush()


def _indent(text: str, pad: str = "      ") -> str:
    """Multi-line reasons (an NVRTC log tail) indented under their heading."""
    return text.replace("\n", "\n" + pad)


def _arch_number(arch: str) -> int:
    """'sm_120' -> 120, for sorting archs numerically (sm_70 before sm_120)."""
    digits = "".join(c for c in arch if c.isdigit())
    return int(digits) if digits else 0


def format_report(report: FleetReport, cache_dir: str | os.PathLike = "") -> str:
    """The summary table (per arch: kernels compiled, already cached, failed; problems
    unsupported), then skipped shapes, unsupported reasons, each failure with its reason, and a
    final line with the totals and the wall time."""
    head = ("arch", "profiles", "kernels", "compiled", "cached", "failed", "unsupported", "compile s")
    rows = []
    for arch, profs in sorted(report.archs.items(), key=lambda a: _arch_number(a[0])):
        mine = [r for r in report.results if r.arch == arch]
        rows.append(
            (
                arch,
                ",".join(profs),
                len(mine),
                report.count("compiled", arch),
                report.count("cached", arch),
                report.count("failed", arch),
                report.count("unsupported", arch),
                f"{sum(r.seconds for r in mine):.1f}",
            )
        )
    rows.append(
        (
            "total",
            "",
            len(report.results),
            report.count("compiled"),
            report.count("cached"),
            report.count("failed"),
            report.count("unsupported"),
            f"{sum(r.seconds for r in report.results):.1f}",
        )
    )
    w1 = max(len(head[1]), *(len(r[1]) for r in rows))
    fmt = "{:<8} {:<%d} {:>7} {:>8} {:>6} {:>6} {:>11} {:>9}" % w1
    out = [fmt.format(*head)] + [fmt.format(*r) for r in rows]
    if report.skipped:
        out += ["", f"skipped {len(report.skipped)} shapes (before planning, for every GPU):"]
        for s in report.skipped:
            g = f" group {s.group_size}" if s.group_size is not None else ""
            out.append(f"  {s.label} (K={s.k} N={s.n}{g}): {s.reason}")
    if report.unsupported:
        out += ["", "unsupported (problems these GPUs cannot run; not failures):"]
        for (prof, arch, reason), n in report.unsupported.items():
            out.append(f"  {arch} {prof}: {reason} [{n} problem{'s' if n != 1 else ''}]")
    if report.failed:
        out += ["", f"failed ({len(report.failed)} kernels):"]
        by_reason: dict[tuple[str, str], list[PrewarmResult]] = {}
        for r in report.failed:
            by_reason.setdefault((r.arch, r.detail), []).append(r)
        for (arch, reason), rs in by_reason.items():
            names = ", ".join(r.kernel for r in rs)
            out.append(f"  {arch} ({rs[0].profile}) {names}:\n      {_indent(reason)}")
    where = f" -> {cache_dir}" if cache_dir else ""
    out += [
        "",
        f"prewarm: {report.count('compiled')} compiled, {report.count('cached')} already "
        f"cached, {report.duplicates} asked twice (the same kernel as another problem), "
        f"{report.count('unsupported')} unsupported, {report.count('failed')} failed; "
        f"{len(report.results)} kernels for {len(report.archs)} archs in "
        f"{report.seconds:.1f} s wall{where}",
    ]
    return "\n".join(out)


def describe_models() -> str:
    """One line per shipped manifest: name, HF id, hidden size, TP degrees, layer count."""
    lines = []
    for name in list_models():
        m = load_manifest(name)
        lines.append(
            f"{name:<14} {m.hf_id:<28} hidden {m.hidden_size:<6} "
            f"tp {','.join(map(str, m.tp)):<8} {len(m.layers)} layers"
        )
    lines.append(f"({manifests_dir()})")
    return "\n".join(lines)


# ---- jitmarlin.prewarm -----------------------------------------------------------------------------


def prewarm(
    profiles,
    shapes,
    ms=(1, 16, 64),
    *,
    act: str = "float16",
    qtype: str = "uint4b8",
    group_size: int = 128,
    cache: KernelCache | None = None,
    jobs: int = 1,
):
    """Compile (or find cached) every kernel the planner would pick for `shapes` (list of (K, N),
    as the CLI's KxN) and batch sizes `ms` on each profile (names, archs or DeviceProfiles).
    Needs no GPU. Returns a list of PrewarmResult: one per distinct (kernel, arch), then one
    'failed' entry (kernel '-') per profile and reason the planner rejects and per shape the
    kernel cannot take. jitmarlin.service.fleet.prewarm_fleet is the multi-type, multi-process form."""
    report = prewarm_fleet(
        profiles, shapes, ms, (act,), (qtype,), (group_size,), jobs=jobs, cache=cache or default_cache()
    )
    results = list(report.results)
    for prof, arch, reason in report.unsupported:
        results.append(PrewarmResult(prof, arch, "-", "failed", 0.0, reason))
    for sk in report.skipped:
        results.append(PrewarmResult("-", "-", "-", "failed", 0.0, f"{sk.k}x{sk.n}: {sk.reason}"))
    return results
