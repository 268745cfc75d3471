"""Run generated kernels on the CPU through the warp emulator (templates/emu/).

The kernel source is rendered with the 'emu' instruction layer, built with the host C++
compiler into a shared library and launched through ctypes. Every fragment layout, dequant bit
trick, pipeline stage, barrier and Stream-K lock runs exactly as written for the GPU; only the
instruction layer differs. Meant for tests and debugging: it is slow (seconds per small GEMM).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from jitmarlin.kernels.planner import Plan
from jitmarlin.kernels.render import render
from jitmarlin.kernels.spec import AnySpec, DequantSpec, GemvSpec
from jitmarlin.weights import halves, kernel_form
from jitmarlin.weights.quant import QuantizedWeight

_libs: dict[str, ctypes.CDLL] = {}


def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


class EmuBuildDirError(RuntimeError):
    """The emulator's build directory is not this user's private directory: nothing is loaded
    from it (a .so there would run with this process's rights)."""


def _private(st: os.stat_result) -> str | None:
    """Why a build-dir path with stat `st` is not safe to load from, or None."""
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not this user (uid {os.geteuid()})"
    if stat.S_IMODE(st.st_mode) & 0o022:
        return f"writable by group or other (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _build_dir() -> Path:
    """JITMARLIN_EMU_DIR, else a per-user /tmp/jitmarlin-emu-<uid> made 0700. Refused
    (EmuBuildDirError) unless a real directory owned by this user and not writable by others:
    a shared /tmp path with a predictable name could be planted by anyone."""
    env = os.environ.get("JITMARLIN_EMU_DIR")
    d = Path(env) if env else Path(tempfile.gettempdir()) / f"jitmarlin-emu-{os.geteuid()}"
    if not d.is_dir():
        d.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
            os.chmod(d, 0o700)  # (mkdir's mode is masked by the umask)
    st = os.lstat(d)
    problem = (
        "a symlink"
        if stat.S_ISLNK(st.st_mode)
        else (None if stat.S_ISDIR(st.st_mode) else "not a directory") or _private(st)
    )
    if problem:
        raise EmuBuildDirError(
            f"emulator build dir {d} is {problem}; refusing to load kernels "
            "from it (set JITMARLIN_EMU_DIR to a private directory)"
        )
    return d


def _load_so(so: Path) -> ctypes.CDLL | None:
    """CDLL of a .so this user built (regular file, owned by this user, not writable by others);
    None when it is absent or fails those checks (then it is rebuilt)."""
    try:
        st = os.lstat(so)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or _private(st):
        with contextlib.suppress(OSError):
            so.unlink()  # (the directory is ours: we may replace what is in it)
        return None
    return ctypes.CDLL(str(so))


def build(spec: AnySpec) -> ctypes.CDLL:
    """Compile `spec` (either kind) for the emulator (cached by source hash) and load it."""
    src = render(spec, target="emu")
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    lib = _libs.get(digest)
    if lib is not None:
        return lib
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("the CPU emulator needs a C++17 compiler (g++ or clang++)")
    d = _build_dir()
    so = d / f"{spec.name}_{digest}.so"
    lib = _load_so(so)
    if lib is None:
        cpp = d / f"{spec.name}_{digest}.cpp"
        cpp.write_text(src)
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        cmd = [cxx, "-std=c++17", "-O1", "-g0", "-fPIC", "-shared", "-w", "-o", str(tmp), str(cpp)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"emulator build of {spec.name} failed:\n{r.stderr[-4000:]}")
        os.chmod(tmp, 0o700)  # (the linker's mode follows the umask)
        os.replace(tmp, so)
        lib = _load_so(so)
        if lib is None:
            raise EmuBuildDirError(f"emulator library {so} changed after it was built")
    # Every entry point returns an int and ends in (seed, err, errlen); the middle differs.
    bufs = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(ctypes.c_int)]
    tail = [ctypes.c_uint, ctypes.c_char_p, ctypes.c_int]

    def entry(fn, *head, gscale=False):
        fn.restype = ctypes.c_int
        fn.argtypes = [*head, *bufs, *([ctypes.c_float] if gscale else []), *tail]

    grid, smem = ctypes.c_int, ctypes.c_int
    if spec.route == "fused":  # templates/emu/launcher.cuh, wgmma_launcher.cuh
        entry(lib.jm_emu_launch, grid, smem, gscale=True)
    elif spec.route == "moe":  # templates/emu/moe_launcher.cuh
        entry(lib.jm_emu_moe, grid, smem)
        if getattr(spec, "sorted_x", False):  # the sorted_x up stage's row copy of x
            entry(lib.jm_emu_moe_permute, grid)
        if spec.act_kernel:  # the split up stage's activation kernel
            entry(lib.jm_emu_moe_act, grid)
    elif spec.route == "moe_route":  # templates/emu/moe_route_launcher.cuh
        entry(lib.jm_emu_align)
        entry(lib.jm_emu_combine, grid)
    else:  # the dequantisation module's two entry points (templates/emu/dequant_launcher.cuh)
        entry(lib.jm_emu_dequant, grid)
        entry(lib.jm_emu_bias, grid)
    _libs[digest] = lib
    return lib


