"""Cache stage: compiled kernels, content-addressed on disk (diskcache) plus an in-process table.

Key = sha256 over the spec's canonical form, the rendered source, the target arch, the NVRTC
version and options, and the jitmarlin version. No absolute paths, no mtimes: a cache copied to
another machine or container hits; changing any of those inputs misses exactly where it should.

Concurrent cold starts compile once: the compile runs under an flock() on a per-key lock file,
so other processes wait, then load the entry. The kernel drops an flock when its holder dies, so
a killed compile never leaves a stale lock. Entries carry a checksum; a corrupted entry is
dropped, recompiled and reported.

For fleets: a size cap with least-recently-used eviction, verify(), portable bundles
(bundles: jitmarlin.bundle) and an optional read-only tier (JITMARLIN_CACHE_RO) looked at before
compiling. The on-disk layout and formats are described in cache/README.md.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import pickle
import re
import sqlite3
import time
import zlib
from collections import Counter
from pathlib import Path

from . import nvrtc
from ._version import __version__
from .render import render
from .settings import cache_root
from .spec import AnySpec, spec_from_canonical

log = logging.getLogger("jitmarlin")

ENTRY_FORMAT = 2   # 2: cubin and PTX stored zlib-compressed

MB = 1 << 20                 # "MB" in sizes and JITMARLIN_CACHE_MAX_MB means MiB
DEFAULT_MAX_MB = 2048
# Eviction goes down to this fraction of the cap, so a full cache pays for the scan over all
# entries once per ~10% of the cap of new kernels instead of after every compile.
EVICT_TO = 0.9
# last_used is rewritten on a disk hit only when it is older than this (seconds): a burst of
# processes loading the same kernels then writes once, not once per process.
TOUCH_RESOLUTION_S = 60.0
# Usage rows (size, last_used, ...) live in the same diskcache store under this prefix, beside
# the entries, so a hit opens one SQLite database, not two.
USAGE_PREFIX = "usage:"
# Tuned choices (jitmarlin.tune: the measured-best spec per GPU and problem bucket) live in the
# same store under this prefix. They are not kernel entries: no usage row, never evicted by the
# size cap, removed by clear(), carried by bundles.
TUNE_PREFIX = "tune:"

ENTRY_DIR = "entries"
TUNED_MEMBER = "tuned.json"     # tuned choices in a bundle (jitmarlin.bundle)
_KEY_RE = re.compile(r"[0-9a-f]{64}\Z")
_REQUIRED = ("spec", "name", "arch", "cubin", "ptx", "log", "options", "nvrtc",
             "compile_seconds", "sha256")
_BLOBS = ("cubin", "ptx")    # bytes fields, base64 in bundles


# ---- settings ------------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    return cache_root()


def default_max_bytes() -> int:
    """The size cap in bytes: JITMARLIN_CACHE_MAX_MB (MiB, default 2048; 0 means no cap)."""
    raw = os.environ.get("JITMARLIN_CACHE_MAX_MB", "").strip()
    if not raw:
        return DEFAULT_MAX_MB * MB
    try:
        return max(0, int(float(raw) * MB))
    except ValueError:
        log.warning("jitmarlin: JITMARLIN_CACHE_MAX_MB=%r is not a number; using %d",
                    raw, DEFAULT_MAX_MB)
        return DEFAULT_MAX_MB * MB


def default_ro_dir() -> Path | None:
    """The read-only tier from JITMARLIN_CACHE_RO, or None."""
    env = os.environ.get("JITMARLIN_CACHE_RO", "").strip()
    return Path(env).expanduser() if env else None


# ---- keys ----------------------------------------------------------------------------------------

def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def key_inputs(spec_canonical: str, source_sha256: str, arch: str, nvrtc_version, options,
               version: str = __version__, fmt: int = ENTRY_FORMAT) -> dict:
    """Everything the cache key hashes (stored in each entry, so the key can be re-derived)."""
    return {
        "format": fmt, "spec": spec_canonical, "source": source_sha256, "arch": arch,
        "nvrtc": list(nvrtc_version), "options": list(options), "jitmarlin": version,
    }


def key_of(inputs: dict) -> str:
    """sha256 (64 hex chars) of the key inputs."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _current_inputs(spec: AnySpec, source: str, arch: str) -> dict:
    return key_inputs(spec.canonical(), source_digest(source), arch, nvrtc.version(),
                      nvrtc.options_for(arch))


