"""Issue #57, the store/bundle half: the cache dir, the read-only tier and bundles are untrusted
input. Nothing read from them is unpickled; entries are checked against the key asked for;
the tree is private by default; bundles are bounded; locks time out; the CLI tells the truth.

CPU only (NVRTC compiles the few kernels; no GPU is needed). Every planted payload touches a
marker file when unpickled, and every test asserts the marker never appears.
"""

import hashlib
import json
import os
import pathlib
import pickle
import sqlite3
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from jitmarlin import emu
from jitmarlin.jit import bundle as bundle_mod
from jitmarlin.jit.bundle import BundleError, export_bundle, import_bundle
from jitmarlin.jit.cache import STORE_DIR, KernelCache, key_of
from jitmarlin.kernels.spec import KernelSpec
from jitmarlin.service.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPEC = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
SPEC3 = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 3)
MODE_PICKLE = 4  # diskcache.core.MODE_PICKLE


class Evil:
    """Unpickling this touches `marker` (what a planted row would do with os.system)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (Path(self.marker),))


def payload(marker) -> bytes:
    return pickle.dumps(Evil(marker), protocol=2)


def _db(d) -> Path:
    return Path(d) / STORE_DIR / "cache.db"


def _plant_pickle_rows(d, marker, where="ALL") -> None:
    """Rewrite rows of the store as pickle-mode rows holding the payload (inline value)."""
    con = sqlite3.connect(_db(d))
    with con:
        q = "UPDATE Cache SET mode = ?, filename = NULL, value = ?"
        if where == "ALL":
            con.execute(q, (MODE_PICKLE, payload(marker)))
        else:
            con.execute(q + " WHERE key = ?", (MODE_PICKLE, payload(marker), where))
    con.close()


def _plant_row(d, key, raw, value, mode=MODE_PICKLE, filename=None) -> None:
    con = sqlite3.connect(_db(d))
    with con:
        con.execute(
            "INSERT INTO Cache (key, raw, store_time, expire_time, access_time, "
            "access_count, tag, size, mode, filename, value) "
            "VALUES (?, ?, ?, NULL, ?, 0, NULL, 0, ?, ?, ?)",
            (key, raw, time.time(), time.time(), mode, filename, value),
        )
    con.close()


def _env(cache_dir, **extra):
    env = dict(os.environ, JITMARLIN_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("JITMARLIN_CACHE_RO", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _cli(cache_dir, *args, **extra):
    return subprocess.run(
        [sys.executable, "-m", "jitmarlin", *args],
        env=_env(cache_dir, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


# ---- nothing is unpickled ------------------------------------------------------------------------


def test_pickle_value_rows_never_run(tmp_path, seeded_cache):
    marker = tmp_path / "MARKER"
    d = seeded_cache.copy(tmp_path / "c")
    _plant_pickle_rows(d, marker)  # every entry and usage row
    art, key, status = KernelCache(d).get(SPEC, "sm_90")
    assert status == "compiled" and art.cubin  # refused row: recompiled, not loaded
    assert not marker.exists()
    for args in (("cache", "ls"), ("cache", "stats"), ("cache", "verify"), ("cache", "stats", "--json")):
        r = _cli(d, *args)
        assert "Traceback" not in r.stderr, r.stderr
        assert not marker.exists(), args
    r = _cli(d, "cache", "verify")
    assert r.returncode == 1 and "refused" in r.stdout, r.stdout
    assert _cli(d, "cache", "verify", "--fix").returncode == 1
    assert _cli(d, "cache", "verify").returncode == 0
    assert not marker.exists()


def test_prewarm_over_planted_rows(tmp_path):
    marker = tmp_path / "MARKER"
    d = tmp_path / "c"
    args = ("prewarm", "--arch", "sm_80", "--shapes", "4096x4096", "--m", "1")
    first = _cli(d, *args)
    assert first.returncode == 0, first.stderr
    _plant_pickle_rows(d, marker)
    second = _cli(d, *args)
    assert not marker.exists(), second.stderr
    assert second.returncode == 0 and "1 compiled" in second.stdout, second.stdout + second.stderr


def test_non_raw_key_and_pickle_value_file(tmp_path, seeded_cache):
    marker = tmp_path / "MARKER"
    d = seeded_cache.copy(tmp_path / "c")
    _plant_row(d, payload(marker), 0, b"x", mode=1)  # a pickled key (raw=0)
    vf = Path(d) / STORE_DIR / "ab" / "cd" / ("0" * 28 + ".val")  # a pickle value file
    vf.parent.mkdir(parents=True)
    vf.write_bytes(payload(marker))
    vf.chmod(0o600)
    _plant_row(d, "tune:planted", 1, None, filename=f"ab/cd/{'0' * 28}.val")
    _plant_row(d, "1" * 64, 1, None, mode=2, filename="../../../../etc/passwd")  # path games
    c = KernelCache(d)
    assert sorted(c.keys()) == sorted(seeded_cache.keys + ["1" * 64])
    assert c.get(SPEC, "sm_90", compile_missing=False)[2] == "disk"
    assert c.get_record("tune:planted") is None
    assert c.records("tune:").get("tune:planted") is None
    bad = c.verify()
    probs = " | ".join(p for _, _, p in bad)
    assert "pickled" in probs and "refused" in probs, probs
    for args in (("cache", "ls"), ("cache", "stats"), ("cache", "verify", "--fix")):
        r = _cli(d, *args)
        assert "Traceback" not in r.stderr, r.stderr
    assert KernelCache(d).verify() == []
    assert Path("/etc/passwd").exists() and not marker.exists()


def test_jinja_bytecode_files_are_never_read(tmp_path):
    import jinja2
    from jinja2.bccache import bc_magic

    from jitmarlin.kernels.render import templates_dir

    marker = tmp_path / "MARKER"
    d = tmp_path / "c"
    jd = d / "jinja"
    jd.mkdir(parents=True)
    bcc = jinja2.FileSystemBytecodeCache(str(jd))
    root = templates_dir()
    for p in root.rglob("*"):  # a planted file for every template, as the old code named them
        if p.is_file():
            name = p.relative_to(root).as_posix()
            key = bcc.get_cache_key(name, str(p))
            (jd / (bcc.pattern % key)).write_bytes(bc_magic + payload(marker))
    r = _cli(d, "inspect", "--source", "--arch", "sm_80")
    assert r.returncode == 0 and "__global__" in r.stdout, r.stderr
    code = (
        "from jitmarlin.kernels.render import render; from jitmarlin.kernels.spec import KernelSpec; "
        "render(KernelSpec('sm80', 'uint4b8', 'float16', 8, 1, 8, 8, 4))"
    )
    subprocess.run([sys.executable, "-c", code], env=_env(d), check=True, timeout=120)
    assert not marker.exists()


def test_render_keeps_parsed_templates_in_memory():
    import time as _t

    from jitmarlin.kernels.render import _env, render

    render(SPEC)
    t0 = _t.perf_counter()
    for _ in range(5):
        render(SPEC)
    per_call = (_t.perf_counter() - t0) / 5
    assert _env().bytecode_cache is None and per_call < 0.015, per_call  # no re-parse per call


# ---- the read-only tier --------------------------------------------------------------------------


def test_read_only_tier_pickle_rows_and_foreign_entries(tmp_path, seeded_cache):
    marker = tmp_path / "MARKER"
    ro = seeded_cache.copy(tmp_path / "ro")
    _plant_pickle_rows(ro, marker, where=seeded_cache.keys[0])
    w = KernelCache(tmp_path / "w", ro_dir=ro)
    assert w.get(SPEC, "sm_90", compile_missing=False)[2] == "missing"
    assert w.get(SPEC3, "sm_90", compile_missing=False)[2] == "disk"
    r = _cli(tmp_path / "w2", "prewarm", "--arch", "sm_80", "--shapes", "4096x4096", "--m", "1", JITMARLIN_CACHE_RO=ro)
    assert r.returncode == 0, r.stderr
    assert not marker.exists()


def test_entry_under_another_specs_key_is_never_served(tmp_path, seeded_cache, caplog):
    a, b = seeded_cache.keys
    for tier in ("local", "ro"):
        d = seeded_cache.copy(tmp_path / tier)
        disk = KernelCache(d)._open()
        disk.set(b, disk.get(a))  # SPEC's sound entry stored under SPEC3's key
        disk.close()
        if tier == "local":
            c = KernelCache(d, ro_dir="")
        else:
            c = KernelCache(tmp_path / "w", ro_dir=d)
        with caplog.at_level("WARNING", logger="jitmarlin"):
            art, key, status = c.get(SPEC3, "sm_90", compile_missing=False)
        assert key == b and status == "missing" and art is None, tier
        assert c.get(SPEC, "sm_90", compile_missing=False)[2] == "disk"
    assert "bad" in caplog.text or "corrupted" in caplog.text


# ---- private by default --------------------------------------------------------------------------

UMASK_SNIPPET = """
import os, sys
os.umask(0)
from jitmarlin.jit.cache import KernelCache
from jitmarlin.kernels.spec import KernelSpec
c = KernelCache(sys.argv[1], ro_dir='')
print(c.get(KernelSpec('sm80', 'uint4b8', 'float16', 8, 1, 8, 8, 4), 'sm_90')[2])
c.put_record('tune:x', {'a': 1})
"""


def _modes(d):
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            out[str(p.relative_to(d))] = stat.S_IMODE(os.lstat(p).st_mode)
    out["."] = stat.S_IMODE(os.stat(d).st_mode)
    return out


@pytest.mark.parametrize("shared", [False, True])
def test_private_modes_under_umask_000(tmp_path, shared):
    d = tmp_path / "c"
    extra = {"JITMARLIN_CACHE_SHARED": "group"} if shared else {}
    r = subprocess.run(
        [sys.executable, "-c", UMASK_SNIPPET, str(d)], env=_env(d, **extra), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and r.stdout.strip() == "compiled", r.stderr
    modes = _modes(d)
    want_dir, want_file = (0o2770, 0o660) if shared else (0o700, 0o600)
    assert any(k.endswith(".val") for k in modes), modes  # a value file was written
    for rel, mode in modes.items():
        want = want_dir if (d / rel).is_dir() else want_file
        assert mode == want, (rel, oct(mode))
    assert not list((d / "locks").iterdir())  # lock files cleaned up


def test_group_or_other_writable_dir_is_refused(tmp_path, monkeypatch, caplog):
    d = tmp_path / "c"
    d.mkdir()
    d.chmod(0o777)
    with caplog.at_level("WARNING", logger="jitmarlin"):
        art, _, status = KernelCache(d, ro_dir="").get(SPEC, "sm_90")
    assert status == "compiled" and art.cubin  # still works, in memory
    assert "writable by other" in caplog.text and list(d.iterdir()) == []
    r = _cli(d, "cache", "stats")
    assert r.returncode == 1 and "refused" in r.stderr, r.stderr
    monkeypatch.setenv("JITMARLIN_CACHE_SHARED", "group")
    assert KernelCache(d).state == "refused"  # other-writable: still refused
    d.chmod(0o2770)
    assert KernelCache(d).state == "ok"  # group-writable: opt-in ok
    monkeypatch.delenv("JITMARLIN_CACHE_SHARED")
    assert KernelCache(d).state == "refused"  # ... and only with it


def test_dir_owned_by_another_user_is_refused(tmp_path, monkeypatch, caplog):
    d = tmp_path / "c"
    KernelCache(d, ro_dir="")._open()
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(d).st_uid + 4242)
    c = KernelCache(d, ro_dir="")
    with caplog.at_level("WARNING", logger="jitmarlin"):
        assert c.get(SPEC, "sm_90")[2] == "compiled"
    assert c.state == "refused" and "owned by uid" in c.problem and "in memory" in caplog.text
    assert c.keys() == []  # nothing read from it


# ---- the emulator's build dir --------------------------------------------------------------------


def test_emulator_build_dir_is_private(tmp_path, monkeypatch):
    monkeypatch.delenv("JITMARLIN_EMU_DIR", raising=False)
    monkeypatch.setattr(emu.tempfile, "gettempdir", lambda: str(tmp_path))
    d = emu._build_dir()
    assert d == tmp_path / f"jitmarlin-emu-{os.geteuid()}" and stat.S_IMODE(d.stat().st_mode) == 0o700
    d.chmod(0o777)  # e.g. pre-created by someone else
    with pytest.raises(emu.EmuBuildDirError, match="writable"):
        emu._build_dir()
    d.chmod(0o700)
    monkeypatch.setattr(os, "geteuid", lambda: d.stat().st_uid + 4242)
    monkeypatch.setenv("JITMARLIN_EMU_DIR", str(d))
    with pytest.raises(emu.EmuBuildDirError, match="owned by"):
        emu._build_dir()


@pytest.mark.skipif(emu.compiler() is None, reason="needs a C++ compiler")
def test_planted_emulator_library_is_not_loaded(tmp_path, monkeypatch):
    from jitmarlin.kernels.render import render

    marker = tmp_path / "MARKER"
    d = tmp_path / "emu"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("JITMARLIN_EMU_DIR", str(d))
    monkeypatch.setattr(emu, "_libs", {})
    spec = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 2)
    digest = hashlib.sha256(render(spec, target="emu").encode()).hexdigest()[:16]
    so = d / f"{spec.name}_{digest}.so"
    src = tmp_path / "evil.c"
    src.write_text(
        '#include <stdio.h>\n__attribute__((constructor)) static void f(void) '
        f'{{ FILE *p = fopen("{marker}", "w"); if (p) fclose(p); }}\n'
    )
    subprocess.run(
        [emu.compiler(), "-shared", "-fPIC", "-o", str(so), "-x", "c", str(src)], check=True, capture_output=True
    )
    so.chmod(0o777)  # group/other-writable: not ours to trust
    lib = emu.build(spec)
    assert lib is not None and not marker.exists()
    assert stat.S_IMODE(so.stat().st_mode) & 0o022 == 0


# ---- bundles -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(seeded_cache, tmp_path_factory):
    path = tmp_path_factory.mktemp("trust-bundle") / "b.tar"
    export_bundle(KernelCache(seeded_cache.dir), path)
    return path


def _header(name, size) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.GNU_FORMAT)


BOMB_SNIPPET = """
import resource, sys, time
from jitmarlin.jit.bundle import BundleError, import_bundle
from jitmarlin.jit.cache import KernelCache
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
try:
    import_bundle(KernelCache(sys.argv[2]), sys.argv[1])
    print("IMPORTED")
