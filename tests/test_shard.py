"""QuantizedWeight.shard: tensor-parallel shards (dim=0 column-parallel, dim=1 row-parallel) whose
dequantized values are exactly the slices of the full weight's, for every quant type, group size,
act-order and padded shape; the splits it refuses; the shards run on the CPU emulator and the GPU."""

from dataclasses import replace

import numpy as np
import pytest

import jitmarlin
from jitmarlin import InputError
from jitmarlin.weights import halves
from jitmarlin.weights.qtypes import kernel_dims
from jitmarlin.weights.quant import from_codes

N = 224  # not a multiple of 64 (padded to 256); 112 and 56 per rank
WORLDS = (1, 2, 4)

# (qtype, group_size, in_features, zero points: None / "int" / "float", act-order, scale dtype)
CASES = [
    ("uint4b8", -1, 160, None, False, "float16"),
    ("uint4b8", 16, 160, None, False, "float16"),
    ("uint4b8", 32, 256, None, False, "bfloat16"),
    ("uint4b8", 64, 256, None, False, "float16"),
    ("uint4b8", 128, 512, None, False, "float16"),
    ("uint4b8", 128, 200, None, False, "float16"),  # last group partial: no row split but world 1
    ("uint4", -1, 160, "int", False, "float16"),
    ("uint4", 32, 192, "int", False, "float16"),  # world 4 would cut groups of 32
    ("uint4", 128, 512, "int", False, "bfloat16"),
    ("uint4", -1, 160, "float", False, "float16"),
    ("uint4", 64, 256, "float", False, "float16"),
    ("uint8b128", -1, 160, None, False, "float16"),
    ("uint8b128", 64, 256, None, False, "float16"),
    ("uint8b128", 128, 512, None, False, "bfloat16"),
    ("uint8", -1, 160, "int", False, "float16"),
    ("uint8", 32, 256, "int", False, "float16"),
    ("uint8", 128, 512, "float", False, "float16"),
    ("float8_e4m3fn", -1, 160, None, False, "float16"),
    ("float8_e4m3fn", 32, 256, None, False, "float16"),
    ("float8_e4m3fn", 128, 512, None, False, "bfloat16"),
    ("nvfp4", 16, 160, None, False, "float16"),  # world 4: 40 columns cut groups of 16
    ("nvfp4", 16, 192, None, False, "float16"),
    ("mxfp4", 32, 192, None, False, "bfloat16"),
    ("mxfp4", 32, 256, None, False, "bfloat16"),
    # act-order (g_idx): columns of each group scattered inside one quarter of the inputs
    ("uint4b8", 16, 192, None, True, "float16"),
    ("uint4b8", 32, 256, None, True, "float16"),
    ("uint4b8", 128, 512, None, True, "bfloat16"),
    ("uint4", 64, 256, "int", True, "float16"),
    ("uint4", 32, 256, "float", True, "float16"),
    ("uint8b128", 64, 256, None, True, "float16"),
    ("uint8", 128, 512, "int", True, "float16"),
    ("float8_e4m3fn", 32, 256, None, True, "float16"),
    ("nvfp4", 16, 192, None, True, "float16"),
    ("mxfp4", 32, 256, None, True, "bfloat16"),
]


def _case_id(c):
    qtype, gs, k, zp, ao, sdt = c
    return f"{qtype}-g{gs}-k{k}" + (f"-{zp}zp" if zp else "") + ("-actorder" if ao else "") + f"-{sdt[:2]}"