def cache_key(spec: AnySpec, source: str, arch: str) -> str:
    return key_of(_current_inputs(spec, source, arch))


def entry_key_inputs(e: dict, *, render_missing: bool = True) -> dict | None:
    """The key inputs of entry `e`: stored ones, or for an entry written before they were stored
    by this jitmarlin version, rebuilt by rendering its spec (render_missing). None otherwise."""
    inputs = e.get("key_inputs")
    if isinstance(inputs, dict):
        return inputs
    if not render_missing or e.get("jitmarlin") != __version__:
        return None
    source = render(spec_from_canonical(e["spec"]))
    return key_inputs(e["spec"], source_digest(source), e["arch"], e["nvrtc"], e["options"],
                      e["jitmarlin"], e["format"])


def key_problem(key: str, e: dict, *, render_missing: bool = True, strict: bool = False):
    """Why `key` is not the key `e`'s own inputs hash to, or None when it is. An entry too old to
    tell counts as fine unless `strict`."""
    try:
        inputs = entry_key_inputs(e, render_missing=render_missing)
    except Exception as exc:  # spec that no longer renders
        return f"spec cannot be rendered to recompute the key ({exc})"
    if inputs is None:
        return "key cannot be recomputed (entry has no key inputs)" if strict else None
    # nvrtc is not compared: the key uses the NVRTC wheel's version, the entry the library's
    for f in ("format", "spec", "arch", "options", "jitmarlin"):
        if inputs.get(f) != e.get(f):
            return f"key inputs disagree with the entry's {f}"
    if key_of(inputs) != key:
        return "key does not match the entry's spec/arch/options/nvrtc"
    return None


# ---- entries -------------------------------------------------------------------------------------

def _checksum(cubin: bytes, ptx: str) -> str:
    h = hashlib.sha256(cubin)
    h.update(ptx.encode())
    return h.hexdigest()


def _to_entry(spec: AnySpec, art: nvrtc.Artifact, inputs: dict | None = None) -> dict:
    e = {
        "format": ENTRY_FORMAT, "spec": spec.canonical(), "name": art.name, "arch": art.arch,
        "cubin": zlib.compress(art.cubin, 6), "ptx": zlib.compress(art.ptx.encode(), 6),
        "log": art.log, "options": list(art.options),
        "nvrtc": list(art.nvrtc_version), "compile_seconds": art.seconds,
        "resources": art.resources, "jitmarlin": __version__, "created": time.time(),
        "sha256": _checksum(art.cubin, art.ptx),
    }
    if inputs is not None:
        e["key_inputs"] = inputs
    return e


def _unpack(e: dict) -> tuple[bytes, str]:
    return zlib.decompress(e["cubin"]), zlib.decompress(e["ptx"]).decode()


def _from_entry(e: dict) -> nvrtc.Artifact:
    cubin, ptx = _unpack(e)
    return nvrtc.Artifact(
        name=e["name"], arch=e["arch"], cubin=cubin, ptx=ptx, log=e["log"],
        options=tuple(e["options"]), nvrtc_version=tuple(e["nvrtc"]),
        seconds=e["compile_seconds"], resources=e.get("resources", {}),
    )


def entry_problem(e) -> str | None:
    """What is wrong with a loaded entry (format, fields, compression, checksum), or None."""
    if not isinstance(e, dict):
        return f"not an entry ({type(e).__name__})"
    if e.get("format") != ENTRY_FORMAT:
        return f"entry format {e.get('format')!r}, this jitmarlin reads format {ENTRY_FORMAT}"
    missing = [f for f in _REQUIRED if f not in e]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    try:
        cubin, ptx = _unpack(e)
    except (TypeError, zlib.error, UnicodeDecodeError) as exc:
        return f"cubin/ptx do not decompress ({exc})"
    if _checksum(cubin, ptx) != e["sha256"]:
        return "checksum mismatch (cubin/ptx altered)"
    return None


def entry_ok(e) -> bool:
    """A loaded entry is whole: right format and its checksum matches its contents."""
    return entry_problem(e) is None


def entry_size(e: dict) -> int:
    """Bytes the entry takes in the store (its pickle, as diskcache writes it)."""
    return len(pickle.dumps(e, pickle.HIGHEST_PROTOCOL))


def _usage_row(e: dict, last_used: float) -> dict:
    """The small per-entry row kept beside each entry: size (bytes), times (epoch seconds)."""
    return {"size": entry_size(e), "created": e.get("created", 0.0), "last_used": last_used,
            "arch": e.get("arch", "?"), "name": e.get("name", "?")}


