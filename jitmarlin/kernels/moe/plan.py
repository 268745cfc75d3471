"""MoE plan rules (pure): the routing module's block size and the two grouped GEMMs' tiles for a
layer of E local experts, top-k routing and T tokens.

Nothing here may depend on the routing itself (it is on the GPU, and changes between replays of a
CUDA graph): the grids are sized for the worst case, max_blocks row blocks of block_m rows, and
blocks past the rows the alignment kernel produced return at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.launch import PDL_MIN_CC
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.moe.spec import (
    ACTIVATIONS,
    GEMV_BOUNDED_LOADS,
    GEMV_WARPS_PER_SM,
    ROUTE_THREADS,
    MoEGemvSpec,
    MoERouteSpec,
    MoESpec,
)
from jitmarlin.kernels.moe.wgmma import (
    MoEWgmmaSpec,
    fits,
    sorted_layouts,
    wgmma_candidates,
    wgmma_default,
    wgmma_stage_spec,
    wgmma_tm,
)
from jitmarlin.kernels.plan_base import PATH_MAX_STAGES, check_problem, group_blocks, max_tm, wgmma_available
from jitmarlin.kernels.problem import Problem


@dataclass(frozen=True)
class MoEProblem:
    """tokens T, topk k, experts E on this GPU; n13/k13 and n2/k2 the padded kernel dims of one
    expert's w13 (2I x hidden) and w2 (hidden x I); n_out2 = hidden, inter = I."""

    tokens: int
    topk: int
    experts: int
    n13: int
    k13: int
    n2: int
    k2: int
    inter: int
    hidden: int
    act: str
    qtype: str
    group_size: int
    activation: str = "silu"
    qtype2: str = ""  # w2's quant type and group where they differ from w13's (GGUF mixes)
    group2: int = 0

    @property
    def pairs(self) -> int:
        return self.tokens * self.topk

    @property
    def down_qtype(self) -> str:
        return self.qtype2 or self.qtype

    @property
    def down_group(self) -> int:
        return self.group2 if self.qtype2 else self.group_size

    def dense(self, stage: str) -> Problem:
        """The dense problem of one grouped GEMM (M = every routed pair)."""
        if stage == "up":
            return Problem(self.pairs, self.n13, self.k13, self.act, self.qtype, self.group_size)
        return Problem(self.pairs, self.n2, self.k2, self.act, self.down_qtype, self.down_group)


# The most K splits a down GEMM takes (down_splits' cap; wgmma plans' bound)
MAX_SPLITS = 16
# plan_moe(pdl=None) takes PDL with the planner's direct GEMV tiles on sm_90+ (e125, e131). Off
# until tests/test_moe_gpu.py -k pdl has passed on a GPU (the CPU emulator checks that no block
# reads H or Y before its wait, not the launches themselves).
AUTO_PDL = False


