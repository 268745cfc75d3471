"""mma.sync GEMM plan rules, and the Stream-K plan geometry the fused families share: how a
spec's tiles are dealt to blocks (Stream-K, whole tiles, half tiles, hybrid plans, clusters),
and the decode refinements of the mma.sync kernel (clusters, whole-tile decode, narrow deep
pipelines, late publishing, TMA weight boxes). plan_spec() makes the Plan of a given spec. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from jitmarlin.errors import InputError, UnsupportedError
from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.gemv.plan import hybrid_fits, spread_clusters
from jitmarlin.kernels.plan_base import (
    PATH_MAX_STAGES,
    Plan,
    _check_spec_matches,
    _deepest_fused,
    _fits,
    _preferences,
    check_problem,
    wgmma_available,
)
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import AnySpec, GemvSpec, KernelSpec

# ---- decode with thread-block clusters (sm_90+) ---------------------------------------------------
# Stream-K splits output tiles over blocks anywhere on the GPU, and their partial sums meet in L2
# (store, fence, count, wait, load): ~2 us a call at decode on H100 (tools/PERF.md entry 22).
# Where whole tiles can be dealt to clusters with (almost) the busiest block's load of the
# Stream-K plan, the blocks that share a tile sit in one cluster and add their sums through
# distributed shared memory instead (reduce/cluster.cuh). A cluster of C blocks takes T whole
# tiles and runs Stream-K over their T x k_tiles steps with C x iters = T x k_tiles, so block b's
# range is still [b iters, (b + 1) iters) and no tile crosses a cluster. 64-wide tiles are left
# out: their small pipeline steps stream weights ~1.35x slower (entry 29).
# Off by default (entry 29, H100): with the same 128-wide tile the cluster reduction beats the
# global one (70B down M = 1: 51.9 vs 57.5 us), but those layers fit clusters only with 128-wide
# tiles, which stream slower than Stream-K's 256-wide ones by more than that (70B down 45.8 us,
# gate_up 90.6 vs 101.7, o 17.5 vs 18.5). The kernels stay buildable for the autotuner and tests.
CLUSTER_DECODE = False
CLUSTER_SIZES = (2, 4, 8)
CLUSTER_MAX_LOAD = 1.03  # a cluster plan's busiest block against Stream-K's, in weight bytes
CLUSTER_MAX_M = 16  # decode (one m16 block)


def cluster_tiles(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> int:
    """Whole tiles each cluster of `spec.cluster` blocks takes: the fewest that spread the tiles
    over the clusters the GPU holds at once (profile.cluster_capacity, else SMs / size) and split
    into `cluster` equal block ranges."""
    c = spec.cluster
    tiles = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n)
    k_tiles = p.k // spec.tile_k
    t = -(-tiles // (profile.cluster_capacity(c) or max(1, profile.sms // c)))
    while (t * k_tiles) % c:
        t += 1
    return t


def _geometry(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> tuple[int, int]:
    """(grid, iters) of the fused kernel `spec` on `p`."""
    if isinstance(spec, GemvSpec):  # a block (a cluster) per spec.col_blocks column blocks, or spread
        if spec.spread == 2:
            return profile.sms, 0
        if spec.spread:
            return spread_clusters(profile, spec.cluster, p.n // 64) * spec.cluster, 0
        return -(-(p.n // 64) // spec.col_blocks) * spec.cluster, 0
    m_chunks = -(-p.m // spec.tile_m)
    n_tiles = -(-p.n // spec.tile_n)
    k_tiles = p.k // spec.tile_k
    total = m_chunks * n_tiles * k_tiles
    if spec.cluster > 1 and not spec.wgmma:
        t = cluster_tiles(profile, p, spec)
        return -(-(m_chunks * n_tiles) // t) * spec.cluster, t * k_tiles // spec.cluster
    if getattr(spec, "whole", False):  # whole tiles a block, as few a block as the GPU allows
        per = -(-(m_chunks * n_tiles) // (profile.sms * spec.occupancy))
        return -(-(m_chunks * n_tiles) // per), per * k_tiles
    # `occupancy` blocks per SM; every block takes an equal run of the striped work list so that
    # all SMs stream weights for the whole kernel. All blocks are resident (the shared memory of
    # `occupancy` blocks fits an SM, launch bounds cap the registers): blocks wait on one another
    # when they share an output tile.
    grid = max(1, min(profile.sms * spec.occupancy, total))
    iters = -(-total // grid)
    whole = _whole_tiles(profile, spec, m_chunks * n_tiles, n_tiles, k_tiles, iters)
    if whole:
        return whole
    halves = _half_tiles(profile, spec, m_chunks * n_tiles, n_tiles, k_tiles, iters)
    if halves and not halves[2]:  # (with whole tiles first it is a hybrid plan: _hybrid)
        return halves[0], halves[1]
    return -(-total // iters), iters


# Whole output tiles a block (no tile split over blocks), for the wgmma kernel, where that costs
# the busiest block at most this many times the K-steps of the Stream-K plan: the tile counts of
# large M are often multiples of 128 (132-SM H100: 128 blocks, 1.03x the steps). No block then
# stores or waits for 128 KB of partial sums, and the blocks run their tiles in step: at any time
# they read the same K-tiles of x and of the weights, which L2 serves to all of them, where
# Stream-K's ranges start at scattered K offsets and read both again and again.
WHOLE_TILES_MAX_LOAD = 1.035


def tiles_in_step(per: int, n_tiles: int) -> bool:
    """Whether blocks of `per` consecutive tiles of the work list (row blocks x n_tiles weight
    columns, row-major) work on the same weight columns at the same time in every row block, so
    that a column's K-tiles come from DRAM once and L2 serves them to all its row blocks: `per`
    divides n_tiles, or n_tiles divides `per`. (70B gate_up at M = 4096: 7168 tiles of 448
    columns dealt 55 a block read the weights again for each of the 16 row blocks; PERF.md 57.)"""
    return n_tiles % per == 0 or per % n_tiles == 0


def _whole_tiles(
    profile: DeviceProfile, spec: KernelSpec, tiles: int, n_tiles: int, k_tiles: int, stream_iters: int
) -> tuple[int, int] | None:
    """(grid, iters) with whole tiles a block, or None where that loads the busiest block more
    than WHOLE_TILES_MAX_LOAD x `stream_iters` (or the kernel is not the wgmma one). Of the tile
    counts a block within that load, the fewest that keep the blocks in step (tiles_in_step),
    else the fewest."""
    if not spec.wgmma or spec.cluster > 1:
        return None
    per = -(-tiles // (profile.sms * spec.occupancy))
    most = int(WHOLE_TILES_MAX_LOAD * stream_iters) // k_tiles
    if per > most:
        return None
    per = next((q for q in range(per, most + 1) if tiles_in_step(q, n_tiles)), per)
    return -(-tiles // per), per * k_tiles


# Half tiles a block for the wgmma kernel: where the tiles cannot be dealt whole, every tile of
# the last wave (or every tile, with no whole wave) goes to two blocks, the first and the second
# half of its K-steps (iters = k_tiles / 2), on a grid of G <= SMs blocks such that the tiles are
# G x (whole + 1/2). Both halves of a tile then start and end together, so one partial-sum
# exchange a split tile is all that is left of the reduction: no block lies inside a tile with
# partners on both sides, no chain of contributors, and the whole tiles run in step. The price is
# the busiest block's extra K-steps over the even Stream-K share (and SMs left idle). H100, fp16,
# us, Stream-K or hybrid plan -> half tiles (tools/PERF.md entry 73, two passes):
#   8B qkv M = 1024 (+2 steps)    83.6, 85.5 -> 79.4, 78.6     8B down M = 256 (+3)  53.4, 53.3 -> 49.7, 50.4
#   70B down M = 256 (+6)        173.1, 173.9 -> 165.4, 172.7   70B qkv M = 1024 (+9) 242.3, 242.5 -> 247.2, 247.2
# so the planner takes them up to HALF_TILES_MAX_EXTRA K-steps over the Stream-K share (and at
# most HALF_TILES_MAX_LOAD x it).
HALF_TILES = True
HALF_TILES_MAX_EXTRA = 6
HALF_TILES_MAX_LOAD = 1.035
HALF_TILES_MIN_FILL = 0.9  # blocks against SMs: below this the idle SMs cost more than the split
HALF_TILES_MIN_TM = 8  # tiles of at least 128 tokens (the ones measured)


def _half_tiles(
    profile: DeviceProfile, spec: KernelSpec, tiles: int, n_tiles: int, k_tiles: int, stream_iters: int
) -> tuple[int, int, int] | None:
    """(grid, iters, whole) of a half-tile plan of `spec` (above), or None: not the wgmma kernel at
    one block an SM on tiles of 128 or 256 tokens, an odd K-tile count, no grid between
    HALF_TILES_MIN_FILL x SMs and SMs that
    makes the tiles a whole number of waves and a half, whole tiles that would not run in step
    (tiles_in_step) or need a kernel without the hybrid loop, or a busiest block over
    `stream_iters` (the Stream-K share) by more than HALF_TILES_MAX_EXTRA steps or
    HALF_TILES_MAX_LOAD x."""
    if not HALF_TILES or not spec.wgmma or spec.occupancy != 1 or spec.tm < HALF_TILES_MIN_TM or k_tiles % 2:
        return None  # (measured on 128- and 256-token tiles only)
    for grid in range(profile.sms, int(HALF_TILES_MIN_FILL * profile.sms) - 1, -1):
        waves, odd = divmod(2 * tiles, grid)
        if odd or waves % 2 == 0:
            continue
        whole = waves // 2
        if whole and not (spec.hybrid_loop and tiles_in_step(whole, n_tiles)):
            continue
        load = whole * k_tiles + k_tiles // 2
        if load - stream_iters > HALF_TILES_MAX_EXTRA or load > HALF_TILES_MAX_LOAD * stream_iters:
            return None  # (smaller grids only load the blocks more)
        return grid, k_tiles // 2, whole
    return None


# A half-tile plan's two blocks of a split tile are 2j and 2j + 1: launched as clusters of two,
# they trade the sums each writes out through distributed shared memory instead of L2
# (KernelSpec.cluster = 2, wgmma.cu.j2). tools/probe/dsmem.py on H100 (66 clusters at once):
# half of a 256 x 128 tile each way in 2.9 us against 5.4 for the whole tile through L2 (store,
# fence, count, wait, load); 1.9 against 3.4 for 128 x 128 (PERF.md entry 73).
HALF_TILES_CLUSTER = True


def is_half_plan(p: Problem, spec: KernelSpec, grid: int, iters: int, whole: int) -> bool:
    """Whether (grid, iters, whole) deals the tiles past the whole ones as two halves each, to the
    blocks 2j and 2j + 1 (whether a half-tile plan or a Stream-K plan that happens to)."""
    tiles = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n)
    k_tiles = p.k // spec.tile_k
    return 2 * iters == k_tiles and 2 * tiles == grid * (2 * whole + 1)


# The wgmma kernel reads a last row block short of its tile in x boxes of just its rows
# (KernelSpec.tail): H100, fp16, us, boxes past x's last row -> within x (tools/PERF.md entry 75):
#   K x N = 4096 x 8192 (128 x 128 tiles)  M = 136 39.1 -> 28.9, 144 37.9 -> 29.2, 168 35.2 -> 28.3
#   4096 x 16384 (256 x 128)               M = 136 60.4 -> 48.4, 144 58.3 -> 51.8, 152 56.7 -> 49.6
# (the probe read real rows past M, which costs power the kernel's zeroed rows do not). Kernels
# for M a multiple of the tile are built without it, so theirs stay what was measured.
TAIL_BOXES = True


def tail_spec(p: Problem, spec: AnySpec) -> AnySpec:
    """`spec` built for p's short last row block (KernelSpec.tail) where it is a wgmma kernel and
    M is not a multiple of its tile, else `spec`."""
    if TAIL_BOXES and getattr(spec, "wgmma", False) and p.m % spec.tile_m and not spec.tail:
        return replace(spec, tail=True)
    return spec


def _half_cluster_spec(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec:
    """`spec` in clusters of two where its plan is a half-tile plan whose clusters the GPU holds
    at once, else `spec`."""
    if (
        not HALF_TILES_CLUSTER
        or not spec.wgmma
        or spec.cluster > 1
        or spec.occupancy != 1
        or spec.tm < HALF_TILES_MIN_TM
        or not profile.cluster_capacity(2)
    ):
        return spec
    pl = plan_spec(profile, p, spec)
    two = replace(spec, cluster=2)
    if (
        is_half_plan(p, spec, pl.grid, pl.iters, pl.whole)
        and pl.grid // 2 <= profile.cluster_capacity(2)
        and _fits(profile, two)
    ):
        return two
    return spec


# Hybrid plans for the wgmma kernel (one block an SM) where the plan would otherwise be Stream-K:
# more than one wave of tiles, too far from a whole number of tiles a block for _whole_tiles.
# Stream-K splits nearly every tile over two blocks whose ranges start at scattered K offsets
# (entry 30: 6-14% slower than whole tiles at M = 1024). A hybrid plan runs the full waves as
# whole tiles on every SM, in step (tiles_in_step), and stripes only the last wave's tiles over
# all blocks: the busiest block gets the same share, and only those tiles have partial sums, at
# the end of the kernel. H100, M = 1024 (PERF.md entry 57): 70B qkv and 8B qkv 0-3% faster.
# Not in place of whole-tile plans on 128 of 132 SMs (their idle SMs cost nothing at the power
# cap and their blocks are in step; hybrid plans were 2-12% slower there), and not up to 256
# rows (8B gate_up, 224 tiles: 3-5% slower).
HYBRID_PLANS = True
HYBRID_MIN_M = 512


def _hybrid(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> tuple[int, int, int] | None:
    """(grid, iters, whole) of the hybrid plan of `spec` on `p`, or None where the planner keeps
    the plain one: a kernel not built for them (KernelSpec.hybrid_loop), fewer than HYBRID_MIN_M
    rows, at most one wave of tiles, whole tiles a block that would not keep the blocks in step,
    or a whole-tile plan (_whole_tiles) at hand."""
    if not (HYBRID_PLANS and getattr(spec, "hybrid_loop", False) and p.m >= HYBRID_MIN_M):
        return None
    n_tiles = -(-p.n // spec.tile_n)
    tiles = -(-p.m // spec.tile_m) * n_tiles
    k_tiles = p.k // spec.tile_k
    whole, rest = divmod(tiles, profile.sms)
    stream = -(-tiles * k_tiles // profile.sms)
    if (
        whole == 0
        or rest == 0
        or not tiles_in_step(whole, n_tiles)
        or _whole_tiles(profile, spec, tiles, n_tiles, k_tiles, stream)
    ):
        return None
    halves = _half_tiles(profile, spec, tiles, n_tiles, k_tiles, stream)
    if halves and halves[2]:
        return halves
    return profile.sms, -(-rest * k_tiles // profile.sms), whole


def _block_bytes(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> int:
    """Weight bytes the busiest block of `spec`'s plan streams."""
    return _geometry(profile, p, spec)[1] * spec.tile_n * spec.tile_k * spec.bits // 8