class EmuError(RuntimeError):
    """The emulator found a deadlock, an out-of-bounds access or a misaligned address."""


def run(
    plan: Plan,
    x_bits: np.ndarray,
    qw: QuantizedWeight,
    bias_bits: np.ndarray | None = None,
    *,
    seed: int = 1,
    poison: int = 0xFFFF,
) -> np.ndarray:
    """Launch `plan` on the CPU. x_bits: (M, in_features) uint16 patterns of the plan's
    activation dtype, already in the weight's column order (x[:, qw.perm] for act-order).

    Returns the (M, out_features) output bit patterns. The output buffer starts poisoned (NaN)
    with guard rows after it; the guard must be untouched, the locks back at zero and (hybrid
    gemv plans) the workspace slots untagged.
    """
    spec, p = plan.spec, plan.problem
    lib = build(spec)
    m, k_in = x_bits.shape
    assert m == p.m and k_in == qw.in_features and (p.n, p.k) == (qw.n, qw.k)
    n_out = qw.out_features
    a = np.ascontiguousarray(x_bits, dtype=np.uint16)
    b, s, _ = _kernel_arrays(qw, spec.act)
    z = qw.offsets_for(spec.act)
    z = None if z is None else np.ascontiguousarray(z)
    guard_rows = 2
    c = np.full((m + guard_rows, n_out), poison, dtype=np.uint16)
    tagged = isinstance(spec, GemvSpec) and spec.tagged_words(plan.grid) > 0
    if tagged:  # tagged 64-bit slots (hybrid and pair gemv plans), empty (zero) between launches
        partials = np.zeros(spec.tagged_words(plan.grid), dtype=np.uint64)
    else:
        partials = np.full(plan.grid * spec.tile_m * spec.tile_n, np.nan, dtype=np.float32)
    locks = np.zeros(plan.grid, dtype=np.int32)
    bias = None if bias_bits is None else np.ascontiguousarray(bias_bits, dtype=np.uint16)
    arrays = [a, b, s, z, bias, c, partials, locks]
    ptrs = (ctypes.c_void_p * 8)(*[None if v is None else v.ctypes.data for v in arrays])
    sizes = (ctypes.c_longlong * 8)(*[0 if v is None else v.nbytes for v in arrays])
    sizes[5] = m * n_out * 2  # C: the guard rows are not part of the buffer
    x_tail = p.m % spec.tile_m if getattr(spec, "wgmma", False) else 0  # (wgmma.cu.j2's short last row block)
    dims = (ctypes.c_int * 9)(p.m, p.n, p.k, n_out, k_in, k_in, plan.iters, plan.whole, x_tail)
    err = ctypes.create_string_buffer(512)
    gscale = qw.kernel_global_scale(spec.act)
    rc = lib.jm_emu_launch(plan.grid, plan.smem_bytes, ptrs, sizes, dims, gscale, seed, err, len(err))
    if rc:
        raise EmuError(f"{spec.name}: {err.value.decode()}")
    if not np.all(c[m:] == poison):
        raise EmuError(f"{spec.name}: the kernel wrote past the end of the output")
    if np.any(locks != 0):
        raise EmuError(f"{spec.name}: workspace locks not reset to zero after the launch")
    if tagged and np.any(partials):  # hybrid tags, pair plans' swapped-in sums
        raise EmuError(f"{spec.name}: tagged workspace slots left after the launch")
    return c[:m]


