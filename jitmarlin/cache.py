"""Cache stage: compiled kernels, content-addressed on disk (diskcache) plus an in-process table.

Key = sha256 over the spec's canonical form, the rendered source, the target arch, the NVRTC
version and options, and the jitmarlin version. No absolute paths, no mtimes: a cache copied to
another machine or container hits; changing any of those inputs misses exactly where it should.

Concurrent cold starts compile once: the compile runs under an flock() on a per-key lock file,
so other processes wait, then load the entry. The kernel drops an flock when its holder dies, so
a killed compile never leaves a stale lock. Entries carry a checksum; a corrupted entry is
dropped, recompiled and reported.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
import zlib
from pathlib import Path

from . import nvrtc
from ._version import __version__
from .render import render
from .spec import KernelSpec

log = logging.getLogger("jitmarlin")

ENTRY_FORMAT = 2   # 2: cubin and PTX stored zlib-compressed


def default_cache_dir() -> Path:
    env = os.environ.get("JITMARLIN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jitmarlin"


def cache_key(spec: KernelSpec, source: str, arch: str) -> str:
    payload = {
        "format": ENTRY_FORMAT,
        "spec": spec.canonical(),
        "source": hashlib.sha256(source.encode()).hexdigest(),
        "arch": arch,
        "nvrtc": list(nvrtc.version()),
        "options": list(nvrtc.options_for(arch)),
        "jitmarlin": __version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _checksum(cubin: bytes, ptx: str) -> str:
    h = hashlib.sha256(cubin)
    h.update(ptx.encode())
    return h.hexdigest()


def _to_entry(spec: KernelSpec, art: nvrtc.Artifact) -> dict:
    return {
        "format": ENTRY_FORMAT, "spec": spec.canonical(), "name": art.name, "arch": art.arch,
        "cubin": zlib.compress(art.cubin, 6), "ptx": zlib.compress(art.ptx.encode(), 6),
        "log": art.log, "options": list(art.options),
        "nvrtc": list(art.nvrtc_version), "compile_seconds": art.seconds,
        "resources": art.resources, "jitmarlin": __version__, "created": time.time(),
        "sha256": _checksum(art.cubin, art.ptx),
    }


def _unpack(e: dict) -> tuple[bytes, str]:
    return zlib.decompress(e["cubin"]), zlib.decompress(e["ptx"]).decode()


def _from_entry(e: dict) -> nvrtc.Artifact:
    cubin, ptx = _unpack(e)
    return nvrtc.Artifact(
        name=e["name"], arch=e["arch"], cubin=cubin, ptx=ptx, log=e["log"],
        options=tuple(e["options"]), nvrtc_version=tuple(e["nvrtc"]),
        seconds=e["compile_seconds"], resources=e.get("resources", {}),
    )


def entry_ok(e) -> bool:
    """A loaded entry is whole: right format and its checksum matches its contents."""
    try:
        return (
            isinstance(e, dict) and e.get("format") == ENTRY_FORMAT
            and _checksum(*_unpack(e)) == e["sha256"]
        )
    except (KeyError, TypeError, zlib.error, UnicodeDecodeError):
        return False


class KernelCache:
    """Disk + memory cache of compiled kernels under `directory` (default: JITMARLIN_CACHE_DIR,
    else ~/.cache/jitmarlin). A directory that cannot be written still works: kernels are then
    compiled and kept in memory, with one warning."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory else default_cache_dir()
        self._mem: dict[str, nvrtc.Artifact] = {}
        self._keys: dict = {}        # (spec, arch) -> (key, source): render once per process
        self._disk = None
        self._readonly = False
        self._warned = False

    # ---- storage ----
    def _open(self):
        if self._disk is None and not self._readonly:
            try:
                import diskcache

                self.directory.mkdir(parents=True, exist_ok=True)
                (self.directory / "locks").mkdir(exist_ok=True)
                self._disk = diskcache.Cache(str(self.directory / "kernels"), eviction_policy="none")
            except Exception as e:  # read-only or unusable directory
                self._readonly = True
                if not self._warned:
                    self._warned = True
                    log.warning("jitmarlin: cache dir %s is not writable (%s); compiling in memory",
                                self.directory, e)
        return self._disk

    @contextlib.contextmanager
    def _flight(self, key: str):
        """Hold the per-key compile lock (released by the OS if this process dies)."""
        if self._readonly or self._disk is None:
            yield
            return
        path = self.directory / "locks" / f"{key[:32]}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _load(self, key: str):
        disk = self._open()
        if disk is None:
            return None
        try:
            e = disk.get(key)
        except Exception as exc:  # unreadable row: treat as corrupt
            log.warning("jitmarlin: cache entry %s unreadable (%s); recompiling", key[:12], exc)
            e = "corrupt"
        if e is None:
            return None
        if not entry_ok(e):
            log.warning("jitmarlin: cache entry %s is corrupted; dropping and recompiling", key[:12])
            with contextlib.suppress(Exception):
                disk.delete(key)
            return None
        return _from_entry(e)

    # ---- API ----
    def get(self, spec: KernelSpec, arch: str, *, compile_missing: bool = True):
        """The compiled kernel for `spec` on `arch`: memory, then disk, then NVRTC.

        Returns (artifact, key, status) with status 'memory', 'disk' or 'compiled'; with
        compile_missing=False returns (None, key, 'missing') instead of compiling.
        """
        nvrtc.check_arch(arch)
        known = self._keys.get((spec, arch))
        if known is None:
            source = render(spec)
            known = self._keys[(spec, arch)] = (cache_key(spec, source, arch), source)
        key, source = known
        art = self._mem.get(key)
        if art is not None:
            return art, key, "memory"
        art = self._load(key)
        if art is not None:
            log.info("jitmarlin: cache hit %s arch=%s", spec.name, arch)
            self._mem[key] = art
            return art, key, "disk"
        if not compile_missing:
            return None, key, "missing"
        with self._flight(key):
            art = self._load(key)  # another process may have compiled it while we waited
            if art is not None:
                log.info("jitmarlin: cache hit %s arch=%s (compiled by another process)", spec.name, arch)
                self._mem[key] = art
                return art, key, "disk"
            art = nvrtc.compile_source(source, spec.name, arch, spec)
            log.info("jitmarlin: compiled %s arch=%s in %.2f s", spec.name, arch, art.seconds)
            disk = self._open()
            if disk is not None:
                try:
                    disk.set(key, _to_entry(spec, art))
                except Exception as exc:
                    log.warning("jitmarlin: could not store %s in the cache (%s)", spec.name, exc)
        self._mem[key] = art
        return art, key, "compiled"

    def entries(self):
        """Yield (key, entry dict) for every entry on disk."""
        disk = self._open()
        if disk is None:
            return
        for key in list(disk.iterkeys()):
            with contextlib.suppress(Exception):
                yield key, disk.get(key)

    def clear(self) -> int:
        self._mem.clear()
        disk = self._open()
        return disk.clear() if disk is not None else 0


_default: KernelCache | None = None


def default_cache() -> KernelCache:
    """The process-wide cache (re-created when JITMARLIN_CACHE_DIR changes)."""
    global _default
    want = default_cache_dir()
    if _default is None or _default.directory != want:
        _default = KernelCache(want)
    return _default


def _configure_logging() -> None:
    level = os.environ.get("JITMARLIN_LOG", "").strip().upper()
    if level and not log.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(h)
        log.setLevel(getattr(logging, level, logging.INFO))
        log.propagate = False


_configure_logging()
