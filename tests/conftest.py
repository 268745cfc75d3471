import glob
import json
import os
import shutil
import tempfile

import pytest


def _visible_gpu_nodes() -> bool:
    """A GPU is visible to this process without asking CuPy: device nodes exist and
    CUDA_VISIBLE_DEVICES does not hide them all."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _gpu_state() -> tuple[int, str | None]:
    """(number of GPUs CuPy sees, None) or (0, why GPU tests cannot run where a GPU is visible).
    A GPU machine whose CuPy fails to import or to reach the driver is broken, not GPU-less: its
    GPU tests fail with the reason instead of skipping."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - any import failure is reported, not swallowed
        return 0, (
            f"a GPU is visible (/dev/nvidia*) but CuPy failed to import: {type(e).__name__}: {e}"
            if _visible_gpu_nodes()
            else None
        )
    try:
        return cupy.cuda.runtime.getDeviceCount(), None
    except Exception as e:  # noqa: BLE001
        return 0, (
            f"a GPU is visible (/dev/nvidia*) but CuPy cannot reach it: {type(e).__name__}: {e}"
            if _visible_gpu_nodes()
            else None
        )


GPU_COUNT, GPU_BROKEN = _gpu_state()
HAS_GPU = GPU_COUNT > 0


def pytest_collection_modifyitems(config, items):
    if HAS_GPU or GPU_BROKEN:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (no GPU device visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    if GPU_BROKEN and "gpu" in item.keywords:
        pytest.fail(GPU_BROKEN, pytrace=False)


@pytest.fixture(autouse=True)
def _poisoned_gpu_allocations(request):
    """In GPU tests every fresh device allocation starts as NaN (all bits set: NaN in fp16, bf16
    and fp32): CuPy's allocations through an allocator that fills them, torch.empty through
    torch's fill_uninitialized_memory. An output element a kernel never writes then fails the
    checker instead of showing whatever an earlier call left in recycled memory."""
    if not HAS_GPU or "gpu" not in request.keywords:
        yield
        return
    import cupy

    pool = cupy.get_default_memory_pool()

    def poisoned(size):
        mem = pool.malloc(size)
        if size:
            cupy.cuda.runtime.memsetAsync(mem.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
        return mem

    prev = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(poisoned)
    try:
        import torch
    except ImportError:
        torch = None
    det = None
    if torch is not None:
        det = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory,
        )
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        cupy.cuda.set_allocator(prev)
        if det is not None:
            torch.use_deterministic_algorithms(det[0], warn_only=det[1])
            torch.utils.deterministic.fill_uninitialized_memory = det[2]


# ---- seeds: every random input comes from a seed that a failure prints -------------------------


def test_seed() -> int:
    """A fresh seed, or JITMARLIN_TEST_SEED to reproduce a failure."""
    env = os.environ.get("JITMARLIN_TEST_SEED", "").strip()
    return int(env) if env else int.from_bytes(os.urandom(4), "little")


test_seed.__test__ = False  # a helper, not a test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    seeds = getattr(item, "_jm_seeds", None)
    if rep.failed and seeds:
        rep.sections.append(("random seed", f"rng seed(s) {seeds}: rerun with JITMARLIN_TEST_SEED={seeds[0]}"))


# ---- margins of the element-wise checker ---------------------------------------------------------


def pytest_terminal_summary(terminalreporter):
    from jitmarlin.reference import MARGINS

    if not MARGINS:
        return
    rows = sorted(MARGINS.items())
    tr = terminalreporter
    tr.section("element-wise margins (largest |out - ref| / bound per kernel family and dtype)")
    for (fam, act), m in rows:
        tr.write_line(
            f"{fam:<22} {act:<9} worst {m['ratio']:.3f} of the bound, rel {m['rel']:.2e}, {m['checks']} checks"
        )
    path = os.environ.get("JITMARLIN_MARGINS_JSON")
    if path:
        with open(path, "w") as f:
            json.dump([{"family": fam, "act": act, **m} for (fam, act), m in rows], f, indent=1)


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
def seed(request):
    """This test's seed (fresh each run; JITMARLIN_TEST_SEED reproduces one): a failing test's
    report names it."""
    s = test_seed()
    request.node._jm_seeds = getattr(request.node, "_jm_seeds", []) + [s]
    return s


@pytest.fixture
def rng(seed):
    import numpy as np

    return np.random.default_rng(seed)


@pytest.fixture
def plant(monkeypatch):
    """plant(old, new): the CPU emulator runs kernels whose source has `old` replaced by `new`
    (a planted bug it must catch); `old` must occur in every source it renders."""
    from jitmarlin import emu
    from jitmarlin.kernels import render as render_mod

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

    from jitmarlin.jit import bundle as bundle_mod

    def _rewrite(src, dst, edit):
        with tarfile.open(src) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        edit(files)
        with tarfile.open(dst, "w") as tar:
            for name, data in files.items():
                bundle_mod._tar_add(tar, name, data)

    return _rewrite


class SeededCache:
    """A cache dir holding two real sm_90 kernels (`keys`); tests work on copies (`copy`)."""

    def __init__(self, directory, keys):
        self.dir, self.keys = directory, keys

    def copy(self, dst):
        shutil.copytree(self.dir, dst)
        return dst


@pytest.fixture(scope="module")
def seeded_cache(tmp_path_factory):
    from jitmarlin.jit.cache import KernelCache
    from jitmarlin.kernels.spec import KernelSpec

    d = tmp_path_factory.mktemp("seeded") / "c"
    c = KernelCache(d, ro_dir="")
    keys = [c.get(KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, st), "sm_90")[1] for st in (4, 3)]
    c._open().close()  # flush SQLite's WAL so a plain copy holds everything
    return SeededCache(d, keys)