@dataclass(frozen=True)
class MoEPlan:
    problem: MoEProblem
    route: MoERouteSpec
    up: MoESpec | MoEGemvSpec | MoEWgmmaSpec
    down: MoESpec | MoEGemvSpec | MoEWgmmaSpec
    max_blocks: int  # row blocks the alignment can produce in the worst case
    splits: int = 1  # K splits of the down GEMM (fp32 partial sums, added by the combine kernel)
    up_splits: int = 1  # K splits of the w13 GEMM (fp32 partial sums; the activation runs in a kernel of its own)

    @property
    def block_m(self) -> int:
        return self.route.block_m

    @property
    def gemv(self) -> bool:
        """The GEMV kind (MoEGemvSpec stages: no K splits)."""
        return isinstance(self.up, MoEGemvSpec)

    @property
    def wgmma(self) -> bool:
        """The Hopper kind (MoEWgmmaSpec stages, sm_90a: K splits of the down stage only)."""
        return isinstance(self.up, MoEWgmmaSpec)

    @property
    def direct(self) -> bool:
        """The GEMV kind at T = 1 without the alignment launch (MoEGemvSpec.direct): row block b
        is pair b, its expert read by the GEMV kernels from topk_ids; `route` still holds the
        combine kernel, whose launch stays."""
        return self.gemv and self.up.direct

    @property
    def sorted_rows(self) -> int:
        return self.max_blocks * self.block_m

    @property
    def pdl(self) -> bool:
        """The w2 GEMV and the combine run with programmatic dependent launch (MoEGemvSpec.pdl)."""
        return self.down.pdl

    @property
    def h_rows(self) -> int:
        """Rows of the intermediate H: one a pair, or the aligned list's padded rows (sorted_h)."""
        return self.sorted_rows if getattr(self.up, "sorted_h", False) else self.problem.pairs

    def grid(self, spec: MoESpec, n: int) -> int:
        return self.max_blocks * -(-n // spec.tile_n) * (self.splits if spec.stage == "down" else self.up_splits)

    @property
    def act_grid(self) -> int:
        """Blocks of the up stage's activation kernel (up_splits > 1): one thread per two features."""
        return -(-self.problem.pairs * (self.problem.inter // 2) // self.up.threads)

    @property
    def grid_up(self) -> int:
        return self.grid(self.up, self.problem.n13)

    @property
    def grid_down(self) -> int:
        return self.grid(self.down, self.problem.n2)

    @property
    def permute_grid(self) -> int:
        """Blocks of the sorted_x up stage's row copy of x: one 16-byte chunk a thread over the
        worst routing's rows, at most 1024 blocks (a grid-stride loop covers the rest)."""
        return min(1024, -(-self.sorted_rows * (self.problem.hidden // 8) // self.up.threads))

    @property
    def combine_grid(self) -> int:
        return -(-self.problem.tokens * (self.problem.hidden // 8) // ROUTE_THREADS)


def max_blocks(pairs: int, experts: int, block_m: int) -> int:
    """Row blocks of the aligned list in the worst routing: each expert that gets pairs adds at
    most one partly filled block to the ceil(pairs / block_m) full ones."""
    return -(-pairs // block_m) + min(experts, pairs)


def _tm_for(profile: DeviceProfile, p: MoEProblem, dense: Problem) -> int:
    """m16 blocks a tile: by the rows an expert gets when the routing is even (more rows, more
    reuse of each weight tile; fewer, less padding)."""
    rows = -(-p.pairs // max(1, min(p.experts, p.pairs)))
    tm = 1 if rows <= 16 else 2 if rows <= 32 else 4
    # register-staged paths: the gather state and the gated epilogue leave room for two m16 blocks
    # (sm75's w13 kernel with four spilled ~100 bytes)
    return min(tm, max_tm(profile.path, dense), 4 if profile.path == "sm80" else 2)


def _spec(profile: DeviceProfile, dense: Problem, tm: int, stage: str, activation: str, row_blocks: int = 0) -> MoESpec:
    """The tile for one grouped GEMM: 128 columns, unless the row blocks an even routing fills
    (`row_blocks`) times 128-column tiles leave SMs idle and the w13 GEMM (which cannot split K:
    its activation needs whole sums) has the columns for 64-wide tiles."""
    gb = group_blocks(dense)
    legacy = profile.path != "sm80"
    order = ((8, 8), (8, 4), (4, 8), (4, 4))
    if stage == "up" and row_blocks and row_blocks * -(-dense.n // 128) < profile.sms:
        order = ((4, 8), (4, 4), (8, 8), (8, 4))
    for tn, tk in order:
        top = 2 if legacy else min(4, PATH_MAX_STAGES[profile.path])
        for stages in range(top, 1, -1):
            spec = MoESpec(
                profile.path, dense.qtype, dense.act, gb, tm, tn, tk, stages, stage, activation if stage == "up" else ""
            )
            try:
                spec.check()
            except ValueError:
                continue
            if dense.k % spec.tile_k:  # whole K tiles only
                continue
            if spec.smem_bytes() <= profile.smem_per_block:
                return spec
    raise UnsupportedError(f"no MoE tile fits {profile.name} for {dense.qtype} x {dense.act}")


# Decode: where an even routing gives each expert at most this many rows, the two grouped GEMMs
# are the GEMV kind (MoEGemvSpec, rows in blocks of 8) on the sm80 path.
GEMV_MAX_ROWS = 8


def _gemv_spec(
    profile: DeviceProfile, dense: Problem, stage: str, activation: str, row_blocks: int, balance: bool = False
) -> MoEGemvSpec | None:
    """The GEMV tile of one grouped GEMM: K split over enough warps that the row blocks of an even
    routing times the column blocks keep GEMV_WARPS_PER_SM warps an SM streaming (each warp at
    least three batches: on an H100 Qwen3-30B-A3B's w13 at T = 1 ran 16% faster with four a warp
    than with two, tools/PERF.md e115), blocks of 16, 8 or 4 warps with as many column blocks as
    fill the SMs; batches of at most four 16-byte loads a lane (4 k16 rows of a 4-bit type, 2 of
    an 8-bit one: 8-bit batches of 4 spilled at the 128 registers of 16 warps an SM,
    MoEGemvSpec.occupancy). balance (T = 1): _balanced_tile's tile where it spreads the work
    clearly better. None where no batch size divides K."""
    gb = group_blocks(dense)
    bits = MoEGemvSpec(profile.path, dense.qtype, dense.act, gb, 8, 1, 1, stage, activation).bits
    rows = dense.k // 16
    unroll = next(
        (
            u
            for u in (4, 2, 1)
            if rows % u == 0 and u * bits // 4 <= GEMV_BOUNDED_LOADS and (gb <= 0 or gb % u == 0 or u % gb == 0)
        ),
        None,
    )
    if unroll is None or dense.k % 16:
        return None
    n64 = dense.n // 64
    units = row_blocks * n64
    kw = 1
    while kw < 16 and units * kw < GEMV_WARPS_PER_SM * profile.sms and rows // (2 * kw) >= 3 * unroll:
        kw *= 2
    warps = 16 if kw >= 4 else 8
    while warps > max(4, kw) and (n64 % (warps // kw) or row_blocks * (n64 // (warps // kw)) < profile.sms):
        warps //= 2
    if balance:
        warps, kw = _balanced_tile(profile, row_blocks, n64, warps, kw)
    spec = MoEGemvSpec(profile.path, dense.qtype, dense.act, gb, warps, kw, unroll, stage, activation)
    spec.check()
    return spec


def _balance(profile: DeviceProfile, row_blocks: int, n64: int, warps: int, kw: int) -> float:
    """The share of the busiest SM's work that an even split would give it: the blocks go round
    the SMs, so the busiest takes ceil(blocks / SMs) of them, `warps // kw` column blocks each."""
    cb = warps // kw
    blocks = row_blocks * -(-n64 // cb)
    return row_blocks * n64 / profile.sms / (-(-blocks // profile.sms) * cb)


def _balanced_tile(profile: DeviceProfile, row_blocks: int, n64: int, warps: int, kw: int) -> tuple[int, int]:
    """(warps, kwarps) of a GEMV tile with no more K-warps whose blocks are all resident at once
    (16 warps an SM, MoEGemvSpec.occupancy) and that leaves the busiest SM at least 15 points less
    over an even share; else the given ones. On an H100 gpt-oss-20b's w13 at T = 1 (4 pairs x 90
    column blocks) ran 38.9 -> 32.8 us as 360 blocks of 4 warps (K over 4) instead of 180 of 16
    (K over 8, two column blocks a block: one wave and a half, the busiest SMs twice 2.7 column
    blocks' share); no other measured T = 1 tile had such an alternative (tools/PERF.md e131).
    Applied at T = 1 only, where that was measured."""
    best, best_eff = (warps, kw), _balance(profile, row_blocks, n64, warps, kw) + 0.15
    for w in (16, 8, 4):
        for k in (16, 8, 4, 2, 1):
            resident = profile.sms * (GEMV_WARPS_PER_SM // w)  # blocks at once (MoEGemvSpec.occupancy)
            if k > min(w, kw) or n64 % (w // k) or row_blocks * (n64 // (w // k)) > resident:
                continue
            eff = _balance(profile, row_blocks, n64, w, k)
            if eff > best_eff:
                best, best_eff = (w, k), eff
    return best


def plan_moe(
    profile: DeviceProfile,
    p: MoEProblem,
    *,
    tm: int | None = None,
    up: MoESpec | MoEGemvSpec | None = None,
    down: MoESpec | MoEGemvSpec | None = None,
    splits: int | None = None,
    up_splits: int | None = None,
    gemv: bool | None = None,
    wgmma: bool | None = None,
    direct: bool | None = None,
    pdl: bool | None = None,
) -> MoEPlan:
    """The routing module and the two grouped GEMMs for `p` on `profile` (no GPU needed). `up`,
    `down` (specs from stage_candidates), `splits` and `up_splits` override the planner's choices
    (sweeps, autotuning); `tm` or gemv=False asks for the mma.sync kernels, gemv=True for the GEMV
    ones (decode), wgmma=True for the warpgroup ones (sm_90; wgmma=False: not them). direct: the
    GEMV kind at T = 1 without the alignment launch; None (default) takes it wherever the planner's
    own plan at T = 1 is the GEMV kind (e118: 3.6-4.5 us faster a decode step on the H100),
    direct=False keeps the sorted one. pdl=True (or pdl GEMV tiles; sm_90+, the GEMV kind only):
    the w2 GEMV and the combine are launched with programmatic dependent launch behind the kernel
    before them; None (default) takes it with the planner's direct tiles on sm_90+ where AUTO_PDL
    (e125: 1.8-2.9 us less a decode step on the H100), False never. InputError when one does not
    fit `p`."""
    if p.activation not in ACTIVATIONS:
        raise InputError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {p.activation!r}")
    if p.tokens < 1 or p.topk < 1:
        raise InputError(f"tokens and topk must be >= 1, got {p.tokens} and {p.topk}")
    if not 1 <= p.experts <= ROUTE_THREADS:
        raise UnsupportedError(f"at most {ROUTE_THREADS} experts a GPU, got {p.experts}")
    if p.inter % 8 or p.hidden % 8:
        raise InputError(f"hidden and intermediate sizes must be multiples of 8, got {p.hidden}, {p.inter}")
    if bool(p.qtype2) != bool(p.group2):
        raise InputError("qtype2 and group2 (w2's quant type and group size) go together")
    d13, d2 = p.dense("up"), p.dense("down")
    check_problem(profile, d13)
    check_problem(profile, d2)
    # the planner's own choice at decode: no overrides, one token
    auto_direct = direct is None and p.tokens == 1 and (up, down, tm) == (None, None, None)
    auto_direct = auto_direct and wgmma is not True and splits in (None, 1) and up_splits in (None, 1)
    direct = _check_direct(p, up, down, tm, gemv, wgmma, direct)
    if direct:
        gemv = True
    auto_pdl = AUTO_PDL and pdl is None and (up, down, tm) == (None, None, None) and profile.cc >= PDL_MIN_CC
    pdl = _check_pdl(profile, up, down, gemv, wgmma, tm, False if pdl is None else pdl)
    wplan = None if pdl else _wgmma_plan(profile, p, d13, d2, up, down, tm, splits, up_splits, gemv, wgmma)
    if wplan is not None:
        return wplan
    direct = direct or auto_direct  # (applied only where the plan is the GEMV kind, as is auto_pdl)
    gplan = _gemv_plan(profile, p, d13, d2, up, down, tm, splits, up_splits, gemv, direct, pdl or (auto_pdl and direct))
    if gplan is not None:
        return gplan
    if pdl:
        raise InputError("pdl=True is a mode of the GEMV kind; this problem takes another kind")
    tm = (up or down).tm if (up or down) else tm or _tm_for(profile, p, d13)
    rows = max(min(p.experts, p.pairs), -(-p.pairs // (16 * tm)))  # row blocks of an even routing
    if up is None:
        up = _spec(profile, d13, tm, "up", p.activation, rows)
    else:
        _check_override(profile, up, d13, tm, "up", p.activation)
    if down is None:
        down = _spec(profile, d2, tm, "down", "")
    else:
        _check_override(profile, down, d2, tm, "down", "")
    route = MoERouteSpec(p.act, 16 * tm, profile.path)
    route.check()
    if splits is None:
        splits = down_splits(profile, p, down, 16 * tm)
    elif not (isinstance(splits, int) and 1 <= splits <= p.k2 // down.tile_k and (splits == 1 or down.path == "sm80")):
        raise InputError(
            f"splits must be 1..{p.k2 // down.tile_k} (K tiles of the down GEMM; > 1 on the sm80 "
            f"path only), got {splits!r}"
        )
    # up_splits: no planner rule yet (not measured; tools/bench --moe --sweep and the MoE tuner try it)
    if up_splits is None:
        up_splits = 1
    elif not (
        isinstance(up_splits, int) and 1 <= up_splits <= p.k13 // up.tile_k and (up_splits == 1 or up.path == "sm80")
    ):
        raise InputError(
            f"up_splits must be 1..{p.k13 // up.tile_k} (K tiles of the w13 GEMM; > 1 on the sm80 "
            f"path only), got {up_splits!r}"
        )
    return MoEPlan(p, route, up, down, max_blocks(p.pairs, p.experts, 16 * tm), splits, up_splits)


def _check_direct(p: MoEProblem, up, down, tm, gemv, wgmma, direct) -> bool:
    """Whether the plan is direct (plan_moe's `direct`, or direct GEMV tiles given): only for the
    GEMV kind with one token. InputError otherwise."""
    tiles = [s for s in (up, down) if s is not None]
    if direct is None:
        direct = any(getattr(s, "direct", False) for s in tiles)
    if not isinstance(direct, bool):
        raise InputError(f"direct must be True, False or None, got {direct!r}")
    if any(getattr(s, "direct", False) != direct for s in tiles if isinstance(s, MoEGemvSpec)):
        raise InputError("the GEMV tiles of a plan are all direct (direct=True) or none of them")
    if not direct:
        return False
    if p.tokens != 1:
        raise InputError(
            f"direct=True (no alignment launch) needs tokens == 1: a token's k pairs are row blocks "
            f"0..k-1 only when T = 1, got T = {p.tokens}"
        )
    if gemv is False or wgmma is True or tm is not None or any(not isinstance(s, MoEGemvSpec) for s in tiles):
        raise InputError("direct=True is a mode of the GEMV kind: tm, gemv=False, wgmma=True or other tiles refuse it")
    return True


def _check_pdl(profile: DeviceProfile, up, down, gemv, wgmma, tm, pdl) -> bool:
    """Whether the plan is built for programmatic dependent launch (plan_moe's `pdl`, or pdl GEMV
    tiles given): the GEMV kind on sm_90+ only. InputError otherwise."""
    if not isinstance(pdl, bool):
        raise InputError(f"pdl must be True, False or None, got {pdl!r}")
    tiles = [s for s in (up, down) if isinstance(s, MoEGemvSpec)]
    if tiles and any(s.pdl != tiles[0].pdl for s in tiles):
        raise InputError("the GEMV tiles of a plan are all pdl or none of them")
    pdl = pdl or any(s.pdl for s in tiles)
    if not pdl:
        return False
    if profile.cc < PDL_MIN_CC:
        raise InputError(f"pdl=True needs programmatic dependent launch (sm_90+), not {profile.name}")
    if gemv is False or wgmma is True or tm is not None:
        raise InputError("pdl=True is a mode of the GEMV kind: tm, gemv=False or wgmma=True refuse it")
    return True


def gemv_rows16(spec: MoEGemvSpec) -> MoEGemvSpec:
    """The 16-row version of a GEMV tile (two token blocks: an expert's weights streamed once for
    up to 16 routed rows): at most 8 warps, the column blocks a block kept where they can be (16
    warps with K split k ways become 8 with k / 2). By override only (the sweep's "rows" trial)."""
    warps = min(spec.warps, 8)
    return replace(spec, rows=16, warps=warps, kwarps=max(1, spec.kwarps // (spec.warps // warps)))


def _gemv_plan(
    profile: DeviceProfile,
    p: MoEProblem,
    d13: Problem,
    d2: Problem,
    up,
    down,
    tm,
    splits,
    up_splits,
    gemv,
    direct: bool = False,
    pdl: bool = False,
) -> MoEPlan | None:
    """The GEMV plan of `p`, or None for the mma.sync one. GEMV: where an override is a
    MoEGemvSpec (the other stage, if not given, the planner's GEMV tile), where `gemv` is True, or,
    with neither and no `tm`, where an even routing gives each expert at most GEMV_MAX_ROWS rows on
    the sm80 path."""
    kinds = {isinstance(s, MoEGemvSpec) for s in (up, down) if s is not None}
    if len(kinds) > 1:
        raise InputError("a GEMV plan takes MoEGemvSpec tiles for both stages (its row blocks are 8 rows)")
    want = kinds == {True} or gemv is True
    if kinds == {False} or tm is not None or gemv is False:
        if want:
            raise InputError(
                "tm, mma.sync tiles or gemv=False ask for the mma.sync plan; MoEGemvSpec tiles "
                "or gemv=True for the GEMV plan"
            )
        return None
    rows = -(-p.pairs // max(1, min(p.experts, p.pairs)))
    if not want and (profile.path != "sm80" or rows > GEMV_MAX_ROWS):
        return None
    if profile.path != "sm80":
        raise InputError(f"GEMV MoE plans run on the sm80 path (sm_80+), not {profile.name}'s {profile.path}")
    row_blocks = max(min(p.experts, p.pairs), -(-p.pairs // 8))
    up = up or _gemv_spec(profile, d13, "up", p.activation, row_blocks, balance=p.tokens == 1)
    down = down or _gemv_spec(profile, d2, "down", "", row_blocks, balance=p.tokens == 1)
    if up is None or down is None:
        if want:
            raise InputError(f"no GEMV batch size divides K ({p.k13}, {p.k2}) for {p.qtype}")
        return None
    if direct:  # the planner's tiles (T = 1: k row blocks either way), reading their rows directly
        up, down = replace(up, direct=True), replace(down, direct=True)
    if pdl:
        up, down = replace(up, pdl=True), replace(down, pdl=True)
    for spec, dense, stage, activation in ((up, d13, "up", p.activation), (down, d2, "down", "")):
        expect = (profile.path, dense.qtype, dense.act, group_blocks(dense), stage, activation)
        got = (spec.path, spec.qtype, spec.act, spec.group_blocks, spec.stage, spec.activation)
        if got != expect:
            raise InputError(
                f"{spec.name} is not a {stage} kernel of this problem on {profile.name} "
                f"(path, qtype, act, group blocks, stage, activation: {got} != {expect})"
            )
        try:
            spec.check()
        except ValueError as e:
            raise InputError(f"{spec.name}: {e}") from None
        if dense.k % spec.tile_k or spec.smem_bytes() > profile.smem_per_block:
            raise InputError(
                f"{spec.name} needs whole batches of K and at most {profile.smem_per_block} bytes of shared memory"
            )
    for what, n in (("splits", splits), ("up_splits", up_splits)):
        if n not in (None, 1):
            raise InputError(f"{what} must be 1 in a GEMV plan (a block sums the whole of K), got {n!r}")
    if up.rows != down.rows:
        raise InputError(f"both GEMV stages take the aligned list's row blocks: rows {up.rows} != {down.rows}")
    bm = up.rows  # 8, or 16 by override (two token blocks a block)
    route = MoERouteSpec(p.act, bm, profile.path, pdl)  # direct too: its module holds the combine kernel
    route.check()
    return MoEPlan(p, route, up, down, p.pairs if direct else max_blocks(p.pairs, p.experts, bm), 1, 1)


def _wgmma_plan(
    profile: DeviceProfile, p: MoEProblem, d13: Problem, d2: Problem, up, down, tm, splits, up_splits, gemv, wgmma
) -> MoEPlan | None:
    """The wgmma plan of `p` (kernels/moe/wgmma.py), or None for another kind. wgmma: where an
    override is a MoEWgmmaSpec or `wgmma` is True; with no choice made (no wgmma, gemv, tm or
    tiles), where wgmma_default says so (sm_90 only; off until timed)."""
    kinds = {isinstance(s, MoEWgmmaSpec) for s in (up, down) if s is not None}
    if len(kinds) > 1:
        raise InputError("a wgmma plan takes MoEWgmmaSpec tiles for both stages (its row blocks are theirs)")
    want = kinds == {True} or wgmma is True
    if kinds == {False} or wgmma is False or gemv is not None or tm is not None:
        if want:
            raise InputError("tm, gemv, other tiles or wgmma=False ask for another kind than the wgmma plan")
        return None
    if not want and not wgmma_default(profile, p.pairs, p.experts):
        return None
    if not wgmma_available(profile):
        raise InputError(f"wgmma MoE plans run on sm_90 GPUs (H100, H200), not {profile.name} ({profile.arch})")
    tm = (up or down).tm if (up or down) else wgmma_tm(p.pairs, p.experts)
    planned = up is None and down is None
    try:
        up = up or wgmma_stage_spec(profile, d13, tm, "up", p.activation)
        down = down or wgmma_stage_spec(profile, d2, tm, "down", "")
    except ValueError as e:
        raise UnsupportedError(str(e)) from None
    if planned:  # the planner's own tiles take its layouts; given tiles keep theirs
        up, down = sorted_layouts(p.pairs, p.experts, up, down)
    for spec, dense, stage, activation in ((up, d13, "up", p.activation), (down, d2, "down", "")):
        expect = ("sm90", dense.qtype, dense.act, group_blocks(dense), tm, stage, activation)
        got = (spec.path, spec.qtype, spec.act, spec.group_blocks, spec.tm, spec.stage, spec.activation)
        if got != expect:
            raise InputError(
                f"{spec.name} is not a {stage} kernel of this problem on {profile.name} "
                f"(path, qtype, act, group blocks, tm, stage, activation: {got} != {expect})"
            )
        if dense.k % spec.tile_k or not fits(profile, spec):
            raise InputError(
                f"{spec.name} is not buildable, needs whole K steps of 64 or does not fit "
                f"{profile.name}'s shared memory"
            )
    if up_splits not in (None, 1):
        raise InputError(
            f"up_splits must be 1 in a wgmma plan (its fused activation needs whole sums), got {up_splits!r}"
        )
    if up.sorted_h != down.sorted_h:
        raise InputError("sorted_h is a layout of H both stages share: set it on both tiles or neither")
    # K splits of the down stage by override only (not timed yet: the planner keeps 1)
    top = min(p.k2 // down.tile_k, MAX_SPLITS)
    if splits is None:
        splits = 1
    elif isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= top:
        raise InputError(
            f"splits must be 1..{top} in a wgmma plan (at most the down GEMM's {p.k2 // down.tile_k} "
            f"K steps of 64, and {MAX_SPLITS}), got {splits!r}"
        )
    route = MoERouteSpec(p.act, 16 * tm, profile.path)
    route.check()
    return MoEPlan(p, route, up, down, max_blocks(p.pairs, p.experts, 16 * tm), splits, 1)


def _check_override(
    profile: DeviceProfile, spec: MoESpec, dense: Problem, tm: int, stage: str, activation: str
) -> None:
    want = (profile.path, dense.qtype, dense.act, group_blocks(dense), tm, stage, activation)
    got = (spec.path, spec.qtype, spec.act, spec.group_blocks, spec.tm, spec.stage, spec.activation)
    if got != want:
        raise InputError(
            f"{spec.name} is not a {stage} kernel of this problem on {profile.name} "
            f"(path, qtype, act, group blocks, tm, stage, activation: {got} != {want})"
        )
    try:
        spec.check()
    except ValueError as e:
        raise InputError(f"{spec.name}: {e}") from None
    if dense.k % spec.tile_k or spec.smem_bytes() > profile.smem_per_block:
        raise InputError(f"{spec.name} needs whole K tiles and at most {profile.smem_per_block} bytes of shared memory")


def moe_candidates(profile: DeviceProfile, p: MoEProblem, stage: str, tm: int) -> list[MoESpec]:
    """Every buildable tile of one grouped GEMM of `p` with `tm` m16 blocks that fits `profile`
    (the sweep's and autotuner's candidates)."""
    dense = p.dense(stage)
    gb = group_blocks(dense)
    out = []
    top = PATH_MAX_STAGES[profile.path] if profile.path == "sm80" else 2
    for tn in (4, 8, 16):
        for tk in (4, 8, 16):
            for stages in range(2, top + 1):
                spec = MoESpec(
                    profile.path,
                    dense.qtype,
                    p.act,
                    gb,
                    tm,
                    tn,
                    tk,
                    stages,
                    stage,
                    p.activation if stage == "up" else "",
                )
                try:
                    _check_override(profile, spec, dense, tm, stage, spec.activation)
                except InputError:
                    continue
                out.append(spec)
    return out


def down_splits(profile: DeviceProfile, p: MoEProblem, down: MoESpec, block_m: int) -> int:
    """K splits for the down GEMM: where the row blocks an even routing fills times the column
    tiles leave SMs idle (decode: Mixtral's w2 is 2 experts x 32 tiles on 132 SMs), split K so
    that about two blocks an SM stream weights, keeping at least 4 K tiles a split."""
    blocks = max(min(p.experts, p.pairs), -(-p.pairs // block_m)) * -(-p.n2 // down.tile_n)
    k_tiles = p.k2 // down.tile_k
    if blocks >= profile.sms or down.path != "sm80":  # (moe.cu.j2: K_SPLITS)
        return 1
    return max(1, min(-(-2 * profile.sms // blocks), k_tiles // 4, MAX_SPLITS))


def moe_gemv_candidates(profile: DeviceProfile, p: MoEProblem, stage: str, near: MoEGemvSpec) -> list[MoEGemvSpec]:
    """GEMV tiles of one grouped GEMM of `p` around `near` (the planner's): K split over half, as
    many or twice as many warps, blocks of 4, 8 or 16 warps, batches of 2 or 4 k16 rows and
    near's, direct and pdl where near is (the sweep's and autotuner's candidates)."""
    dense = p.dense(stage)
    out = []
    for kw in sorted({max(1, near.kwarps // 2), near.kwarps, min(16, 2 * near.kwarps)}):
        for warps in (4, 8, 16):
            for unroll in sorted({2, 4, near.unroll}):
                spec = MoEGemvSpec(
                    profile.path,
                    dense.qtype,
                    p.act,
                    near.group_blocks,
                    warps,
                    kw,
                    unroll,
                    stage,
                    near.activation,
                    near.direct,
                    pdl=near.pdl,
                )
                try:
                    spec.check()
                except ValueError:
                    continue
                if dense.k % spec.tile_k == 0 and spec.smem_bytes() <= profile.smem_per_block:
                    out.append(spec)
    return out


def stage_candidates(profile: DeviceProfile, p: MoEProblem, plan: MoEPlan, stage: str) -> list:
    """The candidates of one stage of the kind of `plan` (GEMV or mma.sync with plan's tm; wgmma
    and GEMV tiles in the layouts and launch modes of plan's, so that either stage can be swapped
    alone)."""
    spec = plan.up if stage == "up" else plan.down
    if isinstance(spec, MoEWgmmaSpec):
        modes = dict(tile_major=spec.tile_major, sorted_h=spec.sorted_h, sorted_x=spec.sorted_x)
        return [replace(c, **modes) for c in wgmma_candidates(profile, p.dense(stage), spec.tm, stage, p.activation)]
    if isinstance(spec, MoEGemvSpec):
        return moe_gemv_candidates(profile, p, stage, spec)
    return moe_candidates(profile, p, stage, spec.tm)
