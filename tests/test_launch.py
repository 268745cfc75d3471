"""Launch stage on the CPU: what a Launcher passes to its kernel (no GPU: CuPy's device calls
and the driver's tensor-map encoder are replaced by recorders)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from jitmarlin.jit import launch
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels import launch as family_launch
from jitmarlin.kernels import planner
from jitmarlin.kernels.problem import Problem


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
    monkeypatch.setattr(launch, "current_device", lambda: 0)
    monkeypatch.setattr(launch, "stream_object", lambda s: "stream")
    from cupy.cuda import driver as drv

    monkeypatch.setattr(drv, "funcSetAttribute", lambda *a: None)
    encoded = []

    def fake_map(ptr, elem_bytes, dims, row_bytes, box, swizzle_128b=False):
        encoded.append((ptr, elem_bytes, dims, row_bytes, box, swizzle_128b))
        v = np.zeros(1, launch.TENSOR_MAP)[0]
        v["opaque"][0] = ptr
        return v

    monkeypatch.setattr(launch, "tensor_map_2d", fake_map)
    return encoded


def _launcher(m, k=4096, n=4096, qtype="uint4b8", group=128, z=0):
    p = Problem(m, n, k, "float16", qtype, group)
    pl = planner.plan(get_profile("h100"), p)
    ws = types.SimpleNamespace(
        partials_ptr=2, locks_ptr=3, tagged_ptr=4, capacity=family_launch.workspace_capacity(132)
    )
    f = _Func()
    lz = family_launch.Launcher(pl, f, 0, 0, {"B": 0x10, "S": 0x20, "Z": z}, ws, n - 3, k - 8, 1.0)
    return lz, f, pl


def test_wgmma_launches_carry_x_tensor_map_per_buffer(no_device):
    lz, f, pl = _launcher(300, k=8192, n=8192)  # above 256 rows: 256 x 128 tiles
    assert pl.spec.wgmma and (pl.spec.tile_m, pl.spec.tile_n) == (256, 128)
    # the weight's maps, once: B as 512 rows of 8192 * 4 / 4 words, S as 64 groups of 8192 halves
    assert no_device == [
        (0x10, 8, (8192, 512), 8192 * 8, (128, 4), False),
        (0x20, 2, (8192, 64), 8192 * 2, (128, 1), False),
    ]
    del no_device[:]
    lz(0x1000, 8192, 0x9000, 0)
    lz(0x1000, 8192, 0xA000, 0)  # same x buffer: the maps are reused
    lz(0x2000, 8200, 0x9000, 0)  # another buffer (and row stride): new maps
    # 300 rows: a full row block, then one of 44 rows, read in boxes of 44 rows (KernelSpec.tail)
    assert pl.spec.tail
    assert no_device == [
        (0x1000, 2, (8184, 300), 8192 * 2, (64, 256), True),
        (0x1000, 2, (8184, 300), 8192 * 2, (64, 44), True),
        (0x2000, 2, (8184, 300), 8200 * 2, (64, 256), True),
        (0x2000, 2, (8184, 300), 8200 * 2, (64, 44), True),
    ]
    assert [c[-4]["opaque"][0] for c in f.calls] == [0x1000, 0x1000, 0x2000]  # xmap
    assert [c[-5]["opaque"][0] for c in f.calls] == [0x1000, 0x1000, 0x2000]  # xtail
    assert [c[-3]["opaque"][0] for c in f.calls] == [0x10] * 3 and f.calls[0][-2]["opaque"][0] == 0x20
    assert not f.calls[0][-1]["opaque"].any()  # no offsets: an empty map
    assert len(f.calls[0]) == 23 and f.calls[2][14] == 8200  # lda still passed as an int
    assert (f.calls[0][15], f.calls[0][16], f.calls[0][17]) == (
        lz.plan.iters,
        lz.plan.whole,
        44,
    )  # iters, whole, x_tail
    # 512 rows: whole row blocks, a kernel without the tail map and its argument
    lz, f, pl = _launcher(512, k=8192, n=8192)
    del no_device[:]
    lz(0x3000, 8192, 0x9000, 0)
    assert not pl.spec.tail and len(f.calls[0]) == 21 and f.calls[0][-4]["opaque"][0] == 0x3000
    assert no_device == [(0x3000, 2, (8184, 512), 8192 * 2, (64, 256), True)]


def test_weight_maps_follow_type_and_groups(no_device):
    # 8-bit codes, 128-wide tile: 256 words a box row; groups of 32: two scale rows a K step;
    # offsets get their own map
    _launcher(200, qtype="uint8", group=32, z=0x30)
    assert no_device == [
        (0x10, 8, (8192, 256), 8192 * 8, (256, 4), False),
        (0x20, 2, (4096, 128), 4096 * 2, (128, 2), False),
        (0x30, 2, (4096, 128), 4096 * 2, (128, 2), False),
    ]
    del no_device[:]
    _launcher(200, group=-1)  # per-channel scales: no scale maps
    assert [e[0] for e in no_device] == [0x10]


def test_x_tensor_maps_are_bounded(no_device):
    lz, f, _ = _launcher(64)
    for i in range(family_launch.MAX_X_MAPS + 5):
        lz(0x100000 + 256 * i, 4096, 0x9000, 0)
    assert len(lz.x_maps) == family_launch.MAX_X_MAPS
    assert (0x100000, 4096) not in lz.x_maps  # the oldest went first
    assert (0x100000 + 256 * (family_launch.MAX_X_MAPS + 4), 4096) in lz.x_maps


def test_mma_sync_launches_take_no_tensor_map(no_device):
    lz, f, pl = _launcher(16)
    assert not pl.spec.wgmma
    lz(0x1000, 4096, 0x9000, 0)
    assert no_device == [] and len(f.calls[0]) == 16 and lz.w_maps == ()


def test_a_launch_makes_its_device_current_where_another_is(no_device, monkeypatch):
    """x on GPU 0 while GPU 1 is current: the kernel (a function of GPU 0's module) launches
    inside GPU 0's device context, and where GPU 0 is current already no context is entered."""
    import contextlib

    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(d)
        yield
        entered.append(("left", d))

    monkeypatch.setattr(launch, "_cp", lambda: types.SimpleNamespace(cuda=types.SimpleNamespace(Device=device)))
    lz, f, _ = _launcher(16)
    entered.clear()

    class _Recording(_Func):
        def __call__(self, grid, block, args, shared_mem, stream):
            self.calls.append(list(entered))

    lz.func = rec = _Recording()
    monkeypatch.setattr(launch, "current_device", lambda: 1)
    lz(0x1000, 4096, 0x9000, 0)
    assert rec.calls == [[0]] and entered == [0, ("left", 0)]
    monkeypatch.setattr(launch, "current_device", lambda: 0)
    entered.clear()
    lz(0x1000, 4096, 0x9000, 0)
    assert rec.calls[1] == [] and entered == []


# ---- programmatic dependent launch --------------------------------------------------------------


def test_pdl_launches_pass_the_same_arguments_through_cuLaunchKernelEx(no_device, monkeypatch):
    """With pdl the launcher goes through cuLaunchKernelEx with the programmatic-serialization
    attribute; the parameter block it hands over holds what CuPy's launch would have passed (the
    tensor maps byte for byte), and the fixed arguments are not rebuilt on every call."""
    import ctypes

    from cuda.bindings import driver as cu

    launches = []

    def fake_ex(cfg, f, params, extra):  # reads the parameter values at the launch, as the driver does
        ptrs = (ctypes.c_void_p * 21).from_address(params)
        u64 = [ctypes.c_uint64.from_address(ptrs[i]).value for i in (0, 1, 2, 3, 4, 5, 7, 8)]
        i32 = [ctypes.c_int32.from_address(ptrs[i]).value for i in range(9, 17)]
        maps = [ctypes.string_at(ptrs[i], 128) for i in range(17, 21)]
        launches.append(
            (cfg, int(f), u64, ctypes.c_float.from_address(ptrs[6]).value, i32, maps, [ptrs[i] for i in range(21)])
        )
        return (cu.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(cu, "cuLaunchKernelEx", fake_ex)
    from dataclasses import replace

    p = Problem(512, 8192, 8192, "float16", "uint4b8", 128)  # whole row blocks: 21 arguments
    prof = get_profile("h100")
    pl = planner.plan(prof, p)
    ws = types.SimpleNamespace(
        partials_ptr=2, locks_ptr=3, tagged_ptr=4, capacity=family_launch.workspace_capacity(132)
    )
    f = _Func()
    with pytest.raises(ValueError, match="not built for programmatic dependent launch"):
        family_launch.Launcher(pl, f, 0, 0x77, {"B": 0x10, "S": 0x20, "Z": 0}, ws, 8189, 8184, 0.5, pdl=True)
    pl = planner.plan(prof, p, replace(pl.spec, pdl=True))
    lz = family_launch.Launcher(pl, f, 0, 0x77, {"B": 0x10, "S": 0x20, "Z": 0}, ws, 8189, 8184, 0.5, pdl=True)
    lz(0x1000, 8192, 0x9000, 0x5000)
    lz(0x1000, 8200, 0xA000, 0)
    assert f.calls == [] and len(launches) == 2
    cfg, fptr, u64, gscale, i32, maps, addr = launches[0]
    assert fptr == _Func.ptr and (cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes) == (
        pl.grid,
        pl.spec.threads,
        pl.smem_bytes,
    )
    assert int(cfg.hStream) == 0x77 and cfg.numAttrs == 1
    assert cfg.attrs[0].id == cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert cfg.attrs[0].value.programmaticStreamSerializationAllowed == 1
    assert u64 == [0x1000, 0x10, 0x20, 0, 0x5000, 0x9000, 2, 3]  # x, B, S, Z, bias, C, workspace
    assert gscale == 0.5 and i32 == [512, 8192, 8192, 8189, 8184, 8192, pl.iters, pl.whole]
    assert maps[0][:8] == (0x1000).to_bytes(8, "little")  # x's tensor map
    assert maps[1][:8] == (0x10).to_bytes(8, "little") and not any(maps[3])  # B's map; no offsets
    _, _, u64b, _, i32b, _, addrb = launches[1]
    assert u64b[4:6] == [0, 0xA000] and i32b[5] == 8200
    assert [e[3] for e in no_device[-2:]] == [8192 * 2, 8200 * 2]  # a map for each row stride
    assert addrb[1:4] == addr[1:4] and addrb[6:14] == addr[6:14]  # fixed arguments not rebuilt


# ---- the workspace ------------------------------------------------------------------------------


def test_every_plan_fits_the_workspace_of_its_gpu():
    """Every kernel the planner or the autotuner may launch, on every profile, stays inside the
    workspace made for that GPU: a counter for each block (two-block-an-SM plans have grids of
    2 x SMs), a tile-sized partial slot for each, a tagged slot for each hybrid gemv block."""
    from jitmarlin.jit.profiles import PROFILES

    shapes = [
        (4096, 6144),
        (4096, 28672),
        (14336, 4096),
        (8192, 10240),
        (8192, 57344),
        (28672, 8192),
        (512, 512),
        (2048, 8000),
    ]
    seen = {"o2": 0, "hybrid": 0, "problems": 0, "plans": 0}
    for prof in PROFILES.values():
        cap = family_launch.workspace_capacity(prof.sms)
        for k, n in shapes:
            for m in (1, 16, 33, 64, 128, 256, 1024):
                for qt, g in (("uint4b8", 128), ("float8_e4m3fn", -1), ("nvfp4", 16)):
                    p = Problem(m, n, k, "float16", qt, g)
                    specs = [planner.plan(prof, p).spec, *planner.candidate_specs(prof, p)]
                    seen["problems"] += 1
                    seen["plans"] += len(specs)
                    for spec in specs:
                        pl = planner.plan(prof, p, spec)
                        assert family_launch.workspace_misfit(pl, cap) is None, (prof.name, p)
                        seen["o2"] += pl.grid > prof.sms
                        seen["hybrid"] += getattr(spec, "spread", 0) == 2
    assert seen["o2"] > 0 and seen["hybrid"] > 0  # the grids past one block an SM were there
    # every problem planned (none skipped): profiles x 8 shapes x 7 Ms x 3 quant types
    assert seen["problems"] == len(PROFILES) * len(shapes) * 7 * 3
    assert seen["plans"] > seen["problems"]


def test_launcher_refuses_a_plan_past_its_workspace(no_device):
    """A workspace of one counter an SM (the sizing before session 19) is too small for 70B
    gate_up's two-blocks-an-SM plan at M = 64: its finishers past block 131 would count in on
    memory past the counters. The launcher refuses it before anything launches."""
    p = Problem(64, 57344, 8192, "float16", "uint4b8", 128)
    pl = planner.plan(get_profile("h100"), p)
    assert pl.grid == 264 and pl.spec.occupancy == 2
    need = family_launch.workspace_needs(pl)
    assert need == (264, 264 * pl.spec.tile_m * pl.spec.tile_n, 0)
    small = types.SimpleNamespace(
        partials_ptr=2, locks_ptr=3, tagged_ptr=4, capacity=(132, 132 * family_launch.MAX_SLOT_FLOATS, 132 * 512)
    )
    with pytest.raises(ValueError, match="needs 264 workspace counters, the workspace has 132"):
        family_launch.Launcher(pl, _Func(), 0, 0, {"B": 0x10, "S": 0x20, "Z": 0}, small, 57344, 8192, 1.0)
    ws = types.SimpleNamespace(
        partials_ptr=2, locks_ptr=3, tagged_ptr=4, capacity=family_launch.workspace_capacity(132)
    )
    family_launch.Launcher(pl, _Func(), 0, 0, {"B": 0x10, "S": 0x20, "Z": 0}, ws, 57344, 8192, 1.0)


def test_pdl_specs_keep_the_old_text_and_name_their_variant():
    """pdl=False specs keep their canonical text and name (stored tuned choices, bundles and cache
    keys from before stay valid); pdl=True ones round-trip and are named apart."""
    from dataclasses import replace

    from jitmarlin.kernels.spec import GemvSpec, KernelSpec, spec_from_canonical

    specs = [
        KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 16, 3),
        KernelSpec("sm90", "uint4b8", "bfloat16", 8, 16, 8, 4, 4, occupancy=1),
        GemvSpec("sm80", "uint4b8", "float16", 8, 16, 16, 4, 2, 8),
    ]
    for s in specs:
        assert "pdl" not in s.canonical() and spec_from_canonical(s.canonical()) == s
        p = replace(s, pdl=True)
        p.check()
        assert '"pdl":true' in p.canonical() and spec_from_canonical(p.canonical()) == p
        assert p.name == s.name + "p" and p.canonical() != s.canonical()
        with pytest.raises(ValueError, match="pdl must be a bool"):
            replace(s, pdl=2).check()


def test_pdl_default_comes_from_the_environment(monkeypatch):
    from jitmarlin.ops import linear as api

    monkeypatch.delenv("JITMARLIN_PDL", raising=False)
    assert api._pdl(None) is False and api._pdl(True) is True
    for v, want in (("1", True), (" On ", True), ("yes", True), ("0", False), ("off", False), ("", False)):
        monkeypatch.setenv("JITMARLIN_PDL", v)
        assert api._pdl(None) is want, v
        assert api._pdl(False) is False
