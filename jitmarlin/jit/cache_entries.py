"""Cache entries: keys, the entry format and its checks, bundle members (JSON) and the read-only
tier's reader. Split from jitmarlin.jit.cache (which re-exports these names)."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import sqlite3
import time
import zlib
from pathlib import Path

from jitmarlin._version import __version__
from jitmarlin.jit import nvrtc
from jitmarlin.jit.records import kind_of, record_prefixes
from jitmarlin.jit.sources import Buildable, parse, render
from jitmarlin.jit.store_disk import ReadOnlySafeDisk, encode, read_bounded, tree_problem

log = logging.getLogger("jitmarlin")

ENTRY_FORMAT = 2  # 2: cubin and PTX stored zlib-compressed

# Usage rows (size, last_used, ...) live in the same diskcache store under this prefix, beside
# the entries, so a hit opens one SQLite database, not two.
USAGE_PREFIX = "usage:"
# Records (jitmarlin.jit.records: JSON rows of a registered kind, e.g. the tuned choices' "tune:")
# live in the same store under their kind's prefix. They are not kernel entries: no usage row,
# never evicted by the size cap, removed by clear(), carried by bundles.
# The sha256 of a spec's rendered source under the current templates (KernelCache._identity):
# "source:" + sha256(spec canonical form, templates digest, jitmarlin version) -> 64 hex chars.
SOURCE_PREFIX = "source:"

# The diskcache store (JSON rows, jitmarlin.store_disk). Caches written before it kept pickled
# rows in kernels/: never opened again (a miss, not an error); `cache clear` removes them.
STORE_DIR = "store"
LEGACY_DIRS = ("kernels", "jinja")
_TREE = ("locks", STORE_DIR, f"{STORE_DIR}/cache.db")  # checked by tree_problem on open

ENTRY_DIR = "entries"
_KEY_RE = re.compile(r"[0-9a-f]{64}\Z")
_REQUIRED = ("spec", "name", "arch", "cubin", "ptx", "log", "options", "nvrtc", "compile_seconds", "sha256")
_BLOBS = ("cubin", "ptx")  # bytes fields, base64 in bundles


# ---- keys ----------------------------------------------------------------------------------------


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def key_inputs(
    spec_canonical: str,
    source_sha256: str,
    arch: str,
    nvrtc_version,
    options,
    version: str = __version__,
    fmt: int = ENTRY_FORMAT,
) -> dict:
    """Everything the cache key hashes (stored in each entry, so the key can be re-derived)."""
    return {
        "format": fmt,
        "spec": spec_canonical,
        "source": source_sha256,
        "arch": arch,
        "nvrtc": list(nvrtc_version),
        "options": list(options),
        "jitmarlin": version,
    }


def key_of(inputs: dict) -> str:
    """sha256 (64 hex chars) of the key inputs."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _current_inputs(spec: Buildable, source: str, arch: str) -> dict:
    return key_inputs(spec.canonical(), source_digest(source), arch, nvrtc.version(), nvrtc.options_for(arch))


def cache_key(spec: Buildable, source: str, arch: str) -> str:
    return key_of(_current_inputs(spec, source, arch))


def entry_key_inputs(e: dict, *, render_missing: bool = True) -> dict | None:
    """The key inputs of entry `e`: stored ones, or for an entry written before they were stored
    by this jitmarlin version, rebuilt by rendering its spec (render_missing). None otherwise."""
    inputs = e.get("key_inputs")
    if isinstance(inputs, dict):
        return inputs
    if not render_missing or e.get("jitmarlin") != __version__:
        return None
    source = render(parse(e["spec"]))
    return key_inputs(
        e["spec"], source_digest(source), e["arch"], e["nvrtc"], e["options"], e["jitmarlin"], e["format"]
    )


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


