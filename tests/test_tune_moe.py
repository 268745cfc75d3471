"""The MoE autotuner's selection (with a cost model instead of a GPU), its records in the kernel
store (keys, checks, stale or tampered records ignored, bundles), and jitmarlin.moe's use of a
stored choice (kernels.moe.tuned.plan_for)."""

import dataclasses
import json
import math

import pytest

from jitmarlin.jit.bundle import export_bundle, import_bundle
from jitmarlin.jit.cache import KernelCache
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels.moe import MoEProblem, plan_moe
from jitmarlin.kernels.moe import tuned as mt
from jitmarlin.service import tune_moe

PROF = get_profile("h100")
P = MoEProblem(3, 2, 8, 28672, 4096, 4096, 14336, 14336, 4096, "float16", "uint4b8", 128)  # Mixtral, T=3


def cost(plan):
    """A cost model: the GEMV kind (the planner's at T = 4) slower than the mma.sync one, whose
    64-column w13 tiles, 4-stage w2 and 8 K splits are fastest."""
    if plan.gemv:
        return 120.0
    us = 100.0
    us -= 10 * (plan.up.tn == 4)
    us -= 5 * (plan.down.stages == 4 and plan.down.tk == 16)
    us -= 3 * (plan.splits == 8)
    return us


def test_tune_picks_the_best_of_each_and_combines():
    c = tune_moe.tune_moe(PROF, "sm_90", P, cost)
    up, down = c.specs()
    assert c.problem["tokens"] == 4  # the bucket
    assert up.tn == 4 and down.stages == 4 and down.tk == 16 and c.splits == 8
    assert (
        c.improved and c.us == pytest.approx(82.0) and c.default_us == pytest.approx(cost(plan_moe(PROF, mt.bucket(P))))
    )
    assert c.candidates > 20 and c.failed == 0


def test_tune_tries_the_gemv_tiles_when_that_kind_wins():
    """GEMV the faster kind: its tiles are tuned (a w13 batch of 2 k16 rows, a w2 block of 8
    warps), the mma.sync ones are not tried past the other kind's default."""
    base = plan_moe(PROF, mt.bucket(P))
    assert base.gemv

    def gcost(plan):
        if not plan.gemv:
            return 200.0
        return 100.0 - 10 * (plan.up.unroll == 2) - 4 * (plan.down.warps == 8 and plan.down.warps != base.down.warps)

    c = tune_moe.tune_moe(PROF, "sm_90", P, gcost)
    up, down = c.specs()
    assert type(up).__name__ == "MoEGemvSpec" and up.unroll == 2 and down.warps == 8
    assert c.improved and c.us == pytest.approx(86.0) and c.splits == 1 and c.failed == 0
    plan = plan_moe(PROF, mt.bucket(P), up=up, down=down)
    assert plan.gemv and gcost(plan) == pytest.approx(86.0)


def test_tune_keeps_the_planner_within_the_margin_and_counts_failures():
    base = plan_moe(PROF, mt.bucket(P))

    def flaky(plan):
        if getattr(plan.up, "tn", 0) == 16 or getattr(plan.up, "warps", 0) == 4:
            raise RuntimeError("does not build")
        return 100.0 if plan == base else 99.5  # 0.5% better: within the 2% margin

    c = tune_moe.tune_moe(PROF, "sm_90", P, flaky)
    assert not c.improved and c.failed > 0
    with pytest.raises(RuntimeError, match="did not run"):
        tune_moe.tune_moe(PROF, "sm_90", P, lambda plan: math.inf)


def test_stored_choice_drives_the_plan_and_bad_records_are_ignored(tmp_path, caplog):
    cache = KernelCache(tmp_path / "c")
    c = tune_moe.tune_moe(PROF, "sm_90", P, cost)
    assert tune_moe.store(cache, c)
    fresh = KernelCache(tmp_path / "c")
    got = mt.lookup(fresh, PROF.name, "sm_90", P)
    assert got == c
    for t in (3, 4):  # the same bucket
        plan = mt.plan_for(PROF, "sm_90", dataclasses.replace(P, tokens=t), fresh)
        assert plan.up.tn == 4 and plan.splits == 8
    other = mt.plan_for(PROF, "sm_90", dataclasses.replace(P, tokens=64), fresh)  # no choice stored
    assert other == plan_moe(PROF, dataclasses.replace(P, tokens=64))
    # a tampered record (another problem's key) and a malformed one are ignored with a warning
    key = mt.moe_key(PROF.name, "sm_90", mt.bucket(P))
    bad = dict(c.to_dict(), splits=0)
    fresh.put_record(key, bad)
    assert mt.lookup(fresh, PROF.name, "sm_90", P) is None and "bad" in caplog.text
    fresh.put_record(key, dict(c.to_dict(), problem=dict(c.problem, experts=16)))
    assert mt.plan_for(PROF, "sm_90", P, fresh) == plan_moe(PROF, P)
    assert mt.record_problem(key, {"format": 1}) is not None
    assert mt.record_problem(key, dict(c.to_dict(), up="{}")) is not None