def _kernel_arrays(w, act: str):
    """(packed, scales, factor) of a QuantizedWeight or MoEWeight as a kernel of `act` reads them
    (weights.kernel_form): contiguous host arrays and the power of two its outputs take."""
    b, s, factor = kernel_form.kernel_form(w.qtype, np.asarray(w.packed), w.scales_for(act), act)
    return np.ascontiguousarray(b), np.ascontiguousarray(s), factor


def run_values(plan: Plan, x: np.ndarray, qw: QuantizedWeight, bias=None, seed: int = 1) -> np.ndarray:
    """Like run() with float inputs (rounded to the activation dtype); returns float32 output."""
    act = plan.spec.act
    x = np.asarray(x)
    if qw.perm is not None:
        x = x[:, qw.perm]
    xb = halves.to_bits(x, act)
    bb = None if bias is None else halves.to_bits(bias, act)
    return halves.from_bits(run(plan, xb, qw, bb, seed=seed), act)


# ---- the large-M route's dequantisation module ---------------------------------------------------


def _call(entry, name: str, grid: int, arrays: list, sizes: list[int], dims: list[int], seed: int):
    ptrs = (ctypes.c_void_p * len(arrays))(*[None if v is None else v.ctypes.data for v in arrays])
    nbytes = (ctypes.c_longlong * len(arrays))(*sizes)
    d = (ctypes.c_int * len(dims))(*dims)
    err = ctypes.create_string_buffer(512)
    if entry(grid, ptrs, nbytes, d, seed, err, len(err)):
        raise EmuError(f"{name}: {err.value.decode()}")


def run_dequant(spec: DequantSpec, qw: QuantizedWeight, *, seed: int = 1, poison: int = 0xFFFF) -> np.ndarray:
    """Expand `qw` with the dequantisation kernel on the CPU. Returns the (n, k) uint16 bit
    patterns of `spec.act` it wrote: the padded weight in the kernel's column order (act-order
    weights are not unpermuted), the global scale and the kernel's factor not applied
    (qw.kernel_global_scale(act) / qw.global_scale: the float decode's power of two,
    weights.kernel_form). The output starts poisoned (NaN) with guard rows after it, which must
    stay untouched."""
    lib = build(spec)
    assert spec.qtype == qw.qtype
    b, s, _ = _kernel_arrays(qw, spec.act)
    z = qw.offsets_for(spec.act)
    z = None if z is None else np.ascontiguousarray(z)
    guard_rows = 2
    w = np.full((qw.n + guard_rows, qw.k), poison, dtype=np.uint16)
    arrays = [b, s, z, w]
    sizes = [b.nbytes, s.nbytes, 0 if z is None else z.nbytes, qw.n * qw.k * 2]
    _call(lib.jm_emu_dequant, spec.name, spec.grid(qw.n, qw.k), arrays, sizes, [qw.n, qw.k], seed)
    if not np.all(w[qw.n :] == poison):
        raise EmuError(f"{spec.name}: the kernel wrote past the end of W")
    return w[: qw.n]


