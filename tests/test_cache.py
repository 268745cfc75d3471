import os
import subprocess
import sys
from pathlib import Path

import pytest

from jitmarlin.cache import KernelCache, cache_key
from jitmarlin.render import render
from jitmarlin.spec import KernelSpec

SPEC = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
ROOT = Path(__file__).resolve().parents[1]
SNIPPET = ("import jitmarlin; r = jitmarlin.prewarm(['sm_90'], [(4096, 4096)], [1]); "
           "print(r[0].status)")


def _run(cache_dir):
    env = dict(os.environ, JITMARLIN_CACHE_DIR=str(cache_dir), JITMARLIN_LOG="info",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True,
                          timeout=300)


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
    from jitmarlin.render import templates_dir

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
    raw[len(raw) // 2] ^= 0xFF                        # one flipped byte inside the cubin
    e["cubin"] = zlib.compress(bytes(raw))
    disk.set(key, e)
    fresh = KernelCache(tmp_path)
    with caplog.at_level("WARNING", logger="jitmarlin"):
        art2, _, status = fresh.get(SPEC, "sm_90")
    assert status == "compiled" and art2.cubin == art.cubin
    assert "corrupted" in caplog.text


def test_unwritable_cache_dir_compiles_in_memory(tmp_path):
    if os.geteuid() == 0:
        target = Path("/proc/jitmarlin-cannot-exist")       # root can write anywhere else
    else:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o500)
    c = KernelCache(target)
    art, _, status = c.get(SPEC, "sm_90")
    assert status == "compiled" and art.cubin
    _, _, again = c.get(SPEC, "sm_90")
    assert again == "memory"
