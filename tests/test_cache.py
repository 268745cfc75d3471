import os
import subprocess
import sys
from pathlib import Path

import pytest

from jitmarlin.jit import bundle as bundle_mod
from jitmarlin.jit.bundle import export_bundle, import_bundle
from jitmarlin.jit.cache import KernelCache, cache_key
from jitmarlin.kernels.render import render
from jitmarlin.kernels.spec import KernelSpec

SPEC = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
ROOT = Path(__file__).resolve().parents[1]
SNIPPET = "import jitmarlin; r = jitmarlin.prewarm(['sm_90'], [(4096, 4096)], [1]); print(r[0].status)"


def _run(cache_dir):
    env = dict(
        os.environ,
        JITMARLIN_CACHE_DIR=str(cache_dir),
        JITMARLIN_LOG="info",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    return subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, timeout=300)


def test_second_process_loads_from_disk_without_nvrtc(tmp_path):
    import re

    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    m = re.search(r"compiled (jm_\w+) arch=sm_90 in [0-9.]+ s", first.stderr)
    assert m, first.stderr
    second = _run(tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"cache hit {m.group(1)} arch=sm_90" in second.stderr
    assert "compiled" not in second.stderr
    assert second.stdout.strip() == "cached"


def test_key_has_no_paths_and_tracks_inputs():
    src = render(SPEC)
    k = cache_key(SPEC, src, "sm_90")
    assert k == cache_key(SPEC, src, "sm_90")
    assert k != cache_key(SPEC, src, "sm_89")
    assert k != cache_key(SPEC, src + "\n", "sm_90")
    other = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 3)
    assert k != cache_key(other, render(other), "sm_90")
    from jitmarlin.kernels.render import templates_dir

    assert str(templates_dir()) not in src and str(Path.home()) not in src


def test_copied_cache_dir_still_hits(tmp_path):
    a = KernelCache(tmp_path / "a")
    _, key, status = a.get(SPEC, "sm_90")
    assert status == "compiled"
    import shutil

    shutil.copytree(tmp_path / "a", tmp_path / "b")
    b = KernelCache(tmp_path / "b")
    art, key_b, status = b.get(SPEC, "sm_90", compile_missing=False)
    assert status == "disk" and key_b == key and art.cubin


def test_corrupted_entry_is_dropped_and_recompiled(tmp_path, caplog):
    c = KernelCache(tmp_path)
    art, key, _ = c.get(SPEC, "sm_90")
    disk = c._open()
    e = disk.get(key)
    import zlib

    raw = bytearray(zlib.decompress(e["cubin"]))
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte inside the cubin
    e["cubin"] = zlib.compress(bytes(raw))
    disk.set(key, e)
    fresh = KernelCache(tmp_path)
    with caplog.at_level("WARNING", logger="jitmarlin"):
        art2, _, status = fresh.get(SPEC, "sm_90")
    assert status == "compiled" and art2.cubin == art.cubin
    assert "corrupted" in caplog.text


def test_unwritable_cache_dir_compiles_in_memory(tmp_path):
    if os.geteuid() == 0:
        target = Path("/proc/jitmarlin-cannot-exist")  # root can write anywhere else
    else:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o500)
    c = KernelCache(target)
    art, _, status = c.get(SPEC, "sm_90")
    assert status == "compiled" and art.cubin
    _, _, again = c.get(SPEC, "sm_90")
    assert again == "memory"


# ---- production cache: LRU cap, verify, bundles, read-only tier, CLI, processes ----------------

import json
import select
import signal
import tarfile
import time
import zlib

from jitmarlin.jit import cache as cache_mod
from jitmarlin.jit import nvrtc
from jitmarlin.service.cli import main

SPEC3 = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 3)
SPEC2 = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 2)
SPEC_TEXT = 'KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)'