# ---- bundle members ------------------------------------------------------------------------------

def entry_to_json(e: dict) -> bytes:
    """An entry as deterministic JSON bytes (cubin/ptx base64 of their zlib streams). Bundles use
    JSON, not pickle, so importing one never runs code."""
    d = dict(e)
    for f in _BLOBS:
        d[f] = base64.b64encode(e[f]).decode("ascii")
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def entry_from_json(data: bytes) -> dict:
    """Inverse of entry_to_json. Raises ValueError (or KeyError/TypeError) on malformed input."""
    d = json.loads(data)
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    for f in _BLOBS:
        d[f] = base64.b64decode(d[f], validate=True)
    return d


def _connect_ro(db: Path) -> sqlite3.Connection:
    """A read-only SQLite connection. Plain mode=ro still needs to create the WAL index next to
    the database, which a read-only mount refuses; immutable=1 then reads it as a frozen file."""
    uri = db.resolve().as_uri()
    try:
        con = sqlite3.connect(uri + "?mode=ro", uri=True, check_same_thread=False)
        con.execute("SELECT 1 FROM Cache LIMIT 1").fetchall()
        return con
    except sqlite3.OperationalError:
        return sqlite3.connect(uri + "?mode=ro&immutable=1", uri=True, check_same_thread=False)


class ReadOnlyTier:
    """Another cache, only ever read: a jitmarlin cache directory (its kernels/ store) or an
    unpacked bundle (manifest.json + entries/<key>.json). Entries are checked (format, checksum,
    key) before use; nothing is written, so it may live on a read-only image mount."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).expanduser()
        self._db: sqlite3.Connection | None = None
        self._store = None
        self._warned = False
        self._bundle_tuned: dict | None = None

    def get(self, key: str) -> dict | None:
        """The checked entry for `key`, or None (absent, unreadable or bad: warned, not fatal)."""
        try:
            e = self._fetch(key)
        except Exception as exc:
            if not self._warned:
                self._warned = True
                log.warning("jitmarlin: read-only cache %s unreadable (%s)", self.directory, exc)
            return None
        if e is None:
            return None
        problem = entry_problem(e) or key_problem(key, e, render_missing=False)
        if problem:
            log.warning("jitmarlin: read-only cache entry %s is bad (%s); ignoring it",
                        key[:12], problem)
            return None
        return e

    def get_tuned(self, key: str):
        """The stored record of tuned choice `key` (unchecked: jitmarlin.tune checks it), or None."""
        try:
            bundled = self.directory / TUNED_MEMBER
            if bundled.is_file():
                if self._bundle_tuned is None:
                    d = json.loads(bundled.read_bytes())
                    choices = d.get("choices") if isinstance(d, dict) else None
                    self._bundle_tuned = choices if isinstance(choices, dict) else {}
                return self._bundle_tuned.get(key)
            return self._row(key)
        except Exception as exc:
            log.warning("jitmarlin: read-only cache %s: tuned choice %s unreadable (%s)",
                        self.directory, key, exc)
            return None

    def _fetch(self, key: str):
        member = self.directory / ENTRY_DIR / f"{key}.json"
        if member.is_file():
            return entry_from_json(member.read_bytes())
        return self._row(key)

    def _row(self, key: str):
        """The value stored under `key` in the tier's diskcache store, or None."""
        db = self.directory / "kernels" / "cache.db"
        if not db.is_file():
            return None
        if self._db is None:
            import diskcache

            # diskcache.Cache() writes its settings when it opens a store, so the row is read
            # with SQLite directly and decoded by diskcache's own Disk.fetch.
            self._db = _connect_ro(db)
            self._store = diskcache.Disk(str(db.parent))
        row = self._db.execute("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1",
                               (key,)).fetchone()
        return None if row is None else self._store.fetch(row[0], row[1], row[2], False)


# ---- the cache -----------------------------------------------------------------------------------

def _is_entry_key(k) -> bool:
    return isinstance(k, str) and not k.startswith((USAGE_PREFIX, TUNE_PREFIX))


def _is_tune_key(k) -> bool:
    return isinstance(k, str) and k.startswith(TUNE_PREFIX)


