"""Portable bundles of compiled kernels: one file that carries a cache's entries to another
machine (built on a CPU-only host, imported on GPU nodes, which then compile nothing).

A bundle is an uncompressed tar: manifest.json (bundle and entry format, jitmarlin version, and
per entry its key, kernel name, arch, spec, NVRTC version and checksums) and entries/<key>.json
(the entry as JSON, binary fields base64: importing never unpickles anything). Member metadata
is fixed and names are sorted, so the same entries give the same bytes.

Tuned choices (jitmarlin.tune) travel in tuned.json ({"format": 1, "choices": {key: record}}),
listed in the manifest's optional "tuned" section (key, winner spec, sha256 of the record's
canonical JSON). Bundles without the section (older ones) import as before, and older
jitmarlins ignore it.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from ._version import __version__
from . import tune
from .cache import (_KEY_RE, ENTRY_DIR, ENTRY_FORMAT, TUNE_PREFIX, TUNED_MEMBER, KernelCache,
                    entry_from_json, entry_key_inputs, entry_problem, entry_to_json, key_problem)
from .errors import InputError

log = logging.getLogger("jitmarlin")

BUNDLE_FORMAT = 1
MANIFEST_NAME = "manifest.json"


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a member with fixed metadata (mtime 0, root, 0644): same entries -> same bytes."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def _read_manifest(tar: tarfile.TarFile, path) -> dict:
    try:
        f = tar.extractfile(MANIFEST_NAME)
        manifest = json.loads(f.read()) if f is not None else None
    except (KeyError, ValueError) as exc:
        raise InputError(f"{path}: no readable {MANIFEST_NAME} ({exc}); not a jitmarlin bundle") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list):
        raise InputError(f"{path}: {MANIFEST_NAME} is not a jitmarlin bundle manifest")
    if manifest.get("bundle_format") != BUNDLE_FORMAT:
        raise InputError(f"{path}: bundle format {manifest.get('bundle_format')!r}, this "
                         f"jitmarlin reads format {BUNDLE_FORMAT}")
    return manifest


def _bundle_entry(tar: tarfile.TarFile, item) -> tuple[str, dict | None, str | None]:
    """(key, entry, None) for a sound bundle entry, else (key, None, reason)."""
    key = item.get("key") if isinstance(item, dict) else None
    if not isinstance(key, str) or not _KEY_RE.match(key):
        return str(key), None, "malformed manifest entry"
    # The member name is derived from the key, never taken from the bundle (no path games).
    name = f"{ENTRY_DIR}/{key}.json"
    try:
        f = tar.extractfile(name)
        data = f.read() if f is not None else None
    except KeyError:
        data = None
    if data is None:
        return key, None, f"{name} missing from the bundle"
    if hashlib.sha256(data).hexdigest() != item.get("file_sha256"):
        return key, None, f"{name} altered (its sha256 does not match the manifest)"
    try:
        e = entry_from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        return key, None, f"{name} is not a valid entry ({exc})"
    problem = entry_problem(e)
    if problem is None:
        for f in ("name", "arch", "spec", "sha256"):
            if item.get(f) != e.get(f):
                problem = f"manifest and entry disagree on {f}"
                break
    if problem is None:
        problem = key_problem(key, e, strict=True)
    return (key, None, problem) if problem else (key, e, None)


@dataclass
class ImportReport:
    """What import_bundle did: counts of entries, and (key, reason) for each one refused."""

    imported: int = 0
    present: int = 0
    rejected: list = field(default_factory=list)
    evicted: int = 0
    tuned_imported: int = 0
    tuned_present: int = 0


# ---- read-only tier ------------------------------------------------------------------------------

def export_bundle(cache: KernelCache, path: str | os.PathLike, keys=None, *, archs=None) -> dict:
    """Write a bundle (uncompressed tar: manifest.json + entries/<key>.json, fixed member
    metadata, sorted: the same entries give the same bytes) of every sound entry, or only
    `keys` / only `archs` (e.g. {'sm_90'}), and the tuned choices (all, or those whose key is in
    `keys`; only `archs`' ones). Returns {'exported': n, 'tuned': t, 'skipped': [(key, reason)],
    'path': str}."""
    want = set(keys) if keys is not None else None
    archs = set(archs) if archs else None
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
        listed.append({
            "key": key, "name": e["name"], "arch": e["arch"], "spec": e["spec"],
            "nvrtc": list(e["nvrtc"]), "sha256": e["sha256"],
            "file_sha256": hashlib.sha256(data).hexdigest(),
        })
    tuned_items, choices = _export_tuned(cache, want, archs, skipped)
    if want is not None:
        have = set(cache.keys()) | set(cache.tuned_keys())
        skipped += [(k, "not in the cache") for k in sorted(want - have)]
    manifest = {"bundle_format": BUNDLE_FORMAT, "entry_format": ENTRY_FORMAT,
                "jitmarlin": __version__, "entries": listed}
    if tuned_items:
        manifest["tuned"] = tuned_items
        members.append((TUNED_MEMBER, json.dumps({"format": tune.RECORD_FORMAT, "choices": choices},
                                                 sort_keys=True, separators=(",", ":")).encode()))
    _write_bundle(Path(path), manifest, members)
    return {"exported": len(listed), "tuned": len(tuned_items), "skipped": skipped,
            "path": str(path)}


def _export_tuned(cache: KernelCache, want, archs, skipped):
    """(manifest items, {key: record}) of the sound tuned choices to export; bad ones are added
    to `skipped` with their reason."""
    items, choices = [], {}
    for key, rec in sorted(cache.tuned().items()):
        if want is not None and key not in want:
            continue
        if archs is not None and (not isinstance(rec, dict) or rec.get("arch") not in archs):
            continue
        problem = tune.record_problem(key, rec)
        if problem:
            skipped.append((key, problem))
            continue
        choices[key] = rec
        items.append({"key": key, "spec": rec["spec"],
                      "sha256": hashlib.sha256(tune.canonical_json(rec)).hexdigest()})
    return items, choices


def _bundle_tuned(tar: tarfile.TarFile, manifest: dict):
    """[(key, record, None) or (key, None, reason)] for the manifest's tuned section ([] when the
    bundle has none)."""
    items = manifest.get("tuned")
    if items is None:
        return []
    if not isinstance(items, list):
        return [("tuned", None, "malformed tuned section in the manifest")]
    choices, why = None, None
    try:
        f = tar.extractfile(TUNED_MEMBER)
        d = json.loads(f.read()) if f is not None else None
        choices = d.get("choices") if isinstance(d, dict) else None
        if not isinstance(choices, dict):
            why = f"{TUNED_MEMBER} is not a tuned-choice member"
    except KeyError:
        why = f"{TUNED_MEMBER} missing from the bundle"
    except ValueError as exc:
        why = f"{TUNED_MEMBER} is not valid JSON ({exc})"
    out = []
    for item in items:
        key = item.get("key") if isinstance(item, dict) else None
        if not isinstance(key, str) or not key.startswith(TUNE_PREFIX):
            out.append((str(key), None, "malformed tuned entry in the manifest"))
        elif why:
            out.append((key, None, why))
        elif key not in choices:
            out.append((key, None, f"listed in the manifest but not in {TUNED_MEMBER}"))
        elif hashlib.sha256(tune.canonical_json(choices[key])).hexdigest() != item.get("sha256"):
            out.append((key, None, "tuned choice altered (its sha256 does not match the manifest)"))
        else:
            problem = tune.record_problem(key, choices[key])
            if problem is None and item.get("spec") != choices[key].get("spec"):
                problem = "manifest and tuned choice disagree on spec"
            out.append((key, None, problem) if problem else (key, choices[key], None))
    return out

def _write_bundle(path: Path, manifest: dict, members) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            _tar_add(tar, MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True).encode())
            for name, data in members:
                _tar_add(tar, name, data)
        os.replace(tmp, path)   # readers never see a half-written bundle
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


def import_bundle(cache: KernelCache, path: str | os.PathLike) -> ImportReport:
    """Merge a bundle written by export_bundle(): every entry is checked (its member's sha256
    against the manifest, entry format, checksum, key re-derived from its inputs) and stored
    unless its key is already here (existing entries are kept); so is every tuned choice (its
    sha256 against the manifest, record fields, specs, key re-derived from the record). Raises
    InputError when the file is not a bundle or this cache cannot be written."""
    if not cache.writable:
        raise InputError(f"cannot import into {cache.directory}: the cache is not writable")
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise InputError(f"{path} is not a readable bundle ({exc})") from None
    report, seen = ImportReport(), set()
    with tar:
        manifest = _read_manifest(tar, path)
        if manifest.get("jitmarlin") != __version__:
            log.warning("jitmarlin: bundle %s was built by jitmarlin %s (this is %s): its "
                        "kernels are only found by that version", path,
                        manifest.get("jitmarlin"), __version__)
        entries = (_bundle_entry(tar, item) for item in manifest["entries"])
        ok, present = _store_items(entries, seen, report, cache.has, cache.put_entry)
        report.imported, report.present, added = len(ok), present, ok
        ok, present = _store_items(_bundle_tuned(tar, manifest), seen, report, cache.has_tuned,
                                   cache.put_tuned)
        report.tuned_imported, report.tuned_present = len(ok), present
    if added:
        report.evicted = len(cache.enforce_cap(keep=set(added)))
    return report



