"""Compile stage: CUDA source + target arch -> cubin (and PTX, kept for inspection) with NVRTC.

NVRTC comes from pip (nvidia-cuda-nvrtc-cu12 / nvidia-cuda-nvrtc) through cuda-python's
bindings; no CUDA toolkit and no GPU are needed. The NVRTC major version decides which
architectures can be built: CUDA 13 dropped Volta, so sm_70 needs the cu12 extra.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from functools import lru_cache

from jitmarlin.errors import CompileError, UnsupportedError

BASE_OPTIONS = ("-std=c++17", "-default-device", "-Xptxas=-v", "-lineinfo")


def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # cuda-python >= 12.6
    except ImportError:  # pragma: no cover - very old cuda-python
        try:
            from cuda import nvrtc  # type: ignore
        except ImportError as e:
            raise UnsupportedError(
                "NVRTC bindings not found: install jitmarlin with the cu12 or cu13 extra "
                "(pip install 'jitmarlin[cu12]')"
            ) from e
    return nvrtc


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


# pip distributions that carry NVRTC (CUDA 12, CUDA 13 spellings)
_NVRTC_DISTS = ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu13")


@lru_cache(maxsize=1)
def library_version() -> tuple[int, int]:
    """(major, minor) reported by the NVRTC library itself (loads it: ~50 ms)."""
    nv = _nvrtc()
    err, major, minor = nv.nvrtcVersion()
    if int(err) != 0:
        raise UnsupportedError(f"NVRTC could not be loaded: {err}")
    return int(major), int(minor)


@lru_cache(maxsize=1)
def version() -> tuple[int, int]:
    """(major, minor) of the NVRTC in use: from the installed NVRTC wheel's metadata when there
    is one (cheap: a cache hit never loads the 60 MB library), else from the library. Compiles
    check the library against it (compile_source)."""
    from importlib import metadata

    for dist in _NVRTC_DISTS:
        try:
            major, minor = metadata.version(dist).split(".")[:2]
            return int(major), int(minor)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return library_version()


@lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """Real architectures this NVRTC can build cubins for, e.g. ('sm_75', ..., 'sm_121')."""
    nv = _nvrtc()
    try:
        err, archs = nv.nvrtcGetSupportedArchs()
        if int(err) != 0:
            raise RuntimeError(str(err))
        return tuple(f"sm_{a}" for a in archs if a >= 70)
    except Exception:  # pragma: no cover - old NVRTC without the query
        return ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90")


def check_arch(arch: str) -> None:
    """Raise a clear error when this NVRTC cannot build for `arch` (an 'a' variant such as
    sm_90a counts as its base architecture)."""
    archs = supported_archs()
    if arch in archs or (arch.endswith("a") and arch[:-1] in archs):
        return
    major, minor = version()
    if arch == "sm_70" and major >= 13:
        raise UnsupportedError(
            f"NVRTC {major}.{minor} cannot compile for sm_70 (V100): CUDA 13 dropped Volta. "
            "Install the CUDA 12 stack, pip install 'jitmarlin[cu12]' (NVRTC 12.9), to build V100 kernels"
        )
    raise UnsupportedError(f"NVRTC {major}.{minor} cannot compile for {arch}; it supports {', '.join(archs)}")


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel: cubin for `arch`, its PTX, the compiler log and how long it took."""

    name: str
    arch: str
    cubin: bytes
    ptx: str
    log: str
    options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    seconds: float
    resources: dict = field(default_factory=dict)


def options_for(arch: str) -> tuple[str, ...]:
    return (f"--gpu-architecture={arch}",) + BASE_OPTIONS