def run_bias(
    spec: DequantSpec, bias_bits: np.ndarray, m: int, grid: int, *, seed: int = 1, poison: int = 0xFFFF
) -> np.ndarray:
    """Run the module's bias kernel on the CPU: returns the (m, n_out) rows it wrote."""
    lib = build(spec)
    bias = np.ascontiguousarray(bias_bits, dtype=np.uint16)
    n_out = bias.shape[0]
    guard_rows = 2
    c = np.full((m + guard_rows, n_out), poison, dtype=np.uint16)
    _call(lib.jm_emu_bias, spec.name + "_bias", grid, [bias, c], [bias.nbytes, m * n_out * 2], [m, n_out], seed)
    if not np.all(c[m:] == poison):
        raise EmuError(f"{spec.name}_bias: the kernel wrote past the end of C")
    return c[:m]


# ---- the MoE family (kernels/moe): routing module and grouped GEMMs -------------------------------


def _ptrs(arrays: list):
    ptrs = (ctypes.c_void_p * len(arrays))(*[None if v is None else v.ctypes.data for v in arrays])
    sizes = (ctypes.c_longlong * len(arrays))(*[0 if v is None else v.nbytes for v in arrays])
    return ptrs, sizes


def run_moe_align(plan, topk_ids: np.ndarray, expert_map=None, *, seed: int = 1):
    """The alignment kernel on the CPU: (sorted pair ids, expert of each row block, rows in use).
    Outputs start poisoned (-7) so unwritten entries show."""
    spec = plan.route
    lib = build(spec)
    p = plan.problem
    ids = np.ascontiguousarray(topk_ids, dtype=np.int32).reshape(-1)
    emap = None if expert_map is None else np.ascontiguousarray(expert_map, dtype=np.int32)
    sorted_ids = np.full(plan.sorted_rows, -7, dtype=np.int32)
    blk = np.full(plan.max_blocks, -7, dtype=np.int32)
    n_rows = np.full(1, -7, dtype=np.int32)
    ptrs, sizes = _ptrs([ids, emap, sorted_ids, blk, n_rows])
    n_global = p.experts if emap is None else emap.shape[0]
    dims = (ctypes.c_int * 4)(ids.shape[0], n_global, p.experts, plan.max_blocks)
    err = ctypes.create_string_buffer(512)
    if lib.jm_emu_align(ptrs, sizes, dims, seed, err, len(err)):
        raise EmuError(f"{spec.name}: {err.value.decode()}")
    return sorted_ids, blk, int(n_rows[0])


