"""`jitmarlin cache ACTION`: list, check, clear, export and import the kernel cache (cli.py's
cache subcommand; see cache/README.md)."""

from __future__ import annotations

import json
import sys
import time

from jitmarlin.kernels.tuned import TUNE_PREFIX


def _tuned_lines(cache) -> list[str]:
    """`cache ls`'s section on tuned choices (empty when there are none)."""
    from jitmarlin.service.tune import TunedChoice, describe_spec

    tuned = cache.records(TUNE_PREFIX)
    if not tuned:
        return []
    lines = ["tuned choices (GPU, arch, problem bucket: winner, us per call, default us):"]
    stale = 0
    for key, rec in sorted(tuned.items()):
        try:
            c = TunedChoice.from_dict(rec)
        except ValueError as e:
            lines.append(f"  {key}  bad record ({e})")
            continue
        stale += c.stale
        flag = "  [stale: other jitmarlin or templates, not used]" if c.stale else ""
        winner = describe_spec(c.spec, c.kind) if c.improved else "planner's choice"
        lines.append(
            f"  {c.gpu} {c.arch} {c.qtype} {c.act} g{c.group_size} N={c.n} K={c.k} "
            f"M<={c.m_bucket}: {winner} {c.us:.1f} us, default {c.default_us:.1f} us "
            f"(x{c.speedup:.2f}){flag}"
        )
    lines.append(f"{len(tuned)} tuned choices ({stale} stale)")
    return lines


def cmd_cache(args) -> int:
    """`jitmarlin cache ACTION`: ls, stats, verify, clear, export, import (see cache/README.md)."""
    from jitmarlin.jit.cache import MB, KernelCache, default_cache

    cache = KernelCache(args.cache_dir) if args.cache_dir else default_cache()

    def when(t):  # epoch seconds -> local time, '-' when unknown
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"

    if args.action in ("export", "import"):
        from jitmarlin.jit.bundle import BundleError

        try:
            return _cache_bundle(cache, args)
        except BundleError as e:  # a bad bundle or an empty export: one line, exit 1
            print(f"jitmarlin: error: {e}", file=sys.stderr)
            return 1
    state, problem = cache.health()
    if state != "ok" and getattr(args, "json", False):
        print(
            json.dumps(
                {"directory": str(cache.directory), "state": state, "problem": problem, "entries": None}, indent=2
            )
        )
        return 1
    if state != "ok":
        return _cache_unhealthy(cache, args.action, state, problem, getattr(args, "fix", False))
    if args.action == "ls":
        rows = sorted(cache.usage().items(), key=lambda kv: (kv[1]["arch"], kv[1]["name"], kv[0]))
        print(f"{'key':16}  {'arch':7} {'KiB':>8}  {'created':16}  {'last used':16}  kernel")
        for key, r in rows:
            print(
                f"{key[:16]}  {r['arch']:7} {r['size'] / 1024:8.1f}  {when(r['created'])}  "
                f"{when(r['last_used'])}  {r['name']}"
            )
        total = sum(r["size"] for _, r in rows)
        print(f"{len(rows)} entries, {total / MB:.1f} MB in {cache.directory}")
        for line in _tuned_lines(cache):
            print(line)
    elif args.action == "stats":
        st = cache.stats()
        if args.json:
            print(json.dumps(st, indent=2))
            return 0
        archs = ", ".join(f"{a}: {n}" for a, n in st["archs"].items()) or "-"
        cap = f"{st['cap_bytes'] / MB:.0f} MB" if st["cap_bytes"] else "none"
        for label, value in (
            ("directory", st["directory"]),
            ("entries", st["entries"]),
            ("size", f"{st['bytes'] / MB:.1f} MB (cap {cap})"),
            ("archs", archs),
            ("oldest", when(st["oldest"])),
            ("newest", when(st["newest"])),
            ("last used", when(st["last_used"])),
            ("tuned choices", st["tuned"]),
            ("read-only tier", st["read_only_tier"] or "-"),
        ):
            print(f"{label:15} {value}")
    elif args.action == "verify":
        n, t = len(cache.keys()), len(cache.record_keys(TUNE_PREFIX))
        bad = cache.verify(fix=args.fix)
        for key, name, problem in bad:
            print(f"{_short(key)}  {name}  {problem}")
        done = ", removed" if args.fix and bad else ""
        tuned = f" and {t} tuned choices" if t else ""
        print(f"{n} entries{tuned} checked, {len(bad)} bad{done} in {cache.directory}")
        return 1 if bad else 0
    elif args.action == "clear":
        t = len(cache.record_keys(TUNE_PREFIX))
        n = cache.clear()
        tuned = f" and {t} tuned choices" if t else ""
        print(f"removed {n} entries{tuned} from {cache.directory}")
    return 0


