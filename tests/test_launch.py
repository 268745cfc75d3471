"""Launch stage on the CPU: what a Launcher passes to its kernel (no GPU: CuPy's device calls
and the driver's tensor-map encoder are replaced by recorders)."""
from __future__ import annotations

import types

import numpy as np
import pytest

from jitmarlin import launch, planner
from jitmarlin.problem import Problem
from jitmarlin.profiles import get_profile


class _Func:
    ptr = 1

    def __init__(self):
        self.calls = []

    def __call__(self, grid, block, args, shared_mem, stream):
        self.calls.append(args)


@pytest.fixture
def no_device(monkeypatch):
    import contextlib

    cupy_like = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda d: contextlib.nullcontext()))
    monkeypatch.setattr(launch, "_cp", lambda: cupy_like)
    monkeypatch.setattr(launch, "stream_object", lambda s: "stream")
    from cupy.cuda import driver as drv

    monkeypatch.setattr(drv, "funcSetAttribute", lambda *a: None)
    encoded = []

    def fake_map(ptr, rows, cols, lda, box_rows):
        encoded.append((ptr, rows, cols, lda, box_rows))
        v = np.zeros(1, launch.TENSOR_MAP)[0]
        v["opaque"][0] = ptr
        return v

    monkeypatch.setattr(launch, "x_tensor_map", fake_map)
    return encoded


def _launcher(m, k=4096, n=4096):
    p = Problem(m, n, k, "float16", "uint4b8", 128)
    pl = planner.plan(get_profile("h100"), p)
    ws = types.SimpleNamespace(partials_ptr=2, locks_ptr=3)
    f = _Func()
    lz = launch.Launcher(pl, f, 0, 0, {"B": 10, "S": 11, "Z": 0}, ws, n - 3, k - 8, 1.0)
    return lz, f, pl


def test_wgmma_launches_carry_x_tensor_map_per_buffer(no_device):
    lz, f, pl = _launcher(200)
    assert pl.spec.wgmma
    lz(0x1000, 4096, 0x9000, 0)
    lz(0x1000, 4096, 0xa000, 0)          # same x buffer: the map is reused
    lz(0x2000, 4104, 0x9000, 0)          # another buffer (and row stride): a new map
    assert no_device == [(0x1000, 200, 4088, 4096, pl.spec.tile_m), (0x2000, 200, 4088, 4104, pl.spec.tile_m)]
    assert [c[-1]["opaque"][0] for c in f.calls] == [0x1000, 0x1000, 0x2000]
    assert len(f.calls[0]) == 17 and f.calls[2][14] == 4104   # lda still passed as an int


def test_x_tensor_maps_are_bounded(no_device):
    lz, f, _ = _launcher(64)
    for i in range(launch.MAX_X_MAPS + 5):
        lz(0x100000 + 256 * i, 4096, 0x9000, 0)
    assert len(lz.x_maps) == launch.MAX_X_MAPS
    assert (0x100000, 4096) not in lz.x_maps                       # the oldest went first
    assert (0x100000 + 256 * (launch.MAX_X_MAPS + 4), 4096) in lz.x_maps


def test_mma_sync_launches_take_no_tensor_map(no_device):
    lz, f, pl = _launcher(16)
    assert not pl.spec.wgmma
    lz(0x1000, 4096, 0x9000, 0)
    assert no_device == [] and len(f.calls[0]) == 16