def _cluster_spec(profile: DeviceProfile, p: Problem, base: KernelSpec) -> KernelSpec | None:
    """The decode kernel with clusters whose busiest block streams at most CLUSTER_MAX_LOAD x
    the weight bytes of `base`'s Stream-K plan (the lightest such; ties in preference order), or
    None."""
    if (
        not CLUSTER_DECODE
        or not profile.clusters
        or profile.cc < (9, 0)
        or base.path != "sm80"
        or base.cluster > 1
        or p.m > CLUSTER_MAX_M
    ):
        return None
    limit = CLUSTER_MAX_LOAD * _block_bytes(profile, p, base)
    best, best_bytes = None, None
    for tn, tk, max_stages in _preferences(profile, p):
        if tn < 8 or p.k % (16 * tk):
            continue
        for c in CLUSTER_SIZES:
            if not profile.cluster_capacity(c):
                continue
            spec = _deepest_fused(profile, p, base.tm, tn, tk, max_stages, cluster=c)
            if spec is None:
                continue
            b = _block_bytes(profile, p, spec)
            if b <= limit and (best_bytes is None or b < best_bytes):
                best, best_bytes = spec, b
    return best


# TMA weight boxes at decode (KernelSpec.bulk): on sm_90 the mma.sync kernel takes a stage's weights
# as one tensor-map box that one thread issues, instead of every thread working out and issuing its
# cp.asyncs (about half of a step's ~150 fetch instructions a warp, all issued between the block
# barrier and the step's first MMA). H200 at M = 16 (tools/PERF.md entry 88, with the raw-code
# kernels' offsets MMAs in four chains): where a stage's weights are at least BULK_MIN_STAGE_BYTES
# (256-wide tiles of K 256, 128-wide of K 512), 2-6% faster on four bench layers and 0-2% on two,
# in both dtypes; the 16 KB stages of 8B o and qkv 2-3% slower. One m16 row block on sm_90 only
# (other GPUs are not measured).
BULK_DECODE = True
BULK_MIN_STAGE_BYTES = 32 * 1024


