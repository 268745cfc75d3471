"""Portable bundles of compiled kernels: one file that carries a cache's entries to another
machine (built on a CPU-only host, imported on GPU nodes, which then compile nothing).

A bundle is an uncompressed tar: manifest.json (bundle and entry format, jitmarlin version, and
per entry its key, kernel name, arch, spec, NVRTC version and checksums) and entries/<key>.json
(the entry as JSON, binary fields base64: importing never unpickles anything). Member metadata
is fixed and names are sorted, so the same entries give the same bytes.

Records (jitmarlin.jit.records) travel in their kind's member: the tuned choices
(jitmarlin.kernels.tuned) in tuned.json ({"format": 1, "choices": {key: record}}), listed in the
manifest's optional "tuned" section (key, winner spec, sha256 of the record's canonical JSON).
Bundles without the section (older ones) import as before, and older
jitmarlins ignore it.

A bundle is untrusted input: import reads a plain tar only (no decompression), regular-file
members with the expected names only, each member and the whole under a size cap, and checks
everything before it writes anything. Its checksums prove integrity, not authenticity: pin a
bundle by its digest (import_bundle(sha256=...), `cache import --sha256`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from jitmarlin._version import __version__
from jitmarlin.errors import InputError
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import (
    _KEY_RE,
    ENTRY_DIR,
    ENTRY_FORMAT,
    KernelCache,
    entry_from_json,
    entry_key_inputs,
    entry_problem,
    entry_to_json,
    key_problem,
)
from jitmarlin.jit.profiles import ARCH_DEFAULT_PROFILE
from jitmarlin.jit.records import RecordKind, canonical_json, record_kinds

log = logging.getLogger("jitmarlin")

BUNDLE_FORMAT = 1
MANIFEST_NAME = "manifest.json"

# Caps on what an import reads (a bundle is untrusted: a header may claim any size)
MAX_MEMBER_BYTES = 64 << 20
MAX_TOTAL_BYTES = 2 << 30
MAX_MEMBERS = 200_000
_MEMBER_NAME = re.compile(rf"({re.escape(MANIFEST_NAME)}|{ENTRY_DIR}/[0-9a-f]{{64}}\.json)\Z")


def _member_ok(name: str) -> bool:
    """A member name a bundle may hold: the manifest, an entry, or a record kind's member."""
    return bool(_MEMBER_NAME.match(name)) or name in {k.member for k in record_kinds()}


_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


class BundleError(InputError):
    """A file that is not a sound plain jitmarlin bundle (compressed, truncated, oversized,
    malformed, or not the pinned digest): refused whole, the cache left untouched."""


