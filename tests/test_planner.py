import itertools

import pytest

from jitmarlin import InputError, UnsupportedError
from jitmarlin.planner import plan
from jitmarlin.problem import Problem
from jitmarlin.profiles import PROFILES, get_profile
from jitmarlin.spec import KernelSpec

@pytest.mark.parametrize("prof", list(PROFILES.values()), ids=lambda p: p.name)
def test_every_plan_fits_the_profile(prof):
    """Planner guarantee: for every supported combination and a sweep of shapes the chosen spec
    fits the profile's shared memory, thread and register budgets (256 threads, one block per
    SM: 64K registers is 255 a thread, which ptxas enforces; spills are checked in test_nvrtc)."""
    ms = [1, 2, 15, 16, 17, 48, 64, 65, 256, 1000, 4096, 8192]
    nks = [64, 128, 192, 4160, 6144, 14336, 28672, 57344]
    acts = ["float16", "bfloat16"] if prof.path == "sm80" else ["float16"]
    for m, n, k, g, act in itertools.product(ms, nks, [64, 128, 4096, 14336, 57344], [-1, 32, 64, 128], acts):
        if g > 0 and k % g:
            continue
        p = plan(prof, Problem(m, n, k, act, "uint4b8", g))
        s = p.spec
        wgmma = prof.cc == (9, 0) and m >= 64
        assert s.path == ("sm90" if wgmma else prof.path)
        assert s.smem_bytes() <= prof.smem_per_block
        assert s.threads <= prof.max_threads_per_sm and s.threads * 255 <= prof.regs_per_sm
        assert k % s.tile_k == 0
        assert 1 <= p.grid <= prof.sms
        assert p.grid * p.iters >= p.total_iters > (p.grid - 1) * p.iters   # no idle block
        if not wgmma:
            assert s.tm == min(2 if prof.path == "sm70" else 4, -(-m // 16))   # 4-bit codes
        if prof.path != "sm80":
            assert s.stages == 2


def test_decode_tiles_follow_layer_size():
    h100 = get_profile("h100")
    small = plan(h100, Problem(1, 6144, 4096, "float16", "uint4b8", 128))
    assert (small.spec.tm, small.spec.tn, small.spec.tk, small.spec.stages) == (1, 8, 16, 8)
    assert small.grid >= 120
    big = plan(h100, Problem(16, 57344, 8192, "float16", "uint4b8", 128))
    assert (big.spec.tn, big.spec.tk, big.spec.stages) == (16, 16, 3)
    # the same rule on a 99 KB part keeps the tile and trims the pipeline
    sm120 = plan(get_profile("rtx-pro-6000"), Problem(1, 6144, 4096, "float16", "uint4b8", 128))
    assert (sm120.spec.tn, sm120.spec.tk) == (8, 16) and sm120.spec.stages == 4


def test_n_not_multiple_of_tile_prefers_dividing_tiles():
    p = plan(get_profile("h100"), Problem(16, 4160, 4096, "float16", "uint4b8", 128))
    assert 4160 % p.spec.tile_n == 0


@pytest.mark.parametrize("prof,act,msg", [("t4", "bfloat16", "sm_75"), ("v100", "bfloat16", "sm_70")])
def test_bf16_on_old_gpus_is_clear(prof, act, msg):
    with pytest.raises(UnsupportedError, match=msg):
        plan(get_profile(prof), Problem(16, 4096, 4096, act, "uint4b8", 128))


@pytest.mark.parametrize("kw,msg", [
    (dict(n=96), "multiple of 64"), (dict(k=96), "multiple of 64"), (dict(m=0), ">= 1"),
    (dict(group_size=48), "group_size"), (dict(qtype="nvfp4"), "groups of 16"),
    (dict(k=192, group_size=128), "multiple of group_size"),
])
def test_bad_problems(kw, msg):
    base = dict(m=4, n=256, k=256, act="float16", qtype="uint4b8", group_size=128)
    base.update(kw)
    with pytest.raises((InputError, UnsupportedError), match=msg):
        plan(get_profile("h100"), Problem(**base))


def test_spec_identity():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
    assert KernelSpec.from_canonical(s.canonical()) == s
    assert s.name == "jm_sm80_uint4b8_f16_g128_m1n8k8s4"
    assert hash(s) == hash(KernelSpec.from_canonical(s.canonical()))
    with pytest.raises(ValueError):
        KernelSpec("sm80", "uint4b8", "float16", 8, 5, 8, 8, 4).check()


def test_pre_volta_is_rejected():
    from jitmarlin.profiles import code_path

    with pytest.raises(UnsupportedError, match="older than sm_70"):
        code_path((6, 1))