class KernelCache:
    """Disk + memory cache of compiled kernels under `directory` (default: JITMARLIN_CACHE_DIR,
    else ~/.cache/jitmarlin). A directory that cannot be written still works: kernels are then
    compiled and kept in memory, with one warning.

    max_mb: size cap in MiB (default JITMARLIN_CACHE_MAX_MB, else 2048; 0 = none), also settable
    afterwards as `max_bytes`. ro_dir: read-only tier (default JITMARLIN_CACHE_RO; "" = none).
    """

    def __init__(self, directory: str | os.PathLike | None = None, *,
                 max_mb: float | None = None, ro_dir: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.max_bytes = default_max_bytes() if max_mb is None else max(0, int(max_mb * MB))
        self.ro_dir = default_ro_dir() if ro_dir is None else (Path(ro_dir) if ro_dir else None)
        self._ro = ReadOnlyTier(self.ro_dir) if self.ro_dir else None
        self._mem: dict[str, nvrtc.Artifact] = {}
        self._keys: dict = {}        # (spec, arch) -> (key, source, key inputs): render once
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
            self._delete(key)
            return None
        self._touch(key, e)
        return _from_entry(e)

    def _touch(self, key: str, e: dict) -> None:
        """Record a use of `key` now (at most once per TOUCH_RESOLUTION_S; never rewrites the
        entry itself, only its small usage row)."""
        now = time.time()
        ukey = USAGE_PREFIX + key
        try:
            row = self._disk.get(ukey)
            if isinstance(row, dict) and now - row.get("last_used", 0.0) < TOUCH_RESOLUTION_S:
                return
            row = dict(row) if isinstance(row, dict) else _usage_row(e, now)
            row["last_used"] = now
            self._disk.set(ukey, row)
        except Exception:  # usage is advisory: a lost write only makes the entry look older
            pass

    def _store(self, key: str, e: dict) -> bool:
        """Write entry `e` and its usage row; False (with a warning) when the store refuses."""
        disk = self._open()
        if disk is None:
            return False
        try:
            # entry first: a usage row never exists without its entry, except after a delete
            disk.set(key, e)
            disk.set(USAGE_PREFIX + key, _usage_row(e, time.time()))
            return True
        except Exception as exc:
            log.warning("jitmarlin: could not store %s in the cache (%s)", e.get("name"), exc)
            return False

    def _delete(self, key: str) -> None:
        self._mem.pop(key, None)
        with contextlib.suppress(Exception):
            self._disk.delete(key)
            self._disk.delete(USAGE_PREFIX + key)

    def _identity(self, spec: AnySpec, arch: str) -> tuple[str, str, dict]:
        known = self._keys.get((spec, arch))
        if known is None:
            source = render(spec)
            inputs = _current_inputs(spec, source, arch)
            known = self._keys[(spec, arch)] = (key_of(inputs), source, inputs)
        return known

    # ---- API ----
    def get(self, spec: AnySpec, arch: str, *, compile_missing: bool = True):
        """The compiled kernel for `spec` (a KernelSpec or a DequantSpec: render() picks the
        template) on `arch`: memory, then disk, then the read-only tier, then NVRTC.

        Returns (artifact, key, status) with status 'memory', 'disk' (this cache or the
        read-only tier) or 'compiled'; with compile_missing=False returns (None, key, 'missing')
        instead of compiling.
        """
        spec = spec.kernel_spec()   # a whole-tile plan's kernel is the Stream-K plan's
        arch = nvrtc.target_arch(spec, arch)
        key, source, inputs = self._identity(spec, arch)
        art = self._mem.get(key)
        if art is not None:
            return art, key, "memory"
        art = self._load(key)
        if art is not None:
            log.info("jitmarlin: cache hit %s arch=%s", spec.name, arch)
            self._mem[key] = art
            return art, key, "disk"
        e = self._ro.get(key) if self._ro is not None else None
        if e is not None:
            log.info("jitmarlin: cache hit %s arch=%s (read-only tier %s)", spec.name, arch,
                     self.ro_dir)
            art = self._mem[key] = _from_entry(e)
            return art, key, "disk"
        if not compile_missing:
            return None, key, "missing"
        # Checked only before a compile: a hit never loads the NVRTC library (~50 ms).
        nvrtc.check_arch(arch)
        stored = False
        with self._flight(key):
            art = self._load(key)  # another process may have compiled it while we waited
            if art is not None:
                # (no "compiled" in this line: logs are grepped for the one process that did)
                log.info("jitmarlin: cache hit %s arch=%s (waited for another process)", spec.name, arch)
                self._mem[key] = art
                return art, key, "disk"
            art = nvrtc.compile_source(source, spec.name, arch, spec)
            log.info("jitmarlin: compiled %s arch=%s in %.2f s", spec.name, arch, art.seconds)
            stored = self._store(key, _to_entry(spec, art, inputs))
        self._mem[key] = art
        if stored:
            self.enforce_cap(keep={key})
        return art, key, "compiled"

    def keys(self) -> list[str]:
        """Keys of every entry on disk."""
        disk = self._open()
        return [] if disk is None else [k for k in disk.iterkeys() if _is_entry_key(k)]

    def entries(self):
        """Yield (key, entry dict) for every entry on disk."""
        disk = self._open()
        if disk is None:
            return
        for key in self.keys():
            with contextlib.suppress(Exception):
                yield key, disk.get(key)

    def clear(self) -> int:
        """Remove every entry and every tuned choice; returns how many entries there were."""
        self._mem.clear()
        disk = self._open()
        if disk is None:
            return 0
        n = len(self.keys())
        disk.clear()
        return n

    # ---- size cap ----
    def usage(self) -> dict[str, dict]:
        """key -> usage row {size (bytes), created, last_used (epoch s), arch, name} for every
        entry. Rows missing for entries stored before usage tracking (or by a copy) are rebuilt,
        with last_used = created; rows whose entry is gone are dropped."""
        disk = self._open()
        if disk is None:
            return {}
        entry_keys, usage_keys = [], []
        for k in disk.iterkeys():
            if _is_entry_key(k):
                entry_keys.append(k)
            elif isinstance(k, str) and k.startswith(USAGE_PREFIX):
                usage_keys.append(k)
        rows = {}
        for k in entry_keys:
            with contextlib.suppress(Exception):
                row = disk.get(USAGE_PREFIX + k)
                if not isinstance(row, dict):
                    e = disk.get(k)
                    if not isinstance(e, dict) or "cubin" not in e:
                        continue  # not an entry: verify() reports it
                    row = _usage_row(e, e.get("created", 0.0))
                    disk.set(USAGE_PREFIX + k, row)
                rows[k] = row
        for uk in usage_keys:
            k = uk[len(USAGE_PREFIX):]
            if k not in rows and k not in disk:
                with contextlib.suppress(Exception):
                    disk.delete(uk)
        return rows

    def enforce_cap(self, keep=()) -> list[str]:
        """If the entries total more than max_bytes, evict least recently used ones (never those
        in `keep`) until they total at most EVICT_TO * max_bytes. Returns the evicted keys."""
        disk = self._open()
        if disk is None or self.max_bytes <= 0:
            return []
        # Fast path: diskcache's volume (database + value files, bytes) bounds the entries' total
        with contextlib.suppress(Exception):
            if disk.volume() <= self.max_bytes:
                return []
        rows = self.usage()
        total = sum(r.get("size", 0) for r in rows.values())
        if total <= self.max_bytes:
            return []
        target = int(self.max_bytes * EVICT_TO)
        evicted = []
        for key, row in sorted(rows.items(), key=lambda kv: (kv[1].get("last_used", 0.0), kv[0])):
            if total <= target:
                break
            if key in keep:
                continue
            self._delete(key)
            total -= row.get("size", 0)
            evicted.append(key)
        log.info("jitmarlin: cache over its %.1f MB cap: evicted %d least recently used entries, "
                 "%.1f MB left", self.max_bytes / MB, len(evicted), total / MB)
        return evicted

    def stats(self) -> dict:
        """Entry count, total bytes, per-arch counts, oldest/newest created and latest use
        (epoch seconds, None when empty), the cap (bytes, 0 = none), directories."""
        rows = self.usage()
        created = [r.get("created", 0.0) for r in rows.values()]
        return {
            "directory": str(self.directory),
            "entries": len(rows),
            "bytes": sum(r.get("size", 0) for r in rows.values()),
            "archs": dict(sorted(Counter(r.get("arch", "?") for r in rows.values()).items())),
            "oldest": min(created, default=None),
            "newest": max(created, default=None),
            "last_used": max((r.get("last_used", 0.0) for r in rows.values()), default=None),
            "cap_bytes": self.max_bytes,
            "read_only_tier": str(self.ro_dir) if self.ro_dir else None,
            "tuned": len(self.tuned_keys()),
        }

    # ---- checks ----
    def verify(self, fix: bool = False) -> list[tuple[str, str, str]]:
        """Check every entry: format, checksum of the decompressed cubin + PTX, and that its key
        is what its spec/arch/options/NVRTC hash to (where that can be recomputed); and every
        tuned choice: fields, specs, key (a stale one is not bad). Returns (key, kernel name or
        'tuned choice', problem) for each bad one; fix=True deletes them."""
        disk = self._open()
        if disk is None:
            return []
        bad = []
        for key in self.keys():
            try:
                e = disk.get(key)
            except Exception as exc:
                e, problem = None, f"unreadable ({exc})"
            else:
                if e is None:
                    continue  # deleted meanwhile
                problem = entry_problem(e) or key_problem(key, e)
            if problem:
                name = e.get("name", "?") if isinstance(e, dict) else "?"
                bad.append((key, name, problem))
                if fix:
                    self._delete(key)
        from .tune import record_problem   # (tune imports this module)

        for key in self.tuned_keys():
            try:
                rec = disk.get(key)
            except Exception as exc:
                problem = f"unreadable ({exc})"
            else:
                if rec is None:
                    continue
                problem = record_problem(key, rec)
            if problem:
                bad.append((key, "tuned choice", problem))
                if fix:
                    self.delete_tuned(key)
        return bad

    # ---- bundles ----
    # ---- raw entries (for jitmarlin.bundle) ----
    @property
    def writable(self) -> bool:
        return self._open() is not None

    def raw(self, key: str):
        """The stored entry of `key` as it is on disk (unchecked), or None."""
        disk = self._open()
        return None if disk is None else disk.get(key)

    def has(self, key: str) -> bool:
        disk = self._open()
        return disk is not None and key in disk

    def put_entry(self, key: str, e: dict) -> bool:
        """Store an already checked entry under `key`; False when the cache cannot be written."""
        return self._open() is not None and self._store(key, e)

    # ---- tuned choices (records built and checked by jitmarlin.tune) ----
    def tuned_keys(self) -> list[str]:
        """Keys ("tune:...") of every tuned choice on disk."""
        disk = self._open()
        return [] if disk is None else [k for k in disk.iterkeys() if _is_tune_key(k)]

    def tuned(self) -> dict[str, object]:
        """key -> stored record (unchecked) for every tuned choice on disk."""
        disk = self._open()
        out = {}
        for key in self.tuned_keys():
            with contextlib.suppress(Exception):
                out[key] = disk.get(key)
        return out

    def get_tuned(self, key: str):
        """The stored record of tuned choice `key` (unchecked): this cache, then the read-only
        tier; None when absent or unreadable."""
        _check_tune_key(key)
        disk = self._open()
        rec = None
        if disk is not None:
            try:
                rec = disk.get(key)
            except Exception as exc:
                log.warning("jitmarlin: tuned choice %s unreadable (%s)", key, exc)
        if rec is None and self._ro is not None:
            rec = self._ro.get_tuned(key)
        return rec

    def has_tuned(self, key: str) -> bool:
        """Tuned choice `key` is stored in this cache (the read-only tier is not asked)."""
        disk = self._open()
        return disk is not None and key in disk

    def put_tuned(self, key: str, record: dict) -> bool:
        """Store (or replace) tuned choice `key`; False when the cache cannot be written."""
        _check_tune_key(key)
        disk = self._open()
        if disk is None:
            return False
        try:
            disk.set(key, record)
            return True
        except Exception as exc:
            log.warning("jitmarlin: could not store tuned choice %s (%s)", key, exc)
            return False

    def delete_tuned(self, key: str) -> None:
        _check_tune_key(key)
        disk = self._open()
        if disk is not None:
            with contextlib.suppress(Exception):
                disk.delete(key)

    def tune_lock(self, key: str):
        """Context manager: hold the lock of tuned choice `key` (one process tunes a problem at a
        time; the others wait, then read its result)."""
        _check_tune_key(key)
        self._open()
        return self._flight(hashlib.sha256(key.encode()).hexdigest())


def _check_tune_key(key) -> None:
    if not _is_tune_key(key):
        raise ValueError(f"tuned-choice keys start with {TUNE_PREFIX!r}, got {key!r}")


_default: KernelCache | None = None


def default_cache() -> KernelCache:
    """The process-wide cache (re-created when JITMARLIN_CACHE_DIR or JITMARLIN_CACHE_RO change)."""
    global _default
    want, ro = default_cache_dir(), default_ro_dir()
    if _default is None or _default.directory != want or _default.ro_dir != ro:
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