def test_stale_versions_do_not_match():
    c = tune_moe.tune_moe(PROF, "sm_90", P, cost)
    assert mt.moe_key(c.gpu, c.arch, c.moe_problem(), "0.0.0") != c.key
    d = dict(c.to_dict(), jitmarlin="0.0.0")
    assert mt.record_problem(c.key, d) == "key does not match the record's GPU/arch/problem/version"


def test_bundles_carry_moe_choices(tmp_path):
    src = KernelCache(tmp_path / "src")
    c = tune_moe.tune_moe(PROF, "sm_90", P, cost)
    tune_moe.store(src, c)
    bundle = tmp_path / "b.tar"
    r = export_bundle(src, bundle)
    assert r["tuned_moe"] == 1
    import tarfile

    with tarfile.open(bundle) as tar:
        assert json.loads(tar.extractfile("tuned_moe.json").read())["choices"][c.key] == c.to_dict()
    dst = KernelCache(tmp_path / "dst")
    rep = import_bundle(dst, bundle)
    assert rep.records_imported["tuned_moe"] == 1 and not rep.rejected
    assert mt.lookup(KernelCache(tmp_path / "dst"), PROF.name, "sm_90", P) == c


def test_cli_tune_moe_needs_a_moe_model_and_a_gpu(capsys):
    from jitmarlin.service.cli import main

    assert main(["tune", "--moe", "--m", "1"]) == 2
    assert "--model" in capsys.readouterr().err
    from jitmarlin.service.cli import _gpus

    if _gpus():
        pytest.skip("a GPU is visible: the no-GPU refusal cannot be checked (tuning a model takes minutes)")
    assert main(["tune", "--moe", "--model", "qwen3-30b-a3b", "--m", "1"]) == 1
    assert "no GPU" in capsys.readouterr().err
    assert main(["tune", "--moe", "--model", "llama-3-8b", "--m", "1"]) == 1  # (the GPU check comes first)


@pytest.mark.gpu
def test_tune_on_gpu_stores_a_choice_moe_uses(tmp_path):
    """A small MoE problem tuned on the GPU: the record is stored, sound, and the plan jitmarlin.moe
    would take for that bucket is the record's."""
    pytest.importorskip("torch")
    from jitmarlin.jit.profiles import live_profile, planning_profile

    prof, arch = planning_profile(0), live_profile(0).arch
    p = MoEProblem(4, 2, 8, 512, 256, 256, 256, 256, 256, "float16", "uint4b8", 128)
    cache = KernelCache(tmp_path / "c")
    c = tune_moe.tune_on_gpu(prof, arch, p, cache)
    assert c.us > 0 and c.default_us > 0 and c.failed < c.candidates
    assert mt.record_problem(c.key, cache.get_record(c.key)) is None
    plan = mt.plan_for(prof, arch, p, cache)
    up, down = c.specs()
    assert (plan.up, plan.down) == ((up, down) if c.improved else (plan_moe(prof, p).up, plan_moe(prof, p).down))


def test_mixed_quant_types_have_their_own_key():
    mixed = dataclasses.replace(P, qtype2="uint8b128", group2=32)
    assert mt.moe_key("G", "sm_90", mixed) != mt.moe_key("G", "sm_90", P)
    assert "uint4b8+uint8b128" in mt.moe_key("G", "sm_90", mixed)
    c = tune_moe.tune_moe(PROF, "sm_90", mixed, cost)
    assert c.moe_problem() == mt.bucket(mixed) and mt.record_problem(c.key, c.to_dict()) is None
    assert c.specs()[1].qtype == "uint8b128"