def run_moe_gemm(
    plan,
    spec,
    a_bits: np.ndarray,
    mw,
    sorted_ids,
    blk,
    n_rows: int,
    topk_w,
    *,
    topk: int,
    seed: int = 1,
    poison: int = 0xFFFF,
    topk_ids=None,
    expert_map=None,
) -> np.ndarray:
    """One grouped GEMM (spec = plan.up or plan.down) on the CPU. a_bits: the A rows (x for the
    up stage, read at pair / topk; the intermediate for the down stage, read at pair). Returns
    the (pairs, n_out) output bit patterns; rows the routing did not reach stay `poison`. A direct
    spec (MoEGemvSpec.direct) reads topk_ids and expert_map instead of the aligned list (sorted_ids,
    blk and n_rows may be None)."""
    lib = build(spec)
    p = plan.problem
    pairs = p.pairs
    n_out = mw.out_features // 2 if spec.gated else mw.out_features
    a = np.ascontiguousarray(a_bits, dtype=np.uint16)
    b, s, factor = _kernel_arrays(mw, spec.act)
    z = mw.offsets_for(spec.act)
    z = None if z is None else np.ascontiguousarray(z)
    bias = None if mw.bias is None else np.ascontiguousarray(mw.bias, dtype=np.float32)
    gs = np.ones(mw.num_experts, np.float32) if mw.global_scales is None else mw.global_scales
    gs = np.ascontiguousarray(kernel_form.scaled_factors(gs, factor))
    tw = None if topk_w is None else np.ascontiguousarray(topk_w, dtype=np.float32).reshape(-1)
    guard_rows = 2
    # the up stage of a sorted_h plan writes H in the aligned list's (padded) row order
    out_rows = plan.h_rows if spec.gated else pairs
    c = np.full((out_rows + guard_rows, n_out), poison, dtype=np.uint16)
    nr = None if n_rows is None else np.array([n_rows], dtype=np.int32)
    splits = plan.splits if spec.stage == "down" else plan.up_splits
    cp_cols = n_out if spec.stage == "down" else mw.n  # the up stage keeps every interleaved column
    cp_ = np.full((splits, pairs, cp_cols), np.nan, dtype=np.float32) if splits > 1 else None
    arrays = [
        a,
        b,
        s,
        z,
        bias,
        gs,
        tw,
        None if sorted_ids is None else np.ascontiguousarray(sorted_ids, dtype=np.int32),
        None if blk is None else np.ascontiguousarray(blk, dtype=np.int32),
        nr,
        c,
        cp_,
    ]
    direct = getattr(spec, "direct", False)
    if direct:
        emap = None if expert_map is None else np.ascontiguousarray(expert_map, dtype=np.int32)
        arrays += [np.ascontiguousarray(topk_ids, dtype=np.int32).reshape(-1), emap]
    ptrs, sizes = _ptrs(arrays)
    sizes[10] = out_rows * n_out * 2
    n = mw.n
    extra = [p.experts if expert_map is None else len(expert_map), p.experts] if direct else []
    if getattr(spec, "wgmma", False):  # the tensor maps' extents (templates/emu/moe_launcher.cuh)
        extra = [mw.num_experts, a.shape[0]]
    dims = (ctypes.c_int * (8 + len(extra)))(pairs, topk, n, mw.k, n_out, mw.in_features, a.shape[1], splits, *extra)
    err = ctypes.create_string_buffer(512)
    grid = plan.grid(spec, n)
    if lib.jm_emu_moe(grid, spec.smem_bytes(), ptrs, sizes, dims, seed, err, len(err)):
        raise EmuError(f"{spec.name}: {err.value.decode()}")
    if not np.all(c[out_rows:] == poison):
        raise EmuError(f"{spec.name}: the kernel wrote past the end of the output")
    if splits > 1:
        if not np.all(c == poison):
            raise EmuError(f"{spec.name}: a split plan wrote the act-dtype rows")
        if spec.stage == "down":
            return cp_
        # the up stage's activation kernel: the splits' sums -> the intermediate rows
        h = np.full((pairs + guard_rows, n_out), poison, dtype=np.uint16)
        ptrs2 = (ctypes.c_void_p * 2)(cp_.ctypes.data, h.ctypes.data)
        sizes2 = (ctypes.c_longlong * 2)(cp_.nbytes, pairs * n_out * 2)
        dims2 = (ctypes.c_int * 4)(pairs, n, n_out, splits)
        if lib.jm_emu_moe_act(plan.act_grid, ptrs2, sizes2, dims2, seed, err, len(err)):
            raise EmuError(f"{spec.name}_act: {err.value.decode()}")
        if not np.all(h[pairs:] == poison):
            raise EmuError(f"{spec.name}_act: the kernel wrote past the end of the output")
        return h[:pairs]
    return c[:out_rows]


def run_moe_permute(plan, x_bits: np.ndarray, sorted_ids, n_rows: int, *, seed: int = 1, poison: int = 0xFFFF):
    """The sorted_x up stage's `_permute` kernel on the CPU: x's rows in the aligned list's order
    ((sorted_rows, k_in) bit patterns; rows past the rows in use stay `poison`)."""
    spec = plan.up
    lib = build(spec)
    p = plan.problem
    a = np.ascontiguousarray(x_bits, dtype=np.uint16)
    guard_rows = 2
    xs = np.full((plan.sorted_rows + guard_rows, a.shape[1]), poison, dtype=np.uint16)
    srt = np.ascontiguousarray(sorted_ids, dtype=np.int32)
    nr = np.array([n_rows], dtype=np.int32)
    sizes = [a.nbytes, srt.nbytes, nr.nbytes, plan.sorted_rows * a.shape[1] * 2]
    dims = [p.pairs, p.topk, a.shape[1], a.shape[1]]
    _call(lib.jm_emu_moe_permute, f"{spec.name}_permute", plan.permute_grid, [a, srt, nr, xs], sizes, dims, seed)
    if not np.all(xs[plan.sorted_rows :] == poison):
        raise EmuError(f"{spec.name}_permute: the kernel wrote past the end of its rows")
    return xs[: plan.sorted_rows]