except BundleError as e:
    print("REFUSED", e)
print("GROWTH_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
print("SECONDS", time.monotonic() - t0)
"""


def _bomb(tmp_path, path):
    r = subprocess.run(
        [sys.executable, "-c", BOMB_SNIPPET, str(path), str(tmp_path / "dst")],
        env=_env(tmp_path / "dst"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    return out, r.stdout


def test_bundle_bombs_are_refused_quickly(tmp_path, bundle):
    big = tmp_path / "big.tar"  # a header claiming 10 GiB, 1 KiB of data
    big.write_bytes(_header(f"entries/{'a' * 64}.json", 10 << 30) + b"\0" * 1024)
    many = tmp_path / "many.tar"  # 40 members of 60 MiB each (sparse: cheap on disk)
    with open(many, "wb") as f:
        for i in range(40):
            f.write(_header(f"entries/{i:064x}.json", 60 << 20))
            f.seek(60 << 20, 1)
        f.write(b"\0" * 1024)
    gz = tmp_path / "b.tar.gz"
    import gzip

    gz.write_bytes(gzip.compress(bundle.read_bytes()))
    for path, why in ((big, "claims"), (many, "cap"), (gz, "compressed")):
        out, raw = _bomb(tmp_path, path)
        assert "REFUSED" in out and why in out["REFUSED"], raw
        assert float(out["SECONDS"]) < 3 and int(out["GROWTH_KB"]) < 64 * 1024, raw


def test_total_cap_and_member_checks(tmp_path, bundle, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_TOTAL_BYTES", 1 << 20)
    over = tmp_path / "over.tar"
    with tarfile.open(over, "w") as tar:
        for i in range(3):
            bundle_mod._tar_add(tar, f"entries/{i:064x}.json", b"x" * (400 << 10))
    with pytest.raises(BundleError, match="cap"):
        import_bundle(KernelCache(tmp_path / "d1"), over)
    monkeypatch.undo()
    link = tmp_path / "link.tar"  # a non-regular member
    with tarfile.open(bundle) as src, tarfile.open(link, "w") as tar:
        for m in src.getmembers():
            tar.addfile(m, src.extractfile(m))
        info = tarfile.TarInfo(f"entries/{'b' * 64}.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(BundleError, match="not a regular file"):
        import_bundle(KernelCache(tmp_path / "d2"), link)


def test_duplicate_and_pickled_members(tmp_path, seeded_cache, bundle, rewrite_bundle):
    marker = tmp_path / "MARKER"
    a, b = seeded_cache.keys
    dup = tmp_path / "dup.tar"
    with tarfile.open(bundle) as src, tarfile.open(dup, "w") as tar:
        for m in src.getmembers():
            tar.addfile(m, src.extractfile(m))
        bundle_mod._tar_add(tar, f"entries/{a}.json", payload(marker))  # second copy of a
    rep = import_bundle(KernelCache(tmp_path / "d1"), dup)
    assert rep.imported == 1 and [k for k, _ in rep.rejected] == [a]
    assert "twice" in rep.rejected[0][1]

    def pickled(files):
        files[f"entries/{b}.json"] = payload(marker)

    bad = tmp_path / "pickled.tar"
    rewrite_bundle(bundle, bad, pickled)
    rep = import_bundle(KernelCache(tmp_path / "d2"), bad)
    assert rep.imported == 1 and [k for k, _ in rep.rejected] == [b]
    assert not marker.exists()


def _rekey(files, edit):
    """Apply edit(entry) to every entry of a bundle's {name: bytes} and give it the key its new
    inputs hash to (a sound entry of another version, not a tampered one)."""
    m = json.loads(files["manifest.json"])
    for item in m["entries"]:
        e = bundle_mod.entry_from_json(files.pop(f"entries/{item['key']}.json"))
        edit(e)
        item["key"] = key_of(e["key_inputs"])
        data = bundle_mod.entry_to_json(e)
        files[f"entries/{item['key']}.json"] = data
        item["file_sha256"] = hashlib.sha256(data).hexdigest()
        item["nvrtc"] = e["nvrtc"]
    files["manifest.json"] = json.dumps(m).encode()


def test_other_version_entries_are_skipped_not_imported(tmp_path, bundle, rewrite_bundle, capsys):
    def jitmarlin_version(e):
        e["jitmarlin"] = e["key_inputs"]["jitmarlin"] = "0.0.1"

    def nvrtc_version(e):
        e["key_inputs"]["nvrtc"] = [1, 0]

    def entry_format(e):
        e["format"] = e["key_inputs"]["format"] = 99

    for i, (edit, why) in enumerate(
        ((jitmarlin_version, "jitmarlin 0.0.1"), (nvrtc_version, "NVRTC [1, 0]"), (entry_format, "entry format 99"))
    ):
        path = tmp_path / f"v{i}.tar"
        rewrite_bundle(bundle, path, lambda files: _rekey(files, edit))
        dst = tmp_path / f"d{i}"
        rep = import_bundle(KernelCache(dst), path)
        assert (rep.imported, rep.rejected, len(rep.skipped)) == (0, [], 2), rep
        assert all(why in r for _, r in rep.skipped), rep.skipped
        assert KernelCache(dst).keys() == []
        assert main(["cache", "import", str(path), "--cache-dir", str(dst)]) == 1
        out, err = capsys.readouterr()
        assert "imported 0" in out and "skipped 2" in out and why in err


def test_truncated_bundle_is_one_clear_error(tmp_path, seeded_cache, bundle):
    cut = tmp_path / "cut.tar"
    data = bundle.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    d = seeded_cache.copy(tmp_path / "c")
    before = sorted(KernelCache(d).keys())
    with pytest.raises(BundleError, match="truncated|not a readable"):
        import_bundle(KernelCache(d), cut)
    r = _cli(d, "cache", "import", str(cut))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and "truncated" in r.stderr
    assert sorted(KernelCache(d).keys()) == before


def test_sha256_pin(tmp_path, bundle):
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    d = tmp_path / "c"
    r = _cli(d, "cache", "import", str(bundle), "--sha256", "0" * 64)
    assert r.returncode == 1 and "pinned" in r.stderr and KernelCache(d).keys() == []
    r = _cli(d, "cache", "import", str(bundle), "--sha256", digest.upper())
    assert r.returncode == 0 and "imported 2" in r.stdout, r.stderr


def test_export_unknown_arch_or_empty_is_an_error(tmp_path, seeded_cache, capsys):
    d = str(seeded_cache.copy(tmp_path / "c"))
    for arch, why in (("sm_60", "unknown arch"), ("sm_80", "nothing to export")):
        out = tmp_path / f"{arch}.tar"
        assert main(["cache", "export", str(out), "--arch", arch, "--cache-dir", d]) == 1
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and not out.exists()


# ---- locks ---------------------------------------------------------------------------------------


def test_lock_held_too_long_compiles_in_memory(tmp_path, monkeypatch, caplog):
    import fcntl

    from jitmarlin.jit.cache import cache_key
    from jitmarlin.kernels.render import render

    d = tmp_path / "c"
    KernelCache(d, ro_dir="")._open()
    lock = d / "locks" / f"{cache_key(SPEC, render(SPEC), 'sm_90')[:32]}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a stopped holder
    try:
        monkeypatch.setenv("JITMARLIN_LOCK_TIMEOUT_S", "0.3")
        import threading

        c = KernelCache(d, ro_dir="")
        got = []
        with caplog.at_level("WARNING", logger="jitmarlin"):
            t = threading.Thread(target=lambda: got.append(c.get(SPEC, "sm_90")), daemon=True)
            t.start()
            t.join(30)  # (without a timeout it would wait for ever)
        assert got, "the get still waits for the lock"
        art, _, status = got[0]
        assert status == "compiled" and art.cubin
        assert "compiling in memory" in caplog.text and c.keys() == []
    finally:
        os.close(fd)


# ---- the CLI on broken and read-only stores ------------------------------------------------------


def test_corrupt_store_is_reported_and_repaired(tmp_path, seeded_cache):
    d = seeded_cache.copy(tmp_path / "c")
    for name in ("cache.db-wal", "cache.db-shm"):
        (Path(d) / STORE_DIR / name).unlink(missing_ok=True)
    _db(d).write_bytes(b"this is not a database" * 500)
    for args in (("cache", "stats"), ("cache", "verify"), ("cache", "ls")):
        r = _cli(d, *args)
        assert r.returncode == 1 and "corrupt" in r.stderr and "0 entries" not in r.stdout, r
    r = _cli(d, "cache", "stats", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["state"] == "corrupt", r
    assert KernelCache(d).get(SPEC, "sm_90")[2] == "compiled"  # still works, in memory
    r = _cli(d, "cache", "verify", "--fix")
    assert "removed the corrupt store" in r.stdout, r
    r = _cli(d, "cache", "stats")
    assert r.returncode == 0 and "entries         0" in r.stdout, r
    _db(d).write_bytes(b"junk" * 100)
    assert _cli(d, "cache", "clear").returncode == 0
    assert _cli(d, "cache", "verify").returncode == 0


def test_read_only_cache_dir_says_so(tmp_path, seeded_cache, monkeypatch, capsys):
    d = str(seeded_cache.copy(tmp_path / "c"))
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if mode & os.W_OK else real(p, mode))
    assert main(["cache", "stats", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert "read-only" in out and "2 entries" in out
    assert main(["cache", "verify", "--cache-dir", d]) == 0
    assert "2 entries checked, 0 bad" in capsys.readouterr().out
    assert main(["cache", "clear", "--cache-dir", d]) == 1
    assert "read-only" in capsys.readouterr().err


def test_info_names_a_refused_cache_instead_of_counting_zero_entries(tmp_path):
    d = tmp_path / "c"
    assert _cli(d, "info").returncode == 0  # creates the store, private
    ok = _cli(d, "info").stdout
    assert "cache_state       ok" in ok and "cache_entries     0" in ok
    d.chmod(0o777)
    r = _cli(d, "info")
    assert r.returncode == 0
    assert "cache_state       refused: cache dir" in r.stdout and "writable by other users" in r.stdout
    assert "cache_entries" not in r.stdout