def compile_source(source: str, name: str, arch: str, spec=None) -> Artifact:
    """Compile `source` (kernel symbol `name`) for `arch` ('sm_90'). Raises CompileError, which
    names `spec` (opaque here: whatever the caller compiles) when given."""
    check_arch(arch)
    if library_version() != version():
        import logging

        logging.getLogger("jitmarlin").warning(
            "jitmarlin: the NVRTC library is %s but its wheel says %s; cache keys use the wheel's",
            library_version(),
            version(),
        )
    nv = _nvrtc()
    opts = options_for(arch)
    t0 = time.perf_counter()
    err, prog = nv.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    if int(err) != 0:
        raise CompileError(f"nvrtcCreateProgram failed: {err}", spec=spec, arch=arch)
    try:
        res = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        err = res[0]
        log = _get(nv, prog, "ProgramLog").decode(errors="replace").rstrip("\x00")
        if int(err) != 0:
            raise CompileError("NVRTC could not compile the generated kernel", spec=spec, arch=arch, log=log)
        cubin = _get(nv, prog, "CUBIN")
        ptx = _get(nv, prog, "PTX").decode(errors="replace").rstrip("\x00")
    finally:
        nv.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    if not cubin:
        raise CompileError("NVRTC produced no cubin", spec=spec, arch=arch, log=log)
    return Artifact(
        name=name,
        arch=arch,
        cubin=bytes(cubin),
        ptx=ptx,
        log=log,
        options=opts,
        nvrtc_version=library_version(),
        seconds=seconds,
        resources=parse_resources(log, name),
    )


def _get(nv, prog, what: str) -> bytes:
    err, size = getattr(nv, f"nvrtcGet{what}Size")(prog)
    if int(err) != 0:
        raise RuntimeError(f"nvrtcGet{what}Size failed: {err}")
    buf = b" " * size
    (err,) = getattr(nv, f"nvrtcGet{what}")(prog, buf)
    if int(err) != 0:
        raise RuntimeError(f"nvrtcGet{what} failed: {err}")
    return buf


_RE_FUNC = re.compile(r"Function properties for (\S+)")
_RE_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_resources(log: str, name: str) -> dict:
    """Registers, spills, stack and static shared memory of kernel `name` from ptxas -v output."""
    out = {
        "registers": None,
        "spill_stores": None,
        "spill_loads": None,
        "stack_bytes": None,
        "static_shared_bytes": 0,
        "param_bytes": None,
    }
    current = None
    for line in log.splitlines():
        m = _RE_FUNC.search(line)
        if m:
            current = m.group(1)
            continue
        if current != name and f"'{name}'" not in line and current is not None:
            continue
        m = _RE_STACK.search(line)
        if m:
            out["stack_bytes"], out["spill_stores"], out["spill_loads"] = map(int, m.groups())
        m = _RE_USED.search(line)
        if m:
            out["registers"] = int(m.group(1))
            s = _RE_SMEM.search(line)
            if s:
                out["static_shared_bytes"] = int(s.group(1))
            c = _RE_CMEM.search(line)
            if c:
                out["param_bytes"] = int(c.group(1))
    return out


def find_disassembler() -> tuple[str, str] | None:
    """('cuobjdump' | 'nvdisasm', path) of a SASS disassembler: on PATH, under CUDA_HOME, or from
    the pip packages nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm. None when there is none."""
    import glob
    import os
    import shutil
    import site

    for tool in ("cuobjdump", "nvdisasm"):
        path = shutil.which(tool)
        if path:
            return tool, path
        cands = []
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        if home:
            cands.append(os.path.join(home, "bin", tool))
        for sp in site.getsitepackages() + [site.getusersitepackages()]:
            cands += glob.glob(os.path.join(sp, "nvidia", "*", "bin", tool))
        for c in cands:
            if os.access(c, os.X_OK):
                return tool, c
    return None


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin. Raises UnsupportedError naming what to install when no tool is found."""
    import os
    import subprocess
    import tempfile

    found = find_disassembler()
    if found is None:
        raise UnsupportedError(
            "no SASS disassembler found (cuobjdump or nvdisasm): pip install nvidia-cuda-nvdisasm "
            "(or put a CUDA toolkit's bin/ on PATH); --ptx and --resources work without one"
        )
    tool, path = found
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "kernel.cubin")
        with open(f, "wb") as fh:
            fh.write(cubin)
        cmd = [path, "-sass", f] if tool == "cuobjdump" else [path, "-c", f]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise UnsupportedError(f"{tool} failed: {r.stderr.strip()[-500:]}")
    return r.stdout