def run_moe_combine(
    plan, y_bits: np.ndarray, topk_ids, expert_map=None, *, seed: int = 1, poison: int = 0xFFFF
) -> np.ndarray:
    """The combine kernel on the CPU: (T, hidden) bit patterns of each token's rows summed."""
    spec = plan.route
    lib = build(spec)
    p = plan.problem
    ids = np.ascontiguousarray(topk_ids, dtype=np.int32).reshape(-1)
    emap = None if expert_map is None else np.ascontiguousarray(expert_map, dtype=np.int32)
    split = y_bits.dtype == np.float32  # the down GEMM's fp32 partial sums (splits, pairs, hidden)
    y = np.ascontiguousarray(y_bits, dtype=np.float32 if split else np.uint16)
    guard_rows = 2
    out = np.full((p.tokens + guard_rows, p.hidden), poison, dtype=np.uint16)
    ptrs, sizes = _ptrs([None if split else y, ids, emap, out, y if split else None])
    sizes[3] = p.tokens * p.hidden * 2
    n_global = p.experts if emap is None else emap.shape[0]
    dims = (ctypes.c_int * 6)(n_global, p.experts, p.tokens, p.topk, p.hidden, y.shape[0] if split else 1)
    err = ctypes.create_string_buffer(512)
    if lib.jm_emu_combine(plan.combine_grid, ptrs, sizes, dims, seed, err, len(err)):
        raise EmuError(f"{spec.combine_name}: {err.value.decode()}")
    if not np.all(out[p.tokens :] == poison):
        raise EmuError(f"{spec.combine_name}: the kernel wrote past the end of the output")
    return out[: p.tokens]


def run_moe(
    plan,
    x: np.ndarray,
    w13,
    w2,
    topk_weights,
    topk_ids,
    *,
    expert_map=None,
    apply_router_weight_on_input: bool = False,
    seed: int = 1,
) -> np.ndarray:
    """The whole MoE block on the CPU, as jitmarlin.moe runs it on a GPU: float inputs (x
    rounded to the plan's activation dtype), float32 (T, hidden) output."""
    act = plan.up.act
    p = plan.problem
    xb = halves.to_bits(np.asarray(x), act)
    if xb.shape[1] % 8:
        raise ValueError("hidden must be a multiple of 8")
    # a direct plan (T = 1) launches no alignment: its GEMV kernels read the routing themselves
    sorted_ids, blk, n_rows = (None,) * 3 if plan.direct else run_moe_align(plan, topk_ids, expert_map, seed=seed)
    tw = np.asarray(topk_weights, dtype=np.float32)
    routing = dict(topk_ids=topk_ids, expert_map=expert_map)
    if getattr(plan.up, "sorted_x", False):  # x's rows copied into the aligned list's order first
        xb = run_moe_permute(plan, xb, sorted_ids, n_rows, seed=seed)
    h = run_moe_gemm(
        plan,
        plan.up,
        xb,
        w13,
        sorted_ids,
        blk,
        n_rows,
        tw if apply_router_weight_on_input else None,
        topk=p.topk,
        seed=seed,
        **routing,
    )
    y = run_moe_gemm(
        plan,
        plan.down,
        h,
        w2,
        sorted_ids,
        blk,
        n_rows,
        None if apply_router_weight_on_input else tw,
        topk=1,
        seed=seed,
        **routing,
    )
    return halves.from_bits(run_moe_combine(plan, y, topk_ids, expert_map, seed=seed), act)
