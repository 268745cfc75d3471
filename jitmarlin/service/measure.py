"""The GPU side of the autotuner (jitmarlin.service.tune): time one spec on a problem's shape.

GpuMeasure(problem, device)(spec) builds Launchers for `spec` through ops.linear._prepare's spec
override, on random weights of the problem's quant type, with enough copies to rotate past 4x
L2, and returns the GPU time per call in microseconds by CUDA-graph replay (jitmarlin.service.bench's
Timer, the method of tools/sweep and tools/bench); its verify(spec, default) checks a would-be
winner's output against the planner's kernel before the tuner takes it. Needs CuPy and torch
with CUDA.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from jitmarlin.errors import TuneError
from jitmarlin.jit.cache import KernelCache, default_cache
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import spec_kind
from jitmarlin.service import tune
from jitmarlin.service.bench import Timer, copies_needed
from jitmarlin.weights.qtypes import get_qtype
from jitmarlin.weights.quant import QuantizedWeight, from_codes

TARGET_MS = 5.0  # GPU time per timed graph replay, milliseconds
# A tuned winner's output against the planner's kernel's, ||out - ref|| / ||ref||: the
# library's accuracy bounds (each kernel is within them of the float64 reference on the GPU suite;
# a wrong tile, a race or an unwritten block is off by orders of magnitude).
VERIFY_TOL = {"float16": 2e-3, "bfloat16": 1e-2}

_streams: dict = {}  # device -> the torch stream every measurement captures on


def random_weight(p: Problem, seed: int = 0) -> QuantizedWeight:
    """A random host weight (N, K) = (p.n, p.k) of p's quant type and group size, scales in p's
    activation dtype: random codes (fp8 without its NaN codes), scales in [0.001, 0.011), random
    zero points for zero-point types. Only the timing matters; the layout is a real one."""
    rng = np.random.default_rng(seed)
    q = get_qtype(p.qtype)
    top = (1 << q.bits) - 1
    codes = rng.integers(0, top + 1, size=(p.n, p.k), dtype=np.uint16).astype(np.uint8)
    if p.qtype == "float8_e4m3fn":
        codes[(codes & 0x7F) == 0x7F] = 0
    groups = 1 if p.group_size == -1 else p.k // p.group_size
    scales = rng.random((groups, p.n), dtype=np.float32) * 0.01 + 0.001
    zeros = rng.integers(0, top + 1, size=(groups, p.n)) if q.zero_points else None
    return from_codes(p.qtype, codes, scales, p.group_size, zeros=zeros, scale_dtype=p.act)


def weight_copies(base: QuantizedWeight, count: int) -> list[QuantizedWeight]:
    """`count` weights sharing base's host arrays, each uploaded to the GPU on its own."""
    return [dataclasses.replace(base, _device={}, _launchers={}, _gather={}) for _ in range(count)]


def _torch():
    try:
        import torch
    except ImportError:
        raise TuneError("tuning times kernels with torch's CUDA graphs and events: install torch") from None
    if not torch.cuda.is_available():
        raise TuneError("tuning needs a CUDA GPU (torch sees none)")
    return torch


class GpuMeasure:
    """measure(spec) -> microseconds per call of `spec` on problem `p` (M = p.m) on GPU `device`.
    Weight copies and x / out are made once, per problem; launchers once per spec."""

    def __init__(self, p: Problem, device: int = 0, *, target_ms: float = TARGET_MS, torch=None):
        from jitmarlin.jit.profiles import live_profile

        torch = torch or _torch()
        self.torch, self.p, self.device = torch, p, device
        base = random_weight(p)
        self.weights = weight_copies(base, copies_needed(base.nbytes, live_profile(device).l2_bytes))
        dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[p.act]
        dev = torch.device("cuda", device)
        self.x = torch.randn(p.m, p.k, device=dev, dtype=dt)
        self.out = torch.empty(p.m, p.n, device=dev, dtype=dt)
        s = _streams.get(device)
        if s is None:
            s = _streams[device] = torch.cuda.Stream(device=dev)
        self.stream = s
        self.timer = Timer(torch, target_ms, stream=s)

    def __call__(self, spec) -> float:
        from jitmarlin.ops import linear as api

        torch, p, dev = self.torch, self.p, self.device
        x_ptr, out_ptr = self.x.data_ptr(), self.out.data_ptr()
        launchers = {}

        def call(q):
            # the launcher of the current stream (the Timer warms up and captures on self.stream)
            stream = torch.cuda.current_stream(dev).cuda_stream
            lz = launchers.get((id(q), stream))
            if lz is None:
                lz = launchers[(id(q), stream)] = api._prepare(q, dev, p.act, p.m, stream, spec)
            lz(x_ptr, p.k, out_ptr, 0)

        with torch.cuda.device(dev), torch.cuda.stream(self.stream):
            return self.timer([functools.partial(call, q) for q in self.weights])

    def verify(self, spec, reference) -> float:
        """Run `spec` and `reference` (the planner's kernel) once each on this problem's x and
        first weight copy, into outputs filled with NaN first; returns the relative error
        ||out - ref|| / ||ref|| of spec's output, or raises TuneError when an output is not all
        finite (unwritten elements) or the error is over VERIFY_TOL of the activation dtype."""
        from jitmarlin.ops import linear as api

        torch, p, dev = self.torch, self.p, self.device
        q = self.weights[0]
        outs = []
        with torch.cuda.device(dev), torch.cuda.stream(self.stream):
            for s in (reference, spec):
                out = torch.full((p.m, p.n), float("nan"), device=self.out.device, dtype=self.out.dtype)
                lz = api._prepare(q, dev, p.act, p.m, self.stream.cuda_stream, s)
                lz(self.x.data_ptr(), p.k, out.data_ptr(), 0)
                outs.append(out)
            self.stream.synchronize()
        for o, s in zip(outs, (reference, spec)):
            if not bool(torch.isfinite(o).all()):
                raise TuneError(f"{s.name} left output elements unwritten or not finite")
        diff2 = ref2 = 0.0
        for r0 in range(0, p.m, 256):  # in fp32, a slice of rows at a time (bounded memory)
            ref, got = (o[r0 : r0 + 256].float() for o in outs)
            diff2 += float(torch.sum((got - ref) ** 2))
            ref2 += float(torch.sum(ref**2))
        err = math.sqrt(diff2 / max(ref2, 1e-30))
        tol = VERIFY_TOL[p.act]
        if not err <= tol:
            raise TuneError(
                f"{spec.name}'s output differs from the planner's {reference.name} by "
                f"{err:.2e} (relative; at most {tol:g} for {p.act})"
            )
        return err