def bulk_fits(spec: KernelSpec) -> bool:
    """Whether `spec` can take its weights by TMA boxes (KernelSpec.bulk's limits)."""
    return spec.path == "sm80" and spec.cluster == 1 and spec.tm == 1 and spec.tile_n * spec.bits // 4 <= 256


# x by TMA boxes too (KernelSpec.xbox), for bf16 only: H200 at M = 12 and 16, A/B in one process
# (tools/PERF.md entry 93), the six layers with boxed weights 0.5-4% faster in bf16, while fp16's
# were up to 2.6% slower on three of them (70B down, 70B gate_up, 8B gate_up): its shorter step
# gains less from the fetch instructions x's boxes save than it loses waiting on one barrier for x
# and the weights.
XBOX_ACTS = ("bfloat16",)


def xbox_fits(spec: KernelSpec) -> bool:
    """Whether `spec` (with bulk) can take x by TMA boxes too (KernelSpec.xbox's limits)."""
    return spec.bulk and spec.tm == 1 and spec.tk % 4 == 0


def bulk_spec(profile: DeviceProfile, spec: KernelSpec) -> KernelSpec:
    """`spec` with TMA weight boxes (and x's, in bf16) where the rules above take them, else `spec`."""
    if (
        not BULK_DECODE
        or profile.cc != (9, 0)
        or spec.route != "fused"
        or spec.wgmma
        or not bulk_fits(spec)
        or spec.tile_k * spec.tile_n * spec.bits // 8 < BULK_MIN_STAGE_BYTES
    ):
        return spec
    bulk = replace(spec, bulk=True)
    if not _fits(profile, bulk):
        return spec
    xbox = replace(bulk, xbox=True)
    return xbox if spec.act in XBOX_ACTS and xbox_fits(bulk) and _fits(profile, xbox) else bulk