def block_local_g_idx(k: int, gs: int, blocks: int, rng) -> np.ndarray:
    """An act-order g_idx whose groups each lie inside one of `blocks` equal column blocks, with
    group numbers shuffled across blocks and columns shuffled inside each block."""
    per = k // blocks // gs
    order = rng.permutation(k // gs)
    while order.size > 1 and np.all(order[:-1] < order[1:]):  # in order is no act-order (1 in 24
        order = rng.permutation(k // gs)  # draws with one group a block)
    g_idx = np.empty(k, dtype=np.int64)
    for b in range(blocks):
        cols = np.repeat(order[b * per : (b + 1) * per], gs)
        g_idx[b * (k // blocks) : (b + 1) * (k // blocks)] = rng.permutation(cols)
    return g_idx


def _random_codes(qtype: str, shape, rng) -> np.ndarray:
    bits = jitmarlin.QTYPES[qtype].bits
    c = rng.integers(0, 1 << bits, shape)
    if qtype == "float8_e4m3fn":
        c = np.where((c & 0x7F) == 0x7F, c ^ 0x01, c)  # no NaN codes
    return c


def make_weight(case, rng, g_idx=None):
    qtype, gs, k, zp, ao, sdt = case
    if not ao and zp != "float" and g_idx is None:
        return jitmarlin.quantize(rng.standard_normal((N, k)) * 0.05, qtype, gs, scale_dtype=sdt)
    g = 1 if gs == -1 else k // gs
    if g_idx is None and ao:
        g_idx = block_local_g_idx(k, gs, 4, rng)
    if qtype == "mxfp4":
        scales = 2.0 ** rng.integers(-8, 0, (g, N))
    else:
        scales = rng.random((g, N)) * 0.01 + 0.001
    zeros = None
    if zp == "int":
        zeros = rng.integers(0, 1 << jitmarlin.QTYPES[qtype].bits, (g, N))
    elif zp == "float":
        zeros = rng.random((g, N)) * ((1 << jitmarlin.QTYPES[qtype].bits) - 1)
    qw = from_codes(
        qtype,
        _random_codes(qtype, (N, k), rng),
        scales,
        gs,
        zeros=zeros,
        g_idx=g_idx,
        global_scale=0.37 if qtype == "nvfp4" else 1.0,
        scale_dtype=sdt,
    )
    assert (qw.perm is not None) == (g_idx is not None)
    return qw


def row_split_ok(qw, world: int) -> bool:
    """Whether a row split over `world` keeps whole groups on each rank (recomputed here from the
    checkpoint-order group of each input column, independently of the shard code)."""
    k0, gs = qw.in_features, qw.group_size
    if k0 % world or (k0 // world) % 8:
        return False
    if gs == -1:
        return True
    k1 = k0 // world
    stored_group = np.arange(k0) // gs  # group of each stored (sorted) column
    col = np.arange(k0) if qw.perm is None else qw.perm  # its checkpoint column
    ranks = {}
    for g, c in zip(stored_group, col):
        ranks.setdefault(int(g), set()).add(int(c) // k1)
    return all(len(r) == 1 for r in ranks.values())


def _check_shard(qw, sh, dim, rank, world):
    n1, k1 = (qw.out_features // world, qw.in_features) if dim == 0 else (qw.out_features, qw.in_features // world)
    assert sh.shape == (n1, k1)
    assert (sh.n, sh.k) == kernel_dims(n1, k1, qw.group_size)
    assert (sh.qtype, sh.group_size, sh.scale_dtype, sh.global_scale) == (
        qw.qtype,
        qw.group_size,
        qw.scale_dtype,
        qw.global_scale,
    )
    sh.validate()

    def part(w):
        return w[rank * n1 : (rank + 1) * n1] if dim == 0 else w[:, rank * k1 : (rank + 1) * k1]

    want, got = part(jitmarlin.dequantize(qw)), jitmarlin.dequantize(sh)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got, want), f"dim={dim} rank={rank}/{world}: {int((got != want).sum())} weights differ"
    assert np.array_equal(jitmarlin.dequantize(sh, dtype=np.float64), part(jitmarlin.dequantize(qw, dtype=np.float64)))
    return got


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_shards_dequantize_to_the_slices(case, rng):
    qw = make_weight(case, rng)
    full64 = jitmarlin.dequantize(qw, dtype=np.float64)
    x = rng.standard_normal((5, qw.in_features))
    ref = x @ full64.T
    bound = 1e-9 * float((np.abs(x) @ np.abs(full64).T).max())
    row_splits = 0
    for world in WORLDS:
        if qw.out_features % world == 0 and (qw.out_features // world) % 8 == 0:
            col = [_check_shard(qw, qw.shard(0, r, world), 0, r, world) for r in range(world)]
            assert np.array_equal(np.concatenate(col, axis=0), jitmarlin.dequantize(qw))
        if not row_split_ok(qw, world):
            with pytest.raises(InputError, match="row-parallel"):
                qw.shard(1, world - 1, world)
            continue
        row_splits += world > 1
        k1 = qw.in_features // world
        total = np.zeros_like(ref)
        for r in range(world):
            sh = qw.shard(1, r, world)
            _check_shard(qw, sh, 1, r, world)
            w64 = jitmarlin.dequantize(sh, dtype=np.float64)
            assert np.array_equal(w64, full64[:, r * k1 : (r + 1) * k1])
            total += x[:, r * k1 : (r + 1) * k1] @ w64.T
        assert float(np.abs(total - ref).max()) <= bound
    assert row_splits >= (0 if case[2] == 200 else 1)  # every other case has a real row split


def test_act_order_shards_keep_a_local_permutation(rng):
    case = ("uint4b8", 32, 256, None, True, "float16")
    qw = make_weight(case, rng)
    for world in (2, 4):
        for r in range(world):
            sh = qw.shard(1, r, world)
            assert sh.perm is not None and sorted(sh.perm.tolist()) == list(range(256 // world))
            # the stored columns are not the stored-column slice of the full weight
            k1 = 256 // world
            naive = jitmarlin.dequantize(qw)[:, qw.perm[r * k1 : (r + 1) * k1]]
            assert not np.array_equal(jitmarlin.dequantize(sh), naive)
        assert qw.shard(0, 1, world).perm.tolist() == qw.perm.tolist()


def test_act_order_blocks_for_two_ranks_refuse_four(rng):
    qw = make_weight(("uint4", 64, 256, "int", True, "float16"), rng, g_idx=block_local_g_idx(256, 64, 2, rng))
    assert row_split_ok(qw, 2) and not row_split_ok(qw, 4)
    for r in range(2):
        _check_shard(qw, qw.shard(1, r, 2), 1, r, 2)
    with pytest.raises(InputError, match="act-order group"):
        qw.shard(1, 0, 4)


def test_gptq_act_order_that_cuts_groups_splits_by_columns_only(rng):
    # GPTQ's act-order scatters every group over all the inputs: no row split can keep groups whole
    g_idx = rng.permutation(np.repeat(np.arange(8), 32))
    qw = make_weight(("uint4b8", 32, 256, None, True, "float16"), rng, g_idx=g_idx)
    with pytest.raises(InputError, match=r"act-order group \d+ has columns on ranks .*column-parallel"):
        qw.shard(1, 1, 2)
    for r in range(4):
        _check_shard(qw, qw.shard(0, r, 4), 0, r, 4)


@pytest.mark.parametrize(
    "args,match",
    [
        ((0, 0, 0), "world must be >= 1"),
        ((0, 0, -2), "world must be >= 1"),
        ((0, -1, 2), r"rank must be in \[0, world=2\)"),
        ((1, 2, 2), r"rank must be in \[0, world=2\)"),
        ((2, 0, 2), "dim must be 0"),
        ((-1, 0, 2), "dim must be 0"),
        ((True, 0, 2), "dim must be an int"),
        ((0, 0, 2.0), "world must be an int"),
        ((0, "0", 2), "rank must be an int"),
        ((0, 0, 3), "out_features=224 does not divide over world=3"),
        ((0, 0, 8), "gives 28 per rank: .*multiples of 8"),
        ((1, 0, 5), "in_features=256 does not divide over world=5"),
        ((1, 0, 64), "gives 4 per rank: .*multiples of 8"),
        ((1, 0, 8), r"in_features per rank \(32\) must be a multiple of group_size \(64\)"),
    ],
)
def test_refusals(args, match, rng):
    qw = jitmarlin.quantize(rng.standard_normal((N, 256)), "uint4b8", 64)
    with pytest.raises(InputError, match=match):
        qw.shard(*args)


def test_per_channel_row_shards_keep_every_scale(rng):
    qw = jitmarlin.quantize(rng.standard_normal((N, 256)), "uint4b8", -1)
    for r in range(4):
        sh = qw.shard(1, r, 4)
        assert np.array_equal(sh.scales[:N], qw.scales[:N])


def test_a_field_broken_after_construction_is_refused(rng):
    qw = jitmarlin.quantize(rng.standard_normal((N, 256)), "uint4b8", 64)
    qw.scales = qw.scales[:2]  # a field broken after construction
    with pytest.raises(InputError, match="scales must have shape"):
        qw.shard(0, 0, 2)


# ---- the CPU warp emulator: row-parallel shard outputs (fp16) summed ------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_concat_stacks_outputs_exactly(case, rng):
    """QuantizedWeight.concat (fused q/k/v, gate/up): the column shards put back together are the
    weight bit for bit, and unequal parts (a whole weight, then half of one) stack their outputs."""
    qw = make_weight(case, rng)
    full = jitmarlin.dequantize(qw, dtype=np.float64)
    back = jitmarlin.QuantizedWeight.concat([qw.shard(0, r, 4) for r in range(4)])
    assert back.shape == qw.shape and (back.n, back.k) == (qw.n, qw.k)
    assert np.array_equal(jitmarlin.dequantize(back, dtype=np.float64), full)
    fused = jitmarlin.QuantizedWeight.concat([qw, qw.shard(0, 1, 2)])
    assert fused.shape == (N + N // 2, qw.in_features)
    assert (fused.n, fused.k) == kernel_dims(N + N // 2, qw.in_features, qw.group_size)
    want = np.concatenate([full, full[N // 2 :]])
    assert np.array_equal(jitmarlin.dequantize(fused, dtype=np.float64), want)


def test_concat_refuses_what_one_gemm_cannot_hold(rng):
    a = make_weight(("uint4b8", 128, 512, None, False, "float16"), rng)
    with pytest.raises(InputError, match="qtype"):
        jitmarlin.QuantizedWeight.concat([a, make_weight(("uint8b128", 128, 512, None, False, "float16"), rng)])
    with pytest.raises(InputError, match="in_features"):
        jitmarlin.QuantizedWeight.concat([a, make_weight(("uint4b8", 128, 256, None, False, "float16"), rng)])
    with pytest.raises(InputError, match="scale_dtype"):
        jitmarlin.QuantizedWeight.concat([a, make_weight(("uint4b8", 128, 512, None, False, "bfloat16"), rng)])
    with pytest.raises(InputError, match="act-order"):
        ao = ("uint4b8", 128, 512, None, True, "float16")
        jitmarlin.QuantizedWeight.concat([make_weight(ao, rng), make_weight(ao, rng)])
    nv = make_weight(("nvfp4", 16, 192, None, False, "float16"), rng)
    with pytest.raises(InputError, match="global_scale"):
        jitmarlin.QuantizedWeight.concat([nv, replace(nv, global_scale=0.5)])
    with pytest.raises(InputError, match="no weights"):
        jitmarlin.QuantizedWeight.concat([])


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", [("uint4b8", 64, 256, None, True, "float16"), ("uint4", -1, 160, "float", False, "float16")], ids=_case_id
)
def test_row_parallel_shards_sum_on_emulator(case, rng):
    from jitmarlin import emu
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.planner import plan
    from jitmarlin.kernels.problem import Problem
    from jitmarlin.reference import check_output, linear_reference

    qw = make_weight(case, rng)
    act, world, m = "float16", 2, (5 if case[1] == -1 else 24)  # the gemv and the mma kernels
    prof = replace(get_profile("h100" if m < 16 else "a100"), sms=3)  # gemv / mma.sync (fast on the emulator)
    x = halves.round_to(rng.standard_normal((m, qw.in_features)).astype(np.float32), act)
    k1 = qw.in_features // world
    total, spec = np.zeros((m, qw.out_features)), None
    for r in range(world):
        sh = qw.shard(1, r, world)
        pl = plan(prof, Problem(m, sh.n, sh.k, act, sh.qtype, sh.group_size))
        out = emu.run_values(pl, x[:, r * k1 : (r + 1) * k1], sh, seed=int(rng.integers(1, 1 << 30)))
        assert out.shape == (m, qw.out_features)
        total += out.astype(np.float64)
        spec = spec or pl.spec
    check_output(total, linear_reference(x, qw), act, spec=spec, what=f"{world} row shards")


# ---- one GPU: row-parallel outputs summed, column-parallel outputs concatenated -------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    [
        ("uint4b8", 128, 1024, None, False, "float16"),
        ("uint4", 64, 512, "int", True, "float16"),
        ("nvfp4", 16, 192, None, False, "float16"),
    ],
    ids=_case_id,
)
def test_shards_on_gpu(case, rng):
    import cupy as cp

    from jitmarlin.reference import check_output, linear_reference

    qw = make_weight(case, rng)
    world, m = 2, 7
    x = cp.asarray(rng.standard_normal((m, qw.in_features)), dtype=cp.float16)
    ref = linear_reference(cp.asnumpy(x), qw)
    k1 = qw.in_features // world
    total = cp.zeros((m, qw.out_features), dtype=cp.float64)
    for r in range(world):
        y = jitmarlin.linear(cp.ascontiguousarray(x[:, r * k1 : (r + 1) * k1]), qw.shard(1, r, world))
        assert y.shape == (m, qw.out_features) and y.dtype == cp.float16
        total += y.astype(cp.float64)
    check_output(total, ref, "float16", what="row-parallel sum", family="shard-row")
    cols = [jitmarlin.linear(x, qw.shard(0, r, world)) for r in range(world)]
    check_output(cp.concatenate(cols, axis=-1), ref, "float16", what="column-parallel concat", family="shard-col")