def precompile(specs, arch: str, cache: KernelCache, jobs: int | None = None) -> dict:
    """Compile (or find cached) every spec for `arch`, in up to `jobs` worker processes (default:
    one per CPU; in this process when the cache is memory-only). Returns {spec: reason} for the
    ones that fail.

    Workers are fresh interpreters (`python -c`), not multiprocessing: first-call autotuning runs
    inside the caller's process, and multiprocessing's spawn would re-import the caller's
    __main__ script in every worker."""
    from jitmarlin.service.fleet import _compile

    todo = []
    for spec in dict.fromkeys(specs):
        try:
            hit = cache.get(spec, arch, compile_missing=False)[0] is not None
        except Exception:
            hit = False  # let the compile say what is wrong
        if not hit:
            todo.append(spec)
    jobs = min(jobs or os.cpu_count() or 1, len(todo))
    if jobs <= 1 or not cache.writable:  # workers hand kernels back through the disk cache
        out = {}
        for spec in todo:
            status, _, reason = _compile(cache, spec, arch)
            if status == "failed":
                out[spec] = reason
        return out
    return _compile_in_workers(todo, arch, cache, jobs)


_WORKER = "from jitmarlin.service.measure import _worker_main; _worker_main()"


def _compile_in_workers(todo, arch: str, cache: KernelCache, jobs: int) -> dict:
    pkg_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    chunks = [todo[i::jobs] for i in range(jobs)]
    procs = []
    for chunk in chunks:
        req = {"dir": str(cache.directory), "arch": arch, "specs": [[spec_kind(s), s.canonical()] for s in chunk]}
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        try:
            proc.stdin.write(json.dumps(req))  # a few KB: fits the pipe, no deadlock
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the worker died at once: its exit code and output say why, below
        procs.append(proc)
    failed = {}
    for proc, chunk in zip(procs, chunks):
        out = proc.stdout.read()  # results and log lines (stderr merged: one pipe)
        proc.wait()
        done, other = {}, []
        for line in out.splitlines():
            try:
                i, status, reason = json.loads(line)
                done[i] = (status, reason)
            except (ValueError, TypeError):
                other.append(line)
        for i, spec in enumerate(chunk):
            tail = "\n".join(other)[-500:]
            status, reason = done.get(i, ("failed", f"compile worker exited with code {proc.returncode}: {tail}"))
            if status == "failed":
                failed[spec] = reason
    return failed


def _worker_main() -> None:
    """A compile worker: a JSON request {dir, arch, specs: [[kind, canonical], ...]} on stdin,
    one JSON line [index, status, reason] per spec on stdout."""
    from jitmarlin.kernels.spec import spec_from_canonical
    from jitmarlin.service.fleet import _compile

    req = json.loads(sys.stdin.read())
    cache = KernelCache(req["dir"])
    for i, (kind, text) in enumerate(req["specs"]):
        status, _, reason = _compile(cache, spec_from_canonical(text, kind), req["arch"])
        print(json.dumps([i, status, reason]), flush=True)


def gpu_tuner(
    device: int = 0,
    *,
    jobs: int | None = None,
    target_ms: float = TARGET_MS,
    candidates=None,
    margin: float = tune.MARGIN,
):
    """A tuner for kernels.tuned.choose_for: (profile, arch, problem) -> TunedChoice, timing on GPU
    `device` with kernels from the default cache (compiled there first, `jobs` processes)."""

    def run(profile, arch, p):
        torch = _torch()
        cache = default_cache()
        with torch.cuda.device(device):
            m = GpuMeasure(tune.bucket_problem(p), device, target_ms=target_ms, torch=torch)
            try:
                return tune.tune(
                    profile,
                    arch,
                    p,
                    m,
                    candidates=candidates,
                    margin=margin,
                    precompile=lambda specs: precompile(specs, arch, cache, jobs),
                    verify=m.verify,
                )
            finally:
                del m  # the weight copies (4x L2): give their memory back to the driver
                import cupy

                cupy.get_default_memory_pool().free_all_blocks()

    return run


def tune_on_gpu(p: Problem, device: int = 0, **kw) -> tune.TunedChoice:
    """Tune problem `p`'s M bucket on GPU `device` now (not stored: tune.store). Keywords as
    gpu_tuner's."""
    from jitmarlin.jit.profiles import live_profile, planning_profile

    return gpu_tuner(device, **kw)(planning_profile(device), live_profile(device).arch, p)
