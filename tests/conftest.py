import os
import shutil
import tempfile

import pytest


def _gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


HAS_GPU = _gpu_count() > 0


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none visible to CuPy)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _session_cache_dir():
    """All tests share one kernel cache (the NVRTC matrix compiles each kernel once per session),
    never the user's. JITMARLIN_TEST_CACHE_DIR reuses a prewarmed one."""
    keep = os.environ.get("JITMARLIN_TEST_CACHE_DIR")
    d = keep or tempfile.mkdtemp(prefix="jitmarlin-test-cache-")
    old = os.environ.get("JITMARLIN_CACHE_DIR")
    os.environ["JITMARLIN_CACHE_DIR"] = d
    yield d
    if old is None:
        os.environ.pop("JITMARLIN_CACHE_DIR", None)
    else:
        os.environ["JITMARLIN_CACHE_DIR"] = old
    if not keep:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def rng():
    # fresh inputs every run; the seed is printed on failure through the test id's repr
    import numpy as np

    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def plant(monkeypatch):
    """plant(old, new): the CPU emulator runs kernels whose source has `old` replaced by `new`
    (a planted bug it must catch); `old` must occur in every source it renders."""
    from jitmarlin import emu
    from jitmarlin import render as render_mod

    real = render_mod.render

    def _plant(old: str, new: str) -> None:
        def planted(spec, target="cuda"):
            src = real(spec, target)
            assert old in src, f"{old!r} not in the source of {spec.name}"
            return src.replace(old, new)

        monkeypatch.setattr(emu, "render", planted)

    return _plant


@pytest.fixture
def rewrite_bundle():
    """rewrite_bundle(src, dst, edit): copy bundle `src` to `dst`, passing its {name: bytes}
    through edit() first (tampered and old-format bundles)."""
    import tarfile

    from jitmarlin import bundle as bundle_mod

    def _rewrite(src, dst, edit):
        with tarfile.open(src) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        edit(files)
        with tarfile.open(dst, "w") as tar:
            for name, data in files.items():
                bundle_mod._tar_add(tar, name, data)

    return _rewrite