def _to_entry(spec: Buildable, art: nvrtc.Artifact, inputs: dict | None = None) -> dict:
    e = {
        "format": ENTRY_FORMAT,
        "spec": spec.canonical(),
        "name": art.name,
        "arch": art.arch,
        "cubin": zlib.compress(art.cubin, 6),
        "ptx": zlib.compress(art.ptx.encode(), 6),
        "log": art.log,
        "options": list(art.options),
        "nvrtc": list(art.nvrtc_version),
        "compile_seconds": art.seconds,
        "resources": art.resources,
        "jitmarlin": __version__,
        "created": time.time(),
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
        name=e["name"],
        arch=e["arch"],
        cubin=cubin,
        ptx=ptx,
        log=e["log"],
        options=tuple(e["options"]),
        nvrtc_version=tuple(e["nvrtc"]),
        seconds=e["compile_seconds"],
        resources=e.get("resources", {}),
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
    """Bytes the entry takes in the store (its JSON encoding, jitmarlin.store_disk)."""
    return len(encode(e))


def entry_mismatch(e: dict, inputs: dict) -> str | None:
    """Why entry `e` is not the one asked for (key inputs `inputs`: spec, arch, NVRTC, options,
    format, jitmarlin version), or None. Checked on every load, after entry_problem: an entry
    copied under another key is never launched."""
    stored = e.get("key_inputs")
    if not isinstance(stored, dict):
        return "entry has no key inputs"
    for f in ("spec", "arch", "format", "options", "jitmarlin"):
        if e.get(f) != inputs.get(f):
            return f"entry is for {f} {e.get(f)!r}, not {inputs.get(f)!r}"
    for f in sorted(set(stored) | set(inputs)):
        if stored.get(f) != inputs.get(f):
            return f"entry's {f} is {stored.get(f)!r}, not {inputs.get(f)!r}"
    return None


def _usage_row(e: dict, last_used: float) -> dict:
    """The small per-entry row kept beside each entry: size (bytes), times (epoch seconds)."""
    return {
        "size": entry_size(e),
        "created": e.get("created", 0.0),
        "last_used": last_used,
        "arch": e.get("arch", "?"),
        "name": e.get("name", "?"),
    }


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
        con = _harden(sqlite3.connect(uri + "?mode=ro", uri=True, check_same_thread=False))
        con.execute("SELECT 1 FROM Cache LIMIT 1").fetchall()
        return con
    except sqlite3.OperationalError:
        return _harden(sqlite3.connect(uri + "?mode=ro&immutable=1", uri=True, check_same_thread=False))


def _harden(con: sqlite3.Connection) -> sqlite3.Connection:
    """The tier's database file is someone else's: its schema (views, triggers) is not trusted
    to call SQL functions (SQLite >= 3.31; older ones ignore the pragma)."""
    con.execute("PRAGMA trusted_schema = OFF")
    return con


class ReadOnlyTier:
    """Another cache, only ever read: a jitmarlin cache directory (its store/) or an unpacked
    bundle (manifest.json + entries/<key>.json). It is refused when writable by group or other
    or owned by another user than this one or root (cache/README.md, trust model). Entries are
    decoded as JSON only and checked (format, checksum, that they are the entry asked for)
    before use; nothing is written, so it may live on a read-only image mount."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).expanduser()
        self._db: sqlite3.Connection | None = None
        self._store = None
        self._warned = False
        self._bundle_records: dict[str, dict] = {}
        self._checked: str | None = None

    def _warn(self, msg: str, *args) -> None:
        if not self._warned:
            self._warned = True
            log.warning(msg, *args)

    def trust_problem(self) -> str | None:
        if self._checked is None:
            self._checked = tree_problem(self.directory, (STORE_DIR, ENTRY_DIR), owner_root_ok=True) or ""
        return self._checked or None

    def get(self, key: str, inputs: dict | None = None) -> dict | None:
        """The checked entry for `key` (and, given `inputs`, exactly the entry they describe),
        or None (absent, unreadable, untrusted or bad: warned, not fatal)."""
        problem = self.trust_problem()
        if problem:
            self._warn("jitmarlin: read-only cache %s not used: %s", self.directory, problem)
            return None
        try:
            e = self._fetch(key)
        except Exception as exc:
            self._warn("jitmarlin: read-only cache %s unreadable (%s)", self.directory, exc)
            return None
        if e is None:
            return None
        problem = entry_problem(e) or key_problem(key, e, render_missing=False, strict=True)
        if problem is None and inputs is not None:
            problem = entry_mismatch(e, inputs)
        if problem:
            log.warning("jitmarlin: read-only cache entry %s is bad (%s); ignoring it", key[:12], problem)
            return None
        return e

    def get_record(self, key: str):
        """The stored record `key` (unchecked: its kind checks it), or None. In an unpacked
        bundle, records are read from their kind's member."""
        if self.trust_problem():
            return None
        kind = kind_of(key)
        try:
            bundled = self.directory / kind.member if kind is not None else None
            if bundled is not None and bundled.is_file():
                if kind.member not in self._bundle_records:
                    d = json.loads(read_bounded(str(bundled)))
                    choices = d.get("choices") if isinstance(d, dict) else None
                    self._bundle_records[kind.member] = choices if isinstance(choices, dict) else {}
                return self._bundle_records[kind.member].get(key)
            return self._row(key)
        except Exception as exc:
            what = kind.label if kind is not None else "record"
            log.warning("jitmarlin: read-only cache %s: %s %s unreadable (%s)", self.directory, what, key, exc)
            return None

    def keys(self) -> list[str]:
        """Entry keys in the tier's store (for `cache` commands on a read-only cache dir)."""
        if self._connect() is None:
            return []
        rows = self._db.execute("SELECT key FROM Cache WHERE raw = 1").fetchall()
        return sorted(k for (k,) in rows if _is_entry_key(k))

    def _fetch(self, key: str):
        member = self.directory / ENTRY_DIR / f"{key}.json"
        if member.is_file():
            return entry_from_json(read_bounded(str(member)))
        return self._row(key)

    def _connect(self):
        db = self.directory / STORE_DIR / "cache.db"
        if self._db is None and db.is_file():
            # diskcache.Cache() writes its settings when it opens a store, so rows are read with
            # SQLite directly and decoded by SafeDisk (JSON only, pickle rows refused)
            self._db = _connect_ro(db)
            self._store = ReadOnlySafeDisk(str(db.parent))
        return self._db

    def _row(self, key: str):
        """The value stored under `key` in the tier's store, or None."""
        if self._connect() is None:
            return None
        row = self._db.execute("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
        return None if row is None else self._store.fetch(row[0], row[1], row[2], False)


def _is_entry_key(k) -> bool:
    return isinstance(k, str) and not k.startswith((USAGE_PREFIX, SOURCE_PREFIX, *record_prefixes()))


def _is_record_key(k, prefix: str | None = None) -> bool:
    """`k` is a record's key (of the kind with `prefix`, or of any registered kind)."""
    if prefix is not None:
        return isinstance(k, str) and k.startswith(prefix) and kind_of(k) is not None
    return kind_of(k) is not None