class _Skip(str):
    """A reason to leave an entry out that is not damage: another jitmarlin/NVRTC/format."""


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a member with fixed metadata (mtime 0, root, 0644): same entries -> same bytes."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_members(path) -> dict[str, bytes]:
    """{name: bytes} of a plain-tar bundle's members, every header checked (regular file, known
    name, under the caps, inside the file) before any member is read. Raises BundleError."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise InputError(f"cannot read bundle {path}: {exc}") from None
    for magic, kind in _COMPRESSED:
        if head.startswith(magic):
            raise BundleError(f"{path} is {kind}-compressed: bundles are plain tar files (decompress it first)")
    if size > MAX_TOTAL_BYTES + (64 << 20):
        raise BundleError(f"{path} is larger than the {MAX_TOTAL_BYTES >> 20} MiB bundle cap")
    infos, dropped, total = {}, set(), 0
    try:
        with tarfile.open(path, "r:") as tar:  # "r:", not "r:*": never a decompressor
            while True:
                info = tar.next()
                if info is None:
                    break
                name = info.name
                if len(infos) + len(dropped) >= MAX_MEMBERS:
                    raise BundleError(f"{path}: more than {MAX_MEMBERS} members")
                if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    raise BundleError(f"{path}: member {name!r} is not a regular file")
                if not _member_ok(name):
                    raise BundleError(f"{path}: unexpected member {name!r}")
                if info.size > MAX_MEMBER_BYTES:
                    raise BundleError(
                        f"{path}: member {name} claims {info.size} bytes (cap {MAX_MEMBER_BYTES >> 20} MiB a member)"
                    )
                total += info.size
                if total > MAX_TOTAL_BYTES:
                    raise BundleError(f"{path}: members total over the {MAX_TOTAL_BYTES >> 20} MiB cap")
                if info.offset_data + info.size > size:
                    raise BundleError(f"{path} is truncated (member {name} runs past its end)")
                if name in infos or name in dropped:  # which copy is real? neither is read
                    if name == MANIFEST_NAME:
                        raise BundleError(f"{path}: {MANIFEST_NAME} appears twice")
                    infos.pop(name, None)
                    dropped.add(name)
                    continue
                infos[name] = info
            members = {}
            for name, info in infos.items():
                f = tar.extractfile(info)
                data = f.read(info.size) if f is not None else b""
                if len(data) != info.size:
                    raise BundleError(f"{path} is truncated (member {name})")
                members[name] = data
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BundleError(f"{path} is not a readable bundle ({exc})") from None
    for name in dropped:
        members[name] = None  # (reported by the entry that names it)
    return members


def _read_manifest(members: dict, path) -> dict:
    data = members.get(MANIFEST_NAME)
    try:
        manifest = json.loads(data) if data is not None else None
    except ValueError as exc:
        raise BundleError(f"{path}: {MANIFEST_NAME} is not JSON ({exc}); not a jitmarlin bundle") from None
    if data is None:
        raise BundleError(f"{path}: no {MANIFEST_NAME}; not a jitmarlin bundle")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list):
        raise BundleError(f"{path}: {MANIFEST_NAME} is not a jitmarlin bundle manifest")
    if manifest.get("bundle_format") != BUNDLE_FORMAT:
        raise BundleError(
            f"{path}: bundle format {manifest.get('bundle_format')!r}, this jitmarlin reads format {BUNDLE_FORMAT}"
        )
    return manifest


def _current_nvrtc():
    try:
        return list(nvrtc.version())
    except Exception:  # no NVRTC here: nothing to compare against (keys use the same call)
        return None


def _bundle_entry(members: dict, item, nv) -> tuple[str, dict | None, str | None]:
    """(key, entry, None) for a sound bundle entry of this jitmarlin/NVRTC/format, else (key,
    None, reason): a _Skip for another version, a plain str for damage."""
    key = item.get("key") if isinstance(item, dict) else None
    if not isinstance(key, str) or not _KEY_RE.match(key):
        return str(key), None, "malformed manifest entry"
    # The member name is derived from the key, never taken from the bundle (no path games).
    name = f"{ENTRY_DIR}/{key}.json"
    if name in members and members[name] is None:
        return key, None, f"{name} appears twice in the bundle"
    data = members.get(name)
    if data is None:
        return key, None, f"{name} missing from the bundle"
    if hashlib.sha256(data).hexdigest() != item.get("file_sha256"):
        return key, None, f"{name} altered (its sha256 does not match the manifest)"
    try:
        e = entry_from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        return key, None, f"{name} is not a valid entry ({exc})"
    ki = e.get("key_inputs")
    if isinstance(ki, dict) and e.get("format") == ki.get("format") != ENTRY_FORMAT:
        return key, None, _Skip(f"entry format {e.get('format')!r}, this jitmarlin reads format {ENTRY_FORMAT}")
    problem = entry_problem(e)
    if problem is None:
        for f in ("name", "arch", "spec", "sha256"):
            if item.get(f) != e.get(f):
                problem = f"manifest and entry disagree on {f}"
                break
    if problem is None:
        problem = key_problem(key, e, strict=True)
    if problem:
        return key, None, problem
    # Sound, but only this jitmarlin and NVRTC ever look its key up: importing it would only
    # take room (and push current kernels out under the size cap).
    if e.get("jitmarlin") != __version__:
        return key, None, _Skip(f"built by jitmarlin {e.get('jitmarlin')}, this is {__version__}")
    if nv is not None and e["key_inputs"].get("nvrtc") != nv:
        return key, None, _Skip(f"built for NVRTC {e['key_inputs'].get('nvrtc')}, this is {nv}")
    return key, e, None


@dataclass
class ImportReport:
    """What import_bundle did: counts of entries, and (key, reason) for each one refused."""

    imported: int = 0
    present: int = 0
    rejected: list = field(default_factory=list)
    evicted: int = 0
    records_imported: dict = field(default_factory=dict)  # record kind's section -> count
    records_present: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)  # (key, reason): another jitmarlin/NVRTC/format


# ---- read-only tier ------------------------------------------------------------------------------


def export_bundle(
    cache: KernelCache, path: str | os.PathLike, keys=None, *, archs=None, allow_empty: bool = False
) -> dict:
    """Write a bundle (uncompressed tar: manifest.json + entries/<key>.json, fixed member
    metadata, sorted: the same entries give the same bytes) of every sound entry, or only
    `keys` / only `archs` (e.g. {'sm_90'}), and the records of every registered kind (all, or
    those whose key is in `keys`; only `archs`' ones). Returns {'exported': n, <section>: count
    (e.g. 'tuned': t), 'skipped': [(key, reason)],
    'path': str}. An unknown arch, or an empty bundle unless allow_empty, is a BundleError
    (no file written)."""
    want = set(keys) if keys is not None else None
    archs = set(archs) if archs else None
    unknown = sorted(a for a in archs or () if a.removesuffix("a") not in ARCH_DEFAULT_PROFILE)
    if unknown:
        raise BundleError(f"unknown arch {', '.join(unknown)} (known: {', '.join(ARCH_DEFAULT_PROFILE)}, sm_90a)")
    skipped, members, listed = [], [], []
    for key in sorted(cache.keys()):
        if want is not None and key not in want:
            continue
        try:
            e = cache.raw(key)
        except Exception as exc:
            skipped.append((key, f"unreadable ({exc})"))
            continue
        if archs is not None and (not isinstance(e, dict) or e.get("arch") not in archs):
            continue
        problem = entry_problem(e) or key_problem(key, e, strict=True)
        if problem:
            skipped.append((key, problem))
            continue
        # bundles always carry key inputs, so every import can re-derive the key
        e = dict(e, key_inputs=entry_key_inputs(e))
        data = entry_to_json(e)
        members.append((f"{ENTRY_DIR}/{key}.json", data))
        listed.append(
            {
                "key": key,
                "name": e["name"],
                "arch": e["arch"],
                "spec": e["spec"],
                "nvrtc": list(e["nvrtc"]),
                "sha256": e["sha256"],
                "file_sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    sections = {kind: _export_records(cache, kind, want, archs, skipped) for kind in record_kinds()}
    if want is not None:
        have = set(cache.keys()) | set(cache.record_keys())
        skipped += [(k, "not in the cache") for k in sorted(want - have)]
    if not listed and not any(items for items, _ in sections.values()) and not allow_empty:
        what = f" for {', '.join(sorted(archs))}" if archs else ""
        raise BundleError(f"nothing to export{what} from {cache.directory}: no sound entries; no bundle written")
    manifest = {
        "bundle_format": BUNDLE_FORMAT,
        "entry_format": ENTRY_FORMAT,
        "jitmarlin": __version__,
        "entries": listed,
    }
    for kind, (items, choices) in sections.items():
        if items:
            manifest[kind.section] = items
            members.append(
                (
                    kind.member,
                    json.dumps(
                        {"format": kind.format, "choices": choices}, sort_keys=True, separators=(",", ":")
                    ).encode(),
                )
            )
    _write_bundle(Path(path), manifest, members)
    return {
        "exported": len(listed),
        **{k.section: len(s[0]) for k, s in sections.items()},
        "skipped": skipped,
        "path": str(path),
    }


def _export_records(cache: KernelCache, kind: RecordKind, want, archs, skipped):
    """(manifest items, {key: record}) of the sound records of `kind` to export (a record with an
    "arch" field only for `archs`); bad ones are added to `skipped` with their reason."""
    items, choices = [], {}
    for key, rec in sorted(cache.records(kind.prefix).items()):
        if want is not None and key not in want:
            continue
        if archs is not None and (not isinstance(rec, dict) or rec.get("arch") not in archs):
            continue
        problem = kind.check(key, rec)
        if problem:
            skipped.append((key, problem))
            continue
        choices[key] = rec
        item = {"key": key, "spec": rec.get("spec"), "sha256": hashlib.sha256(canonical_json(rec)).hexdigest()}
        items.append(item)
    return items, choices


def _bundle_records(members: dict, manifest: dict, kind: RecordKind):
    """[(key, record, None) or (key, None, reason)] for the manifest's section of record kind
    `kind` ([] when the bundle has none)."""
    section, member, label = kind.section, kind.member, kind.label
    items = manifest.get(section)
    if items is None:
        return []
    if not isinstance(items, list):
        return [(section, None, f"malformed {section} section in the manifest")]
    choices, why = None, None
    data = members.get(member)
    if data is None:
        why = f"{member} missing from the bundle (or listed twice)"
    else:
        try:
            d = json.loads(data)
            choices = d.get("choices") if isinstance(d, dict) else None
            if not isinstance(choices, dict):
                why = f"{member} is not a {label.replace(' ', '-')} member"
        except ValueError as exc:
            why = f"{member} is not valid JSON ({exc})"
    out = []
    for item in items:
        key = item.get("key") if isinstance(item, dict) else None
        if not isinstance(key, str) or not key.startswith(kind.prefix):
            out.append((str(key), None, f"malformed {section} entry in the manifest"))
        elif why:
            out.append((key, None, why))
        elif key not in choices:
            out.append((key, None, f"listed in the manifest but not in {member}"))
        elif hashlib.sha256(canonical_json(choices[key])).hexdigest() != item.get("sha256"):
            out.append((key, None, f"{label} altered (its sha256 does not match the manifest)"))
        else:
            problem = kind.check(key, choices[key])
            if problem is None and item.get("spec") != choices[key].get("spec"):
                problem = f"manifest and {label} disagree on spec"
            out.append((key, None, problem) if problem else (key, choices[key], None))
    return out


def _write_bundle(path: Path, manifest: dict, members) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            _tar_add(tar, MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True).encode())
            for name, data in members:
                _tar_add(tar, name, data)
        os.replace(tmp, path)  # readers never see a half-written bundle
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise InputError(f"cannot write bundle {path}: {exc}") from None


def _store_items(items, seen: set, report: ImportReport, has, put) -> tuple[list, int]:
    """Store the bundle's checked (key, record, problem) items with `put` unless `has` them:
    (keys stored, count already present). Refusals (a problem, a key listed twice, a failed
    store) go to report.rejected."""
    stored, present = [], 0
    for key, rec, problem in items:
        if problem is None and key in seen:
            problem = "listed twice in the manifest"
        if isinstance(problem, _Skip):
            report.skipped.append((key, str(problem)))
            continue
        if problem:
            report.rejected.append((key, problem))
            continue
        seen.add(key)
        if has(key):
            present += 1
        elif put(key, rec):
            stored.append(key)
        else:
            report.rejected.append((key, "could not be stored"))
    return stored, present


def import_bundle(cache: KernelCache, path: str | os.PathLike, *, sha256: str | None = None) -> ImportReport:
    """Merge a bundle written by export_bundle(): every entry is checked (its member's sha256
    against the manifest, entry format, checksum, key re-derived from its inputs) and stored
    unless its key is already here (existing entries are kept); so is every record (its sha256
    against the manifest, then its kind's check: for a tuned choice its fields, specs, key
    re-derived from the record). Entries
    of another jitmarlin, NVRTC or entry format are skipped (report.skipped), never stored.

    sha256: the bundle's expected digest (hex); a mismatch is refused before it is parsed.
    Raises BundleError when the file is not a sound plain bundle (nothing is written then),
    InputError when it cannot be read or this cache cannot be written."""
    if sha256 is not None:
        want = sha256.strip().lower()
        try:
            got = file_sha256(path)
        except OSError as exc:
            raise InputError(f"cannot read bundle {path}: {exc}") from None
        if got != want:
            raise BundleError(f"{path}: sha256 {got} is not the pinned {want}; not imported")
    if not cache.writable:
        raise InputError(f"cannot import into {cache.directory}: the cache is not writable")
    members = _read_members(path)
    manifest = _read_manifest(members, path)
    # everything is checked before anything is written
    nv = _current_nvrtc()
    entries = [_bundle_entry(members, item, nv) for item in manifest["entries"]]
    records = {kind: _bundle_records(members, manifest, kind) for kind in record_kinds()}
    report, seen = ImportReport(), set()
    ok, present = _store_items(entries, seen, report, cache.has, cache.put_entry)
    report.imported, report.present, added = len(ok), present, ok
    for kind, items in records.items():
        ok, present = _store_items(items, seen, report, cache.has_record, cache.put_record)
        report.records_imported[kind.section], report.records_present[kind.section] = len(ok), present
    if added:
        report.evicted = len(cache.enforce_cap(keep=set(added)))
    return report
