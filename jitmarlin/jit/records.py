"""Generic JSON records kept in the kernel store beside the compiled kernels, by key prefix.

The store knows no record format: a layer above registers a RecordKind (its key prefix, how to
check a record, and how bundles carry it) at import, and reads and writes its records through
KernelCache.get_record / put_record / records / record_lock. Records are JSON (the store never
unpickles), never evicted by the size cap, removed by clear(), checked by verify() with the
kind's own check and carried by bundles in the kind's member. The tuned choices
(jitmarlin.kernels.tuned, "tune:" rows) are the one kind today.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class RecordKind:
    """prefix: every key of the kind starts with it (e.g. 'tune:'). label: how verify() names a
    bad one. section: its name in a bundle's manifest, in export results and in stats().
    member: the bundle member that holds the records ({"format": format, "choices": {key:
    record}}). check(key, record) -> why the record is bad, or None."""

    prefix: str
    label: str
    section: str
    member: str
    format: int
    check: Callable[[str, object], "str | None"]


_KINDS: dict[str, RecordKind] = {}


def register_record_kind(kind: RecordKind) -> RecordKind:
    """Declare a kind of record (idempotent: the same prefix replaces the earlier declaration)."""
    if not kind.prefix or not kind.prefix.endswith(":"):
        raise ValueError(f"a record prefix ends with ':', got {kind.prefix!r}")
    _KINDS[kind.prefix] = kind
    return kind


def record_kinds() -> list[RecordKind]:
    return list(_KINDS.values())


def kind_of(key) -> RecordKind | None:
    """The registered kind whose prefix `key` starts with, or None."""
    if isinstance(key, str):
        for prefix, kind in _KINDS.items():
            if key.startswith(prefix):
                return kind
    return None


def record_prefixes() -> tuple[str, ...]:
    return tuple(_KINDS)


def canonical_json(d: dict) -> bytes:
    """A record as deterministic JSON bytes (bundles hash these)."""
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