def _no_compiles(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("NVRTC compile called")

    monkeypatch.setattr(nvrtc, "compile_source", refuse)


def _flip_cubin_byte(c: KernelCache, key: str) -> None:
    """Corrupt one byte inside an entry's cubin, written back through diskcache."""
    disk = c._open()
    e = disk.get(key)
    raw = bytearray(zlib.decompress(e["cubin"]))
    raw[len(raw) // 2] ^= 0xFF
    e["cubin"] = zlib.compress(bytes(raw))
    disk.set(key, e)


def test_usage_rows_track_size_and_last_used(tmp_path, seeded_cache, monkeypatch):
    d = seeded_cache.copy(tmp_path / "c")
    rows = KernelCache(d).usage()
    assert set(rows) == set(seeded_cache.keys)
    for key, r in rows.items():
        assert r["arch"] == "sm_90" and r["size"] > 1000 and r["last_used"] >= r["created"]
    monkeypatch.setattr(cache_mod, "TOUCH_RESOLUTION_S", 0.0)
    before = rows[seeded_cache.keys[0]]["last_used"]
    time.sleep(0.01)
    _, key, status = KernelCache(d).get(SPEC, "sm_90")  # disk hit: last_used moves
    assert status == "disk" and KernelCache(d).usage()[key]["last_used"] > before
    c = KernelCache(d)  # usage rows stay out of sight
    assert sorted(c.keys()) == sorted(seeded_cache.keys)
    assert all(isinstance(e, dict) and e["format"] == 2 for _, e in c.entries())


def test_lru_eviction_under_small_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "TOUCH_RESOLUTION_S", 0.0)
    c = KernelCache(tmp_path, max_mb=0, ro_dir="")  # no cap while filling
    ka = c.get(SPEC, "sm_90")[1]
    kb = c.get(SPEC3, "sm_90")[1]
    time.sleep(0.01)
    assert KernelCache(tmp_path).get(SPEC, "sm_90")[2] == "disk"  # A used after B: B is LRU
    sizes = KernelCache(tmp_path).usage()
    cap = sizes[ka]["size"] + sizes[kb]["size"] + min(s["size"] for s in sizes.values()) // 2
    d = KernelCache(tmp_path)
    d.max_bytes = cap  # room for ~2.5 kernels
    _, kc, status = d.get(SPEC2, "sm_90")
    assert status == "compiled"
    assert set(d.keys()) == {ka, kc}  # B, least recently used, went
    assert KernelCache(tmp_path).get(SPEC3, "sm_90", compile_missing=False)[2] == "missing"
    total = sum(r["size"] for r in d.usage().values())
    assert total <= cap
    # a cap smaller than one kernel still keeps the kernel just stored
    e = KernelCache(tmp_path)
    e.max_bytes = 1
    assert e.get(SPEC3, "sm_90")[2] == "compiled"
    assert e.keys() == [kb] and e.stats()["entries"] == 1


def test_cap_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("JITMARLIN_CACHE_MAX_MB", "1.5")
    assert KernelCache(tmp_path).max_bytes == int(1.5 * (1 << 20))
    monkeypatch.delenv("JITMARLIN_CACHE_MAX_MB")
    assert KernelCache(tmp_path).max_bytes == 2048 << 20
    assert KernelCache(tmp_path, max_mb=3).max_bytes == 3 << 20


def test_verify_finds_flipped_byte_and_fix_removes_it(tmp_path, seeded_cache):
    d = seeded_cache.copy(tmp_path / "c")
    c = KernelCache(d)
    assert c.verify() == []
    bad_key, good_key = seeded_cache.keys
    _flip_cubin_byte(c, bad_key)
    bad = KernelCache(d).verify()
    assert [(k, p) for k, _, p in bad] == [(bad_key, "checksum mismatch (cubin/ptx altered)")]
    assert bad[0][1] == SPEC.name
    assert len(KernelCache(d).verify(fix=True)) == 1
    c = KernelCache(d)
    assert c.verify() == [] and c.keys() == [good_key]


def test_verify_finds_entry_under_the_wrong_key(tmp_path, seeded_cache):
    d = seeded_cache.copy(tmp_path / "c")
    c = KernelCache(d)
    disk = c._open()
    disk.set("0" * 64, disk.get(seeded_cache.keys[0]))  # sound entry, foreign key
    ((key, name, problem),) = c.verify()
    assert key == "0" * 64 and "key does not match" in problem


def test_export_import_into_empty_dir_needs_no_nvrtc(tmp_path, seeded_cache, monkeypatch):
    src = KernelCache(seeded_cache.copy(tmp_path / "src"))
    bundle = tmp_path / "kernels.tar"
    r = export_bundle(src, bundle)
    assert r["exported"] == 2 and r["skipped"] == []
    again = tmp_path / "again.tar"
    export_bundle(src, again)
    assert bundle.read_bytes() == again.read_bytes()  # deterministic
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
    assert names[0] == "manifest.json" and all(not n.startswith("/") and ".." not in n for n in names)
    assert manifest["bundle_format"] == 1 and manifest["entry_format"] == 2
    assert manifest["jitmarlin"] and sorted(e["key"] for e in manifest["entries"]) == sorted(seeded_cache.keys)
    one = manifest["entries"][0]
    assert {"key", "name", "arch", "spec", "nvrtc", "sha256"} <= set(one)
    assert one["arch"] == "sm_90" and KernelSpec.from_canonical(one["spec"])

    _no_compiles(monkeypatch)
    empty = tmp_path / "empty"
    rep = import_bundle(KernelCache(empty), bundle)
    assert (rep.imported, rep.present, rep.rejected) == (2, 0, [])
    fresh = KernelCache(empty)
    for spec, key in zip((SPEC, SPEC3), seeded_cache.keys):
        art, k, status = fresh.get(spec, "sm_90", compile_missing=False)
        assert status == "disk" and k == key and art.cubin[:4] == b"\x7fELF"
    rep = import_bundle(KernelCache(empty), bundle)  # merge: existing keys kept
    assert (rep.imported, rep.present) == (0, 2)


def test_tampered_bundle_entry_is_rejected_with_a_reason(tmp_path, seeded_cache, rewrite_bundle):
    import hashlib

    bundle = tmp_path / "b.tar"
    export_bundle(KernelCache(seeded_cache.copy(tmp_path / "src")), bundle)
    victim = f"entries/{seeded_cache.keys[0]}.json"

    def set_member(files, e, fix_manifest):
        files[victim] = bundle_mod.entry_to_json(e)
        if fix_manifest:
            m = json.loads(files["manifest.json"])
            for item in m["entries"]:
                if item["key"] == seeded_cache.keys[0]:
                    item["file_sha256"] = hashlib.sha256(files[victim]).hexdigest()
            files["manifest.json"] = json.dumps(m).encode()

    def flip_cubin(fix_manifest):
        def edit(files):
            e = bundle_mod.entry_from_json(files[victim])
            raw = bytearray(zlib.decompress(e["cubin"]))
            raw[100] ^= 0x01
            e["cubin"] = zlib.compress(bytes(raw))
            set_member(files, e, fix_manifest)

        return edit

    def old_format(files):
        e = bundle_mod.entry_from_json(files[victim])
        e["format"] = 1
        set_member(files, e, True)

    def other_spec(files):  # consistent entry that claims another spec
        e = bundle_mod.entry_from_json(files[victim])
        e["spec"] = e["key_inputs"]["spec"] = SPEC2.canonical()
        set_member(files, e, True)

    cases = [
        (flip_cubin(False), "altered"),
        (flip_cubin(True), "checksum mismatch"),
        (old_format, "entry format 1"),
        (other_spec, "manifest and entry disagree on spec"),
    ]
    for i, (edit, reason) in enumerate(cases):
        bad = tmp_path / f"bad{i}.tar"
        rewrite_bundle(bundle, bad, edit)
        rep = import_bundle(KernelCache(tmp_path / f"dst{i}"), bad)
        assert rep.imported == 1, reason  # the other kernel still imports
        ((key, why),) = rep.rejected
        assert key == seeded_cache.keys[0] and reason in why, why
        assert KernelCache(tmp_path / f"dst{i}").keys() == [seeded_cache.keys[1]]


def test_not_a_bundle_is_an_input_error(tmp_path):
    from jitmarlin.errors import InputError

    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar file at all" * 100)
    with pytest.raises(InputError):
        import_bundle(KernelCache(tmp_path / "c"), junk)


def test_read_only_tier_serves_a_hit(tmp_path, seeded_cache, monkeypatch):
    ro = seeded_cache.copy(tmp_path / "ro")  # a cache dir ...
    unpacked = tmp_path / "unpacked"  # ... and an unpacked bundle
    export_bundle(KernelCache(seeded_cache.copy(tmp_path / "src")), tmp_path / "b.tar")
    with tarfile.open(tmp_path / "b.tar") as tar:
        tar.extractall(unpacked)
    _no_compiles(monkeypatch)

    def contents(tier):  # (SQLite may add its -shm/-wal index files beside a WAL database)
        return {p: p.read_bytes() for p in tier.rglob("*") if p.is_file()}

    for tier in (ro, unpacked):
        before = contents(tier)
        monkeypatch.setenv("JITMARLIN_CACHE_RO", str(tier))
        w = KernelCache(tmp_path / f"w-{tier.name}")
        art, key, status = w.get(SPEC, "sm_90")
        assert status == "disk" and key == seeded_cache.keys[0] and art.cubin
        assert w.keys() == []  # served, not copied
        after = contents(tier)
        assert {p: after[p] for p in before} == before  # nothing written


def test_read_only_tier_bad_entry_is_ignored(tmp_path, seeded_cache, monkeypatch):
    unpacked = tmp_path / "unpacked"
    export_bundle(KernelCache(seeded_cache.copy(tmp_path / "src")), tmp_path / "b.tar")
    with tarfile.open(tmp_path / "b.tar") as tar:
        tar.extractall(unpacked)
    member = unpacked / "entries" / f"{seeded_cache.keys[0]}.json"
    e = bundle_mod.entry_from_json(member.read_bytes())
    e["sha256"] = "0" * 64
    member.write_bytes(bundle_mod.entry_to_json(e))
    w = KernelCache(tmp_path / "w", ro_dir=unpacked)
    assert w.get(SPEC, "sm_90", compile_missing=False)[2] == "missing"
    assert w.get(SPEC3, "sm_90", compile_missing=False)[2] == "disk"


def test_stats(tmp_path, seeded_cache):
    st = KernelCache(seeded_cache.copy(tmp_path / "c"), max_mb=64).stats()
    assert st["entries"] == 2 and st["archs"] == {"sm_90": 2} and st["bytes"] > 0
    assert st["oldest"] <= st["newest"] and st["cap_bytes"] == 64 << 20
    empty = KernelCache(tmp_path / "e").stats()
    assert empty["entries"] == 0 and empty["oldest"] is None


def test_cli_cache_subcommands(tmp_path, seeded_cache, capsys):
    d = str(seeded_cache.copy(tmp_path / "c"))
    assert main(["cache", "ls", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert SPEC.name in out and SPEC3.name in out and "2 entries" in out
    assert seeded_cache.keys[0][:16] in out
    assert main(["cache", "--cache-dir", d, "stats"]) == 0
    out = capsys.readouterr().out
    assert "entries" in out and "sm_90: 2" in out
    assert main(["cache", "stats", "--json", "--cache-dir", d]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 2
    assert main(["cache", "verify", "--cache-dir", d]) == 0
    assert "0 bad" in capsys.readouterr().out

    bundle = str(tmp_path / "k.tar")
    assert main(["cache", "export", bundle, "--arch", "sm_90", "--cache-dir", d]) == 0
    assert "exported 2 kernels" in capsys.readouterr().out
    # an export that would be empty is an error, and writes nothing (issue #57)
    assert main(["cache", "export", str(tmp_path / "none.tar"), "--arch", "sm_80", "--cache-dir", d]) == 1
    assert "nothing to export" in capsys.readouterr().err and not (tmp_path / "none.tar").exists()
    other = str(tmp_path / "other")
    assert main(["cache", "import", bundle, "--cache-dir", other]) == 0
    assert "imported 2, already present 0, rejected 0" in capsys.readouterr().out
    assert main(["cache", "import", str(tmp_path / "missing.tar"), "--cache-dir", other]) == 2
    assert "jitmarlin:" in capsys.readouterr().err

    _flip_cubin_byte(KernelCache(d), seeded_cache.keys[0])
    assert main(["cache", "verify", "--cache-dir", d]) == 1
    out = capsys.readouterr().out
    assert seeded_cache.keys[0][:16] in out and "checksum mismatch" in out and "1 bad" in out
    assert main(["cache", "verify", "--fix", "--cache-dir", d]) == 1
    assert "removed" in capsys.readouterr().out
    assert main(["cache", "verify", "--cache-dir", d]) == 0
    capsys.readouterr()
    assert main(["cache", "clear", "--cache-dir", d]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert main(["cache", "ls", "--cache-dir", d]) == 0
    assert "0 entries" in capsys.readouterr().out


def _child_env(cache_dir):
    return dict(os.environ, JITMARLIN_CACHE_DIR=str(cache_dir), JITMARLIN_LOG="info", PYTHONPATH=str(ROOT))


GET_SNIPPET = (
    "from jitmarlin.jit.cache import KernelCache; from jitmarlin.kernels.spec import KernelSpec; "
    f"print(KernelCache().get({SPEC_TEXT}, 'sm_90')[2])"
)


def test_eight_cold_processes_compile_once(tmp_path):
    env = _child_env(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GET_SNIPPET], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    lines = [line for _, err in outs for line in err.splitlines()]
    assert len([line for line in lines if "compiled" in line]) == 1, lines
    assert sum("cache hit" in err for _, err in outs) == 7, lines
    assert sorted(out.strip() for out, _ in outs) == ["compiled"] + ["disk"] * 7


HOLDER_SNIPPET = f"""
import time
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import KernelCache
from jitmarlin.kernels.spec import KernelSpec

def stuck(*args, **kwargs):      # inside the compile, i.e. while holding the key's flock
    print("holding", flush=True)
    time.sleep(60)

nvrtc.compile_source = stuck
KernelCache().get({SPEC_TEXT}, 'sm_90')
"""


def test_killed_compile_does_not_stall_the_next_process(tmp_path):
    import fcntl

    env = _child_env(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SNIPPET], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        ready, _, _ = select.select([holder.stdout], [], [], 120)
        assert ready and holder.stdout.readline().strip() == "holding", holder.stderr.read()
        lock = tmp_path / "locks" / f"{cache_key(SPEC, render(SPEC), 'sm_90')[:32]}.lock"
        fd = os.open(lock, os.O_RDWR)
        try:  # the holder really has the lock
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        waiter = subprocess.Popen(
            [sys.executable, "-c", GET_SNIPPET], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        time.sleep(1.0)  # let it queue on the lock
        t0 = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        out, err = waiter.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert waiter.returncode == 0, err
    assert out.strip() == "compiled" and "compiled" in err
    assert waited < 15, waited


def test_whole_tile_plans_share_the_stream_k_kernels_entry(tmp_path):
    """KernelSpec.whole picks a plan, not code: its kernel is cached (and compiled) once."""
    from dataclasses import replace

    c = KernelCache(tmp_path / "c")
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 4, 16, 8)
    _, key, status = c.get(replace(s, whole=True), "sm_80", compile_missing=False)
    assert status == "missing" and key == c.get(s, "sm_80", compile_missing=False)[1]


def test_a_warm_hit_renders_nothing_and_a_stale_digest_memo_is_replaced(tmp_path, monkeypatch, caplog):
    """The key hashes the rendered source; its digest is kept in the store so that a fresh
    process's warm hit does not parse the templates. A memo that is wrong (stale or planted)
    misses, and the compile path renders, finds the true key and replaces the memo."""
    from jitmarlin.jit import cache as cache_mod

    _, key, status = KernelCache(tmp_path).get(SPEC, "sm_90")
    assert status == "compiled" and key == cache_key(SPEC, render(SPEC), "sm_90")

    def no_render(*a, **kw):
        raise AssertionError("rendered on a warm hit")

    with monkeypatch.context() as m:
        m.setattr(cache_mod, "render", no_render)
        _, key2, status = KernelCache(tmp_path).get(SPEC, "sm_90")  # a new process's view
        assert (key2, status) == (key, "disk")
    c = KernelCache(tmp_path)
    c._open().set(c._memo_key(SPEC), "0" * 64)  # a wrong memo
    _, key3, status = KernelCache(tmp_path).get(SPEC, "sm_90")
    assert key3 == key and status == "disk"  # found again, not recompiled
    assert "stale source digest memo" in caplog.text
    assert KernelCache(tmp_path)._memo(SPEC) == cache_mod.source_digest(render(SPEC))
    assert KernelCache(tmp_path).keys() == [key]  # memo rows are not entries