# Narrow, deep tiles at decode: where a Stream-K plan of 256-wide tiles splits each tile over
# NARROW_DEEP_MIN_SHARERS blocks or more (few column tiles, a long K), tiles half as wide and twice
# as deep (128 x 512, NARROW_DEEP_STAGES stages) halve the blocks a tile and the partial sums they
# trade, for the same steps a block. On H100 at M = 12 and 16 (entry 80) that is Llama-3-8B down
# (eight blocks a tile): 3-5% faster in both dtypes; at four sharers or fewer (70B down, o, qkv) it
# was even or up to 4% slower. sm_90 only (other GPUs are not measured).
NARROW_DEEP_DECODE = True
NARROW_DEEP_MIN_SHARERS = 8
NARROW_DEEP_STAGES = 3


def _narrow_deep_decode(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec | None:
    """The 128 x 512 Stream-K tile where the rule above takes it, else None."""
    if (
        not NARROW_DEEP_DECODE
        or profile.cc != (9, 0)
        or spec.path != "sm80"
        or spec.tm != 1
        or spec.tn != 16
        or spec.tk != 16
        or spec.cluster > 1
        or spec.whole
        or p.k % 512
    ):
        return None
    iters = _geometry(profile, p, spec)[1]
    if p.k // spec.tile_k < NARROW_DEEP_MIN_SHARERS * iters:
        return None
    deep = replace(spec, tn=8, tk=32, stages=NARROW_DEEP_STAGES)
    return deep if _fits(profile, deep) and p.n % deep.tile_n == 0 else None


# Late publish (KernelSpec.late) for decode plans of short runs: a block that shares a split tile
# and goes on to another one holds its whole block at a device-scope fence at the switch; with
# `late`, one thread fences after the next step while the warps compute. On H100 at M = 16 (the
# only GPU measured, tools/PERF.md entries 51 and 58) that took 0.2-0.6 us off the plans of 6-10
# steps a block (8B and 70B qkv) and cost 0.3-0.6 us on 8B gate_up's 14, so the planner takes it
# up to LATE_MAX_ITERS steps a block, on sm_90 only (other GPUs are not measured), where some
# block continues past a split tile.
LATE_PUBLISH = True
LATE_MAX_ITERS = 12


def late_contributors(p: Problem, spec: KernelSpec, grid: int, iters: int) -> int:
    """Blocks of a Stream-K plan (`grid` blocks of `iters` K-steps) that share a split tile and go on
    to another tile afterwards: the ones KernelSpec.late changes."""
    k_tiles = p.k // spec.tile_k
    total = -(-p.m // spec.tile_m) * -(-p.n // spec.tile_n) * k_tiles
    count = 0
    for b in range(1, grid):
        first, end = b * iters, min((b + 1) * iters, total)
        # a split tile's contributor that starts inside it and ends past it
        if first < end and first % k_tiles and (first // k_tiles + 1) * k_tiles < end:
            count += 1
    return count


# Whole tiles at decode: where every block of the mma.sync kernel can take one whole output tile
# (no tile split over blocks, so no partial sums meet in L2: ~2 us a call at M = 16, tools/PERF.md
# entry 51) of the planner's width or a narrower one, for at most WHOLE_DECODE_MAX_LOAD x the
# busiest Stream-K block's weight bytes, and the tile is at most WHOLE_DECODE_MAX_STEPS K-steps
# deep, the plan is whole tiles (KernelSpec.whole: the same kernel as that tile's Stream-K plan).
# On H100 at M = 9 and 16 (entry 58): N = 28672 (112 tiles of 256 columns over 132 SMs, 1.14x the
# bytes) K = 2048 10-12% faster, K = 4096 (Llama-3-8B gate_up) 2-5%, but K = 8192 and 14336 mixed
# in fp16 and 2-4% slower in bf16, whose heavier dequantisation misses the idle SMs once streaming
# outweighs the sums; Llama-3-8B qkv on 96 tiles of 64 columns (1.33x the bytes) 2-5% faster
# (entries 51, 53 and 58). sm_90 only (other GPUs are not measured).
WHOLE_DECODE = True
WHOLE_DECODE_MAX_LOAD = 1.35
WHOLE_DECODE_MAX_STEPS = 16
# A whole plan of 64-wide tiles takes K-tiles of 512 (tk 32) in WHOLE_DECODE_TK32_STAGES stages
# where K allows: a 64 x 256 step is too little work for its fixed cost (a block barrier, the
# fetch, a scale run's flush, the pipeline's refill), and halving the steps takes 5-7% off
# Llama-3-8B qkv at M = 12 and 16 in both dtypes (entry 79: 10.2-10.6 -> 9.6-9.9 us). Wider tiles
# with K-tiles of 512 fit 2-4 stages and were slower or even on the other seven layers. Six stages
# (the most that fit 227 KB) take another 2-3.5% off it in both dtypes (entry 80).
WHOLE_DECODE_TK32 = True
WHOLE_DECODE_TK32_STAGES = 6


def _whole_decode(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec | None:
    """A plan of one whole tile a block where the rule above takes it (the planner's tile, else a
    narrower one of the same depth that divides N), else None."""
    if (
        not WHOLE_DECODE
        or profile.cc != (9, 0)
        or spec.path != "sm80"
        or spec.tm != 1
        or spec.cluster > 1
        or spec.whole
    ):
        return None
    k_tiles = p.k // spec.tile_k
    iters = _geometry(profile, p, spec)[1]
    if iters % k_tiles == 0 or k_tiles > WHOLE_DECODE_MAX_STEPS:
        return None  # (Stream-K already deals whole tiles, or the tiles are deep)
    busiest = iters * spec.tile_n  # Stream-K's busiest block, in K-step columns
    for tn in (spec.tn, 8, 4):
        if tn > spec.tn or (tn < spec.tn and p.n % (16 * tn)):
            continue
        cand = spec if tn == spec.tn else _deepest_fused(profile, p, 1, tn, spec.tk, PATH_MAX_STAGES["sm80"])
        if cand is None or -(-p.n // cand.tile_n) > profile.sms:
            continue
        if k_tiles * cand.tile_n <= WHOLE_DECODE_MAX_LOAD * busiest:
            if WHOLE_DECODE_TK32 and cand.tn == 4 and p.k % 512 == 0:
                deep = replace(cand, tk=32, stages=WHOLE_DECODE_TK32_STAGES, whole=True)
                if _fits(profile, deep):
                    return deep
            return replace(cand, whole=True)
    return None


def _late_spec(profile: DeviceProfile, p: Problem, spec: KernelSpec) -> KernelSpec:
    """`spec` with late publishing where the rule above takes it, else `spec`."""
    if (
        not LATE_PUBLISH
        or profile.cc != (9, 0)
        or spec.path != "sm80"
        or spec.tm != 1
        or spec.cluster > 1
        or spec.whole
    ):
        return spec
    grid, iters = _geometry(profile, p, spec)
    if iters > LATE_MAX_ITERS or not late_contributors(p, spec, grid, iters):
        return spec
    return replace(spec, late=True)


def plan_spec(profile: DeviceProfile, p: Problem, spec: AnySpec) -> Plan:
    """The Plan of a given spec (any family) for problem `p` on `profile`: checks that the spec
    can run `p` there (raises InputError / UnsupportedError), then plan_of()."""
    check_problem(profile, p)
    spec.check()
    # (the code path may differ: the CPU emulator runs sm70/sm75 kernels on any profile)
    _check_spec_matches(spec, p)
    if isinstance(spec, GemvSpec):
        if p.m > spec.max_m:
            raise InputError(f"{spec.name} takes at most {spec.max_m} rows of x, got M={p.m}")
        why = hybrid_fits(profile, p, spec.warps, spec.unroll) if spec.spread == 2 else None
        if why:
            raise UnsupportedError(f"{spec.name}: a hybrid plan does not fit {profile.name}: {why}")
        spread = spread_clusters(profile, spec.cluster, p.n // 64)
        if spec.spread == 1 and -(-(p.n // 64) // spread) > spec.threads // 32 * spec.cluster:
            raise UnsupportedError(
                f"{spec.name}: a spread plan takes at most one 64-column block a warp "
                f"of a cluster; N={p.n} on {profile.name} needs more"
            )
        if profile.path != "sm80":
            raise UnsupportedError(f"{spec.name} needs the sm80 path (sm_80+); {profile.name} is {profile.arch}")
    if getattr(spec, "bulk", False) and profile.cc < (9, 0):
        raise UnsupportedError(
            f"{spec.name} takes its weights by TMA (bulk), which needs sm_90 or newer; {profile.name} is {profile.arch}"
        )
    if spec.wgmma and not wgmma_available(profile):
        raise UnsupportedError(f"{spec.name} is a wgmma (sm_90a) kernel; {profile.name} is {profile.arch}")
    if getattr(spec, "cluster", 1) > 1 and profile.cc < (9, 0):
        what = "128-bit atomic exchanges (a pair plan)" if getattr(spec, "pair", False) else "thread-block clusters"
        raise UnsupportedError(f"{spec.name} uses {what}, which need sm_90 or newer; {profile.name} is {profile.arch}")
    if spec.route == "fused":
        if p.k % spec.tile_k:
            raise InputError(f"K={p.k} is not a multiple of the kernel's K tile {spec.tile_k}")
        if not _fits(profile, spec):
            raise UnsupportedError(
                f"{spec.name} needs more shared memory than {profile.name} has "
                f"({spec.occupancy} block(s) of {spec.smem_bytes()} bytes per SM)"
            )
    return plan_of(profile, p, spec)


def plan_of(profile: DeviceProfile, p: Problem, spec: AnySpec) -> Plan:
    """The launch geometry of `spec` on `p` (unchecked): the dequant route's grid, or the fused
    kernels' Stream-K, whole-tile, half-tile or hybrid plan."""
    if spec.route == "dequant":
        return Plan(spec=spec, problem=p, grid=spec.grid(p.n, p.k), iters=1, smem_bytes=0)
    hybrid = _hybrid(profile, p, spec)
    grid, iters, whole = hybrid or (*_geometry(profile, p, spec), 0)
    if (
        spec.wgmma
        and spec.cluster > 1
        and not (is_half_plan(p, spec, grid, iters, whole) and grid // 2 <= profile.cluster_capacity(2))
    ):
        raise UnsupportedError(
            f"{spec.name} runs half-tile plans only (two blocks a split tile, in clusters "
            f"of two); M={p.m} N={p.n} K={p.k} on {profile.name} has none"
        )
    return Plan(spec=spec, problem=p, grid=grid, iters=iters, smem_bytes=spec.smem_bytes(), whole=whole)