def _cache_bundle(cache, args) -> int:
    """`cache export` / `cache import` (BundleError propagates: cmd_cache prints it)."""
    if args.action == "export":
        archs = [a.strip() for a in args.arch.split(",") if a.strip()] if args.arch else None
        from jitmarlin.jit.bundle import export_bundle

        r = export_bundle(cache, args.file, archs=archs)
        for key, why in r["skipped"]:
            print(f"skipped {_short(key)}  {why}", file=sys.stderr)
        tuned = f" and {r['tuned']} tuned choices" if r["tuned"] else ""
        print(f"exported {r['exported']} kernels{tuned} to {r['path']}")
        return 0
    from jitmarlin.jit.bundle import import_bundle

    r = import_bundle(cache, args.file, sha256=args.sha256)
    for key, why in r.rejected:
        print(f"rejected {_short(key)}  {why}", file=sys.stderr)
    for key, why in r.skipped:
        print(f"skipped {_short(key)}  {why}", file=sys.stderr)
    imported, present = r.records_imported.get("tuned", 0), r.records_present.get("tuned", 0)
    tuned = f"; tuned choices: imported {imported}, already present {present}" if imported or present else ""
    skipped = f", skipped {len(r.skipped)} (other jitmarlin/NVRTC/format)" if r.skipped else ""
    print(
        f"imported {r.imported}, already present {r.present}, rejected {len(r.rejected)}"
        f"{skipped} into {cache.directory}{tuned}"
    )
    return 1 if r.rejected or (r.skipped and not r.imported) else 0


def _cache_unhealthy(cache, action: str, state: str, problem, fix: bool) -> int:
    """`cache ls/stats/verify/clear` on a cache that is refused, corrupt or read-only: say so
    (never "0 entries"); verify --fix and clear remove a corrupt store."""
    d = cache.directory
    if state == "refused":
        print(f"jitmarlin: error: cache dir {d} refused: {problem}", file=sys.stderr)
        return 1
    if state == "corrupt":
        if action == "clear" or (action == "verify" and fix):
            cache.repair()
            print(f"{d}: removed the corrupt store ({problem})")
            return 0 if action == "clear" else 1
        print(
            f"jitmarlin: error: {problem}; `jitmarlin cache verify --fix` or `cache clear` removes it", file=sys.stderr
        )
        return 1
    # read-only: what is there is listed through the read-only reader (nothing written)
    from jitmarlin.jit.cache import entry_problem, key_problem

    if action == "clear" or (action == "verify" and fix):
        print(f"jitmarlin: error: cache dir {d} is read-only: nothing removed", file=sys.stderr)
        return 1
    view = cache.readonly_view()
    keys = view.keys()
    bad = []
    for key in keys:
        try:
            e = view._fetch(key)
            why = entry_problem(e) or key_problem(key, e, render_missing=False, strict=True)
        except Exception as exc:  # (a pickle row is refused here too: never unpickled)
            e, why = None, f"unreadable ({exc})"
        if action == "ls":
            name = e.get("name", "?") if isinstance(e, dict) else "?"
            arch = e.get("arch", "?") if isinstance(e, dict) else "?"
            print(f"{key[:16]}  {arch:7}  {name}" + (f"  BAD: {why}" if why else ""))
        if why:
            bad.append((key, why))
    if action == "verify":
        for key, why in bad:
            print(f"{_short(key)}  {why}")
        print(f"{len(keys)} entries checked, {len(bad)} bad in {d} (read-only)")
        return 1 if bad else 0
    print(
        f"{len(keys)} entries in {d} (read-only: not writable by this user; listed, not used as this process's cache)"
    )
    return 0


def _short(key: str) -> str:
    """A cache key for messages: kernel keys by their first 16 hex digits, tuned ones whole."""
    from jitmarlin.kernels.tuned import TUNE_PREFIX

    return key if key.startswith(TUNE_PREFIX) else key[:16]
