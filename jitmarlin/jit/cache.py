"""Cache stage: compiled kernels, content-addressed on disk (diskcache) plus an in-process table.

Key = sha256 over the spec's canonical form, the rendered source, the target arch, the NVRTC
version and options, and the jitmarlin version. No absolute paths, no mtimes: a cache copied to
another machine or container hits; changing any of those inputs misses exactly where it should.

Concurrent cold starts compile once: the compile runs under an flock() on a per-key lock file,
so other processes wait, then load the entry. The kernel drops an flock when its holder dies, so
a killed compile never leaves a stale lock; a stopped holder costs a waiter at most
JITMARLIN_LOCK_TIMEOUT_S, then it compiles in memory. Entries carry a checksum and their key
inputs; an entry that is corrupt or not the one asked for is dropped, recompiled and reported.

The store is untrusted input (cache/README.md, trust model): rows are JSON only, never pickle
(jitmarlin.jit.store_disk.SafeDisk), the tree is private (0700/0600) and a dir owned by another user
or writable by others is refused (compiled in memory instead) unless JITMARLIN_CACHE_SHARED=group.

For fleets: a size cap with least-recently-used eviction, verify(), portable bundles
(bundles: jitmarlin.jit.bundle) and an optional read-only tier (JITMARLIN_CACHE_RO) looked at before
compiling. The on-disk layout and formats are described in cache/README.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sqlite3
import time
from collections import Counter
from pathlib import Path

from jitmarlin._version import __version__
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache_entries import (  # noqa: F401  (re-exported: jitmarlin.jit.cache is the public module)
    _KEY_RE,
    _TREE,
    ENTRY_DIR,
    ENTRY_FORMAT,
    LEGACY_DIRS,
    SOURCE_PREFIX,
    STORE_DIR,
    USAGE_PREFIX,
    ReadOnlyTier,
    _current_inputs,
    _from_entry,
    _is_entry_key,
    _is_record_key,
    _to_entry,
    _usage_row,
    cache_key,
    entry_from_json,
    entry_key_inputs,
    entry_mismatch,
    entry_ok,
    entry_problem,
    entry_size,
    entry_to_json,
    key_inputs,
    key_of,
    key_problem,
    source_digest,
)
from jitmarlin.jit.records import kind_of, record_kinds
from jitmarlin.jit.sources import Buildable, render, source, templates_digest
from jitmarlin.jit.store_disk import NonRawKey, SafeDisk, create_file, flock_timeout, make_dir, tree_problem
from jitmarlin.settings import cache_root, lock_timeout_s

log = logging.getLogger("jitmarlin")


MB = 1 << 20  # "MB" in sizes and JITMARLIN_CACHE_MAX_MB means MiB
DEFAULT_MAX_MB = 2048
# Eviction goes down to this fraction of the cap, so a full cache pays for the scan over all
# entries once per ~10% of the cap of new kernels instead of after every compile.
EVICT_TO = 0.9
# last_used is rewritten on a disk hit only when it is older than this (seconds): a burst of
# processes loading the same kernels then writes once, not once per process.
TOUCH_RESOLUTION_S = 60.0


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
        log.warning("jitmarlin: JITMARLIN_CACHE_MAX_MB=%r is not a number; using %d", raw, DEFAULT_MAX_MB)
        return DEFAULT_MAX_MB * MB


def default_ro_dir() -> Path | None:
    """The read-only tier from JITMARLIN_CACHE_RO, or None."""
    env = os.environ.get("JITMARLIN_CACHE_RO", "").strip()
    return Path(env).expanduser() if env else None


# ---- the cache -----------------------------------------------------------------------------------


class KernelCache:
    """Disk + memory cache of compiled kernels under `directory` (default: JITMARLIN_CACHE_DIR,
    else ~/.cache/jitmarlin). A directory that cannot be written still works: kernels are then
    compiled and kept in memory, with one warning.

    max_mb: size cap in MiB (default JITMARLIN_CACHE_MAX_MB, else 2048; 0 = none), also settable
    afterwards as `max_bytes`. ro_dir: read-only tier (default JITMARLIN_CACHE_RO; "" = none).
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        *,
        max_mb: float | None = None,
        ro_dir: str | os.PathLike | None = None,
    ):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.max_bytes = default_max_bytes() if max_mb is None else max(0, int(max_mb * MB))
        self.ro_dir = default_ro_dir() if ro_dir is None else (Path(ro_dir) if ro_dir else None)
        self._ro = ReadOnlyTier(self.ro_dir) if self.ro_dir else None
        self._mem: dict[str, nvrtc.Artifact] = {}
        self._keys: dict = {}  # (spec, arch) -> (key, source, key inputs): render once
        self._disk = None
        self._readonly = False
        self._warned = False
        self.problem: str | None = None  # why the dir is not used (refused or corrupt store)
        self.corrupt = False  # the store exists but SQLite cannot read it

    # ---- storage ----
    def _open(self):
        if self._disk is None and not self._readonly:
            try:
                self._disk = self._open_store()
            except Exception as e:  # read-only, unusable, refused or corrupt directory
                self._readonly = True
                if isinstance(e, sqlite3.DatabaseError):
                    self.corrupt = True
                    self.problem = f"{self.directory / STORE_DIR / 'cache.db'} is corrupt ({e})"
                if not self._warned:
                    self._warned = True
                    what = self.problem or f"cache dir {self.directory} is not writable ({e})"
                    log.warning("jitmarlin: %s; compiling in memory (nothing read from or written to it)", what)
        return self._disk

    def _open_store(self):
        import diskcache

        d = self.directory
        make_dir(d)
        problem = tree_problem(d, _TREE)
        if problem:
            self.problem = problem
            raise PermissionError(problem)
        if not os.access(d, os.W_OK | os.X_OK):
            raise PermissionError(f"{d} is not writable")
        make_dir(d / "locks")
        make_dir(d / STORE_DIR)
        create_file(d / STORE_DIR / "cache.db")  # 0600 before SQLite opens it
        return diskcache.Cache(str(d / STORE_DIR), disk=SafeDisk, eviction_policy="none")

    @property
    def state(self) -> str:
        """'ok', 'read-only' (exists, not writable), 'refused' (owner/mode check failed) or
        'corrupt' (the store's database cannot be read)."""
        self._open()
        if self._disk is not None:
            return "ok"
        if self.corrupt:
            return "corrupt"
        return "refused" if self.problem else "read-only"

    def health(self) -> tuple[str, str | None]:
        """(state, problem): state as `state`, with 'corrupt' also when SQLite's quick_check
        finds a damaged database that still opens."""
        st = self.state
        if st == "ok":
            problem = self.integrity_problem()
            return ("corrupt", problem) if problem else ("ok", None)
        return st, self.problem

    def integrity_problem(self) -> str | None:
        """Why the store's database is damaged (SQLite quick_check), or None."""
        if self.corrupt:
            return self.problem
        db = self.directory / STORE_DIR / "cache.db"
        if self._open() is None or not db.is_file():
            return None
        try:
            rows = self._disk._sql("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as exc:
            return f"{db} is corrupt ({exc})"
        if rows != [("ok",)]:
            return f"{db} is corrupt ({'; '.join(str(r[0]) for r in rows[:3])})"
        return None

    def repair(self) -> bool:
        """Remove a broken store (and the legacy pickle-era dirs); True when something was
        removed. Refused trees are left alone: they may not be ours."""
        if self.problem and not self.corrupt:
            return False
        with contextlib.suppress(Exception):
            if self._disk is not None:
                self._disk.close()
        self._disk, self._readonly, self._warned = None, False, False
        self.problem, self.corrupt = None, False
        removed = False
        for name in (STORE_DIR, *LEGACY_DIRS):
            p = self.directory / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                removed = True
        return removed

    def readonly_view(self) -> ReadOnlyTier:
        """This directory read as a read-only tier (for `cache` commands on a read-only dir)."""
        return ReadOnlyTier(self.directory)

    @contextlib.contextmanager
    def _flight(self, key: str):
        """Hold the per-key compile lock (released by the OS if this process dies). Yields
        False when not held: no store, or the lock stayed taken JITMARLIN_LOCK_TIMEOUT_S."""
        if self._readonly or self._disk is None:
            yield False
            return
        with flock_timeout(self.directory / "locks" / f"{key[:32]}.lock") as held:
            yield held

    def _load(self, key: str, inputs: dict | None = None):
        disk = self._open()
        if disk is None:
            return None
        try:
            e = disk.get(key)
        except Exception as exc:  # unreadable or refused (pickle) row: treat as corrupt
            log.warning("jitmarlin: cache entry %s unreadable (%s); recompiling", key[:12], exc)
            self._delete(key)
            return None
        if e is None:
            return None
        problem = entry_problem(e)
        if problem is None and inputs is not None:
            problem = entry_mismatch(e, inputs)
        if problem:
            log.warning("jitmarlin: cache entry %s is corrupted (%s); dropping and recompiling", key[:12], problem)
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

    # The key hashes the rendered source's digest. Rendering costs ~17 ms in a fresh process
    # (parsing the templates), more than the rest of a warm hit, so the digest of each spec's
    # source under the current templates is kept in the store (SOURCE_PREFIX rows, JSON):
    # a warm hit renders nothing. A memo that disagrees with the render is found and replaced
    # before anything is compiled; an entry found through it is still checked against every key
    # input, and only the store's owner can write either (cache/README.md).
    def _memo_key(self, spec: Buildable) -> str:
        h = hashlib.sha256(f"{spec.canonical()}|{templates_digest()}|{__version__}".encode()).hexdigest()
        return SOURCE_PREFIX + h

    def _memo(self, spec: Buildable) -> str | None:
        disk = self._open()
        if disk is None:
            return None
        with contextlib.suppress(Exception):
            v = disk.get(self._memo_key(spec))
            if isinstance(v, str) and _KEY_RE.match(v):
                return v
        return None

    def _remember(self, spec: Buildable, digest: str) -> None:
        if self._disk is not None and not self._readonly:
            with contextlib.suppress(Exception):
                self._disk.set(self._memo_key(spec), digest)

    def _identity(self, spec: Buildable, arch: str, *, render_now: bool = False):
        """(key, source or None, key inputs) of `spec` on `arch`; the source is rendered only
        where no memo of its digest is stored (or render_now)."""
        known = self._keys.get((spec, arch))
        if known is None or (render_now and known[1] is None):
            digest = None if render_now else self._memo(spec)
            text = None
            if digest is None:
                text = render(spec)
                digest = source_digest(text)
                self._remember(spec, digest)
            inputs = key_inputs(spec.canonical(), digest, arch, nvrtc.version(), nvrtc.options_for(arch))
            known = self._keys[(spec, arch)] = (key_of(inputs), text, inputs)
        return known

    # ---- API ----
    def get(self, spec: Buildable, arch: str, *, compile_missing: bool = True):
        """The compiled kernel for `spec` (a KernelSpec or a DequantSpec: render() picks the
        template) on `arch`: memory, then disk, then the read-only tier, then NVRTC.

        Returns (artifact, key, status) with status 'memory', 'disk' (this cache or the
        read-only tier) or 'compiled'; with compile_missing=False returns (None, key, 'missing')
        instead of compiling.
        """
        spec = spec.kernel_spec()  # e.g. a whole-tile plan's kernel is the Stream-K plan's
        arch = source().target_arch(spec, arch)
        key, text, inputs = self._identity(spec, arch)
        art = self._mem.get(key)
        if art is not None:
            return art, key, "memory"
        art = self._load(key, inputs)
        if art is not None:
            log.info("jitmarlin: cache hit %s arch=%s", spec.name, arch)
            self._mem[key] = art
            return art, key, "disk"
        e = self._ro.get(key, inputs) if self._ro is not None else None
        if e is not None:
            log.info("jitmarlin: cache hit %s arch=%s (read-only tier %s)", spec.name, arch, self.ro_dir)
            art = self._mem[key] = _from_entry(e)
            return art, key, "disk"
        if not compile_missing:
            return None, key, "missing"
        if text is None:  # keyed by a memo: render, and start again if the memo was stale
            key2, text, inputs = self._identity(spec, arch, render_now=True)
            if key2 != key:
                log.warning("jitmarlin: stale source digest memo for %s; replaced", spec.name)
                return self.get(spec, arch, compile_missing=compile_missing)
        # Checked only before a compile: a hit never loads the NVRTC library (~50 ms).
        nvrtc.check_arch(arch)
        stored = False
        with self._flight(key) as held:
            if not held and self._disk is not None:
                log.warning(
                    "jitmarlin: the compile lock of %s stayed held by another process for "
                    "%.0f s (JITMARLIN_LOCK_TIMEOUT_S); compiling in memory, not stored",
                    spec.name,
                    lock_timeout_s(),
                )
            art = self._load(key, inputs)  # another process may have compiled it meanwhile
            if art is not None:
                # (no "compiled" in this line: logs are grepped for the one process that did)
                log.info("jitmarlin: cache hit %s arch=%s (waited for another process)", spec.name, arch)
                self._mem[key] = art
                return art, key, "disk"
            source().check_target(spec, arch)  # e.g. clusters on a GPU without them
            art = nvrtc.compile_source(text, spec.name, arch, spec)
            log.info("jitmarlin: compiled %s arch=%s in %.2f s", spec.name, arch, art.seconds)
            if held:
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

    def bad_rows(self) -> list[tuple[str, str, str]]:
        """(key, '?', problem) for rows no jitmarlin writes: keys stored pickled (raw=0)."""
        disk = self._open()
        if disk is None:
            return []
        return [
            (repr(k), "?", "key stored pickled (refused, never loaded)")
            for k in disk.iterkeys()
            if isinstance(k, NonRawKey)
        ]

    def _drop_bad_rows(self) -> None:
        with contextlib.suppress(Exception):
            self._disk._sql("DELETE FROM Cache WHERE raw = 0")

    def clear(self) -> int:
        """Remove every entry and every record (e.g. tuned choice) (a corrupt store and the directories of
        older, pickle-era caches are removed whole); returns how many entries there were."""
        self._mem.clear()
        disk = self._open()
        if disk is None:
            if self.corrupt:
                self.repair()
            return 0
        n = len(self.keys())
        self._drop_bad_rows()
        disk.clear()
        for name in LEGACY_DIRS:
            p = self.directory / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
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
            k = uk[len(USAGE_PREFIX) :]
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
        log.info(
            "jitmarlin: cache over its %.1f MB cap: evicted %d least recently used entries, %.1f MB left",
            self.max_bytes / MB,
            len(evicted),
            total / MB,
        )
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
            **{k.section: len(self.record_keys(k.prefix)) for k in record_kinds()},
        }

    # ---- checks ----
    def verify(self, fix: bool = False) -> list[tuple[str, str, str]]:
        """Check every entry: format, checksum of the decompressed cubin + PTX, and that its key
        is what its spec/arch/options/NVRTC hash to (where that can be recomputed); and every
        record, with its kind's check (tuned choices: fields, specs, key; a stale one is not bad).
        Returns (key, kernel name or the record kind's label, problem) for each bad one; fix=True
        deletes them."""
        disk = self._open()
        if disk is None:
            return []
        bad = self.bad_rows()
        if bad and fix:
            self._drop_bad_rows()
        for key in self.keys():
            try:
                e = disk.get(key)
            except Exception as exc:
                e, problem = None, f"unreadable ({exc})"
            else:
                if e is None:
                    continue  # deleted meanwhile
                problem = entry_problem(e) or key_problem(key, e, strict=True)
            if problem:
                name = e.get("name", "?") if isinstance(e, dict) else "?"
                bad.append((key, name, problem))
                if fix:
                    self._delete(key)
        for key in self.record_keys():
            kind = kind_of(key)
            try:
                rec = disk.get(key)
            except Exception as exc:
                problem = f"unreadable ({exc})"
            else:
                if rec is None:
                    continue
                problem = kind.check(key, rec)
            if problem:
                bad.append((key, kind.label, problem))
                if fix:
                    self.delete_record(key)
        return bad

    # ---- bundles ----
    # ---- raw entries (for jitmarlin.jit.bundle) ----
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

    # ---- records (JSON rows of a registered kind: jitmarlin.jit.records) ----
    def record_keys(self, prefix: str | None = None) -> list[str]:
        """Keys of every record on disk (of the kind with `prefix`, or of every kind)."""
        disk = self._open()
        return [] if disk is None else [k for k in disk.iterkeys() if _is_record_key(k, prefix)]

    def records(self, prefix: str | None = None) -> dict[str, object]:
        """key -> stored record (unchecked) for every record on disk (of `prefix`'s kind)."""
        disk = self._open()
        out = {}
        for key in self.record_keys(prefix):
            with contextlib.suppress(Exception):
                out[key] = disk.get(key)
        return out

    def get_record(self, key: str):
        """The stored record `key` (unchecked): this cache, then the read-only tier; None when
        absent or unreadable."""
        kind = _check_record_key(key)
        disk = self._open()
        rec = None
        if disk is not None:
            try:
                rec = disk.get(key)
            except Exception as exc:
                log.warning("jitmarlin: %s %s unreadable (%s)", kind.label, key, exc)
        if rec is None and self._ro is not None:
            rec = self._ro.get_record(key)
        return rec

    def has_record(self, key: str) -> bool:
        """Record `key` is stored in this cache (the read-only tier is not asked)."""
        disk = self._open()
        return disk is not None and key in disk

    def put_record(self, key: str, record: dict) -> bool:
        """Store (or replace) record `key`; False when the cache cannot be written."""
        kind = _check_record_key(key)
        disk = self._open()
        if disk is None:
            return False
        try:
            disk.set(key, record)
            return True
        except Exception as exc:
            log.warning("jitmarlin: could not store %s %s (%s)", kind.label, key, exc)
            return False

    def delete_record(self, key: str) -> None:
        _check_record_key(key)
        disk = self._open()
        if disk is not None:
            with contextlib.suppress(Exception):
                disk.delete(key)

    def record_lock(self, key: str):
        """Context manager: hold the lock of record `key` (e.g. one process tunes a problem at a
        time; the others wait, then read its result)."""
        _check_record_key(key)
        self._open()
        return self._flight(hashlib.sha256(key.encode()).hexdigest())


def _check_record_key(key):
    kind = kind_of(key)
    if kind is None:
        known = ", ".join(repr(k.prefix) for k in record_kinds())
        raise ValueError(f"record keys start with a registered prefix ({known}), got {key!r}")
    return kind


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
