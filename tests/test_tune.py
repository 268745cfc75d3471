"""The autotuner: buckets, keys, selection with a fake clock, persistence, staleness, bundles,
the api hook and the CLI (CPU); tuning on the GPU and linear() with the result (marked gpu)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import numpy as np
import pytest

from jitmarlin.errors import InputError, TuneError
from jitmarlin.jit.bundle import export_bundle, import_bundle
from jitmarlin.jit.cache import KernelCache
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels import planner, tuned
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import KernelSpec, spec_from_canonical, spec_kind
from jitmarlin.ops import linear as api
from jitmarlin.service import autotune, tune
from jitmarlin.service.cli import main

ROOT = Path(__file__).resolve().parents[1]
H100 = get_profile("h100")
GPU = "NVIDIA H100 80GB HBM3"
P16 = Problem(16, 4096, 4096, "float16", "uint4b8", 128)


def _gpu_profile():
    """h100's limits under the driver's GPU name (what planning_profile gives on that GPU)."""
    return dataclasses.replace(H100, name=GPU)


def _choice(p=P16, *, better=True, profile=None, **kw) -> tune.TunedChoice:
    """A TunedChoice as tune() would make it: the default, or the first other candidate."""
    profile = profile or _gpu_profile()
    bp = tune.bucket_problem(p)
    default = planner.plan(profile, bp).spec
    other = next(c for c in planner.candidate_specs(profile, bp) if c != default)
    win = other if better else default
    d = dict(
        gpu=profile.name,
        arch=profile.arch,
        qtype=bp.qtype,
        act=bp.act,
        group_size=bp.group_size,
        n=bp.n,
        k=bp.k,
        m_bucket=bp.m,
        spec=win.canonical(),
        kind=spec_kind(win),
        us=9.0 if better else 10.0,
        default_spec=default.canonical(),
        default_kind=spec_kind(default),
        default_us=10.0,
        candidates=5,
        failed=1,
        jitmarlin=tune.__version__,
        templates=tune.templates_tag(),
        created=1.7e9,
    )
    d.update(kw)
    return tune.TunedChoice(**d)


# ---- pure parts ----------------------------------------------------------------------------------


def test_shape_bucket():
    assert [tune.shape_bucket(m) for m in (1, 2, 3, 4, 5, 16, 17, 33, 64, 65)] == [1, 2, 4, 4, 8, 16, 32, 64, 64, 128]
    assert tune.shape_bucket(8192) == 8192 and tune.shape_bucket(100_000) == 8192
    for bad in (0, -3, 2.0):
        with pytest.raises(ValueError):
            tune.shape_bucket(bad)


def test_key_names_gpu_arch_problem_bucket_and_code_version():
    k = tune.tune_key(GPU, "sm_90", P16)
    assert k.startswith("tune:") and GPU in k and "|sm_90|uint4b8|float16|g128|n4096|k4096|m16|" in k
    assert k.endswith(f"|{tune.__version__}|{tune.templates_tag()}")
    assert tune.tune_key(GPU, "sm_90", dataclasses.replace(P16, m=9)) == k  # same bucket
    for other in (
        dict(m=17),
        dict(n=6144),
        dict(k=8192),
        dict(act="bfloat16"),
        dict(qtype="uint4"),
        dict(group_size=64),
    ):
        assert tune.tune_key(GPU, "sm_90", dataclasses.replace(P16, **other)) != k, other
    assert tune.tune_key("NVIDIA A100", "sm_80", P16) != k
    assert tune.tune_key(GPU, "sm_90", P16, version="0.0.1") != k
    assert tune.tune_key(GPU, "sm_90", P16, templates="0" * 16) != k


def test_spec_from_canonical_is_the_one_reader():
    s = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 16, 4)
    assert spec_kind(s) == "KernelSpec" and spec_from_canonical(s.canonical()) == s
    two = KernelSpec("sm90", "uint4b8", "bfloat16", 8, 4, 16, 4, 4, occupancy=2)
    assert spec_from_canonical(two.canonical()) == two != dataclasses.replace(two, occupancy=1)
    with pytest.raises(ValueError, match="unknown spec kind"):
        spec_from_canonical(s.canonical(), "WgmmaSpec")
    extra = json.dumps(dict(json.loads(s.canonical()), kind="sm90"), sort_keys=True, separators=(",", ":"))
    with pytest.raises(ValueError, match="canonical"):
        spec_from_canonical(extra)  # another kind's text is not read as ours
    with pytest.raises(ValueError):
        spec_from_canonical('{"path":"sm80"}')
    with pytest.raises(ValueError):
        spec_kind(object())


def test_plan_refuses_a_spec_of_another_type():
    s = planner.plan(H100, P16).spec
    with pytest.raises(InputError, match="not a kernel for"):
        planner.plan(H100, dataclasses.replace(P16, qtype="uint4"), s)
    with pytest.raises(InputError, match="not a kernel for"):
        planner.plan(H100, dataclasses.replace(P16, group_size=64), s)


def _fake_clock(times: dict, default_time: float = 50.0):
    """measure(spec) from a table by spec name: a number, or a list of them taken in turn (the
    last repeats); a value that is an exception is raised."""
    calls = []

    def measure(spec):
        calls.append(spec)
        v = times.get(spec.name, default_time)
        if isinstance(v, list):
            v = v.pop(0) if len(v) > 1 else v[0]
        if isinstance(v, Exception):
            raise v
        return v

    return measure, calls


def _cands(n=6):
    bp = tune.bucket_problem(P16)
    default = planner.plan(H100, bp).spec
    others = [c for c in planner.candidate_specs(H100, bp) if c != default][:n]
    return default, others


def test_select_picks_the_fastest():
    default, others = _cands()
    measure, calls = _fake_clock({default.name: 10.0, others[2].name: 7.5, others[4].name: 8.0})
    sel = tune.select(default, others + [default, others[0]], measure)  # duplicates measured once
    assert sel.winner == others[2] and sel.winner_us == 7.5 and sel.default_us == 10.0
    assert calls[0] == default and sel.tried == len(others) + 1 and sel.failures == []
    assert calls[len(others) + 1 :] == [default, others[2]]  # confirmed once more
    assert len(tune.select(default, others, _fake_clock({})[0], confirm=False).timings) == len(others) + 1


def test_select_confirms_the_winner_against_a_cold_first_default():
    default, others = _cands()
    # the default went first while the clocks were low: measured again it is as fast as the rest
    measure, _ = _fake_clock({default.name: [12.0, 9.9], others[3].name: [10.0, 10.4]})
    assert tune.select(default, others, measure, confirm=False).winner == others[3]
    measure, _ = _fake_clock({default.name: [12.0, 9.9], others[3].name: [10.0, 10.4]})
    sel = tune.select(default, others, measure)
    assert sel.winner == default and sel.default_us == sel.winner_us == 9.9
    measure, _ = _fake_clock({default.name: [12.0, 10.0], others[3].name: [9.0, 9.5]})
    sel = tune.select(default, others, measure)  # a real win stays one
    assert sel.winner == others[3] and (sel.winner_us, sel.default_us) == (9.0, 10.0)
    measure, _ = _fake_clock({default.name: 10.0, others[3].name: [5.0, RuntimeError("flaky")]})
    sel = tune.select(default, others, measure)  # flaky: not a winner
    assert sel.winner == default and sel.tried == len(others) + 1
    assert [s for s, _ in sel.failures] == [others[3]] and "again" in sel.failures[0][1]


def test_select_keeps_the_default_within_the_margin():
    default, others = _cands()
    measure, _ = _fake_clock({default.name: 10.0, others[1].name: 9.85})  # 1.5% faster: noise
    sel = tune.select(default, others, measure)
    assert sel.winner == default and sel.winner_us == 10.0
    assert tune.select(default, others, measure, margin=0.01).winner == others[1]
    measure, _ = _fake_clock({default.name: 10.0, others[1].name: 9.7})  # 3% faster: wins
    assert tune.select(default, others, measure).winner == others[1]


def test_select_skips_failing_candidates_and_says_why():
    default, others = _cands()
    measure, _ = _fake_clock(
        {
            default.name: 10.0,
            others[0].name: RuntimeError("illegal address"),
            others[1].name: 1.0,
            others[2].name: float("nan"),
            others[3].name: 0.0,
            others[4].name: 9.0,
        }
    )
    known = [(others[5], "CompileError: ptxas ran out of registers")]
    sel = tune.select(default, others, measure, failures=known)
    assert sel.winner == others[1]
    why = {s: r for s, r in sel.failures}
    assert set(why) == {others[0], others[2], others[3], others[5]}
    assert "illegal address" in why[others[0]] and "nan" in why[others[2]]
    assert why[others[5]].startswith("CompileError")
    assert sel.tried == len(others) + 1


def test_select_takes_only_a_winner_whose_output_checks_out():
    default, others = _cands()
    checked = []

    def verify(spec, ref):
        checked.append((spec, ref))
        if spec in (others[2], others[4]):
            raise TuneError(f"{spec.name}'s output differs by 3.1e-01")
        return 1e-4

    measure, _ = _fake_clock(
        {default.name: 10.0, others[2].name: 5.0, others[4].name: 6.0, others[1].name: 8.0, others[3].name: 9.9}
    )
    sel = tune.select(default, others, measure, verify=verify)
    # the two fastest are wrong: rejected in turn, the third fastest wins
    assert checked == [(others[2], default), (others[4], default), (others[1], default)]
    assert sel.winner == others[1] and sel.winner_us == 8.0
    why = dict(sel.failures)
    assert set(why) == {others[2], others[4]} and why[others[2]].startswith("output check failed")
    assert others[2] not in [s for s, _ in sel.timings] and sel.tried == len(others) + 1
    # the next fastest within the margin: the default stays
    checked.clear()
    measure, _ = _fake_clock({default.name: 10.0, others[2].name: 5.0, others[1].name: 9.9})
    sel = tune.select(default, others, measure, verify=verify)
    assert sel.winner == default and checked == [(others[2], default)]
    # no check where the default wins anyway
    checked.clear()
    assert tune.select(default, others, _fake_clock({default.name: 1.0})[0], verify=verify).winner == default
    assert checked == []


def test_select_raises_when_the_default_cannot_be_measured():
    default, others = _cands()
    measure, _ = _fake_clock({default.name: RuntimeError("boom")}, default_time=1.0)
    with pytest.raises(TuneError, match="planner's choice .* could not be measured.*boom"):
        tune.select(default, others, measure)


def test_tune_times_the_bucket_and_records_the_outcome():
    prof = _gpu_profile()
    p = dataclasses.replace(P16, m=9)
    bp = tune.bucket_problem(p)
    cands = planner.candidate_specs(prof, bp)
    default = planner.plan(prof, bp).spec
    fastest = cands[-1] if cands[-1] != default else cands[-2]
    measure, calls = _fake_clock({default.name: 20.0, fastest.name: 5.0}, default_time=30.0)
    compiled = []

    def precompile(specs):
        compiled.extend(specs)
        return {cands[0]: "CompileError: no"} if cands[0] != default else {}

    verified = []
    c = tune.tune(
        prof, "sm_90", p, measure, precompile=precompile, verify=lambda spec, ref: verified.append((spec, ref))
    )
    assert verified == [(fastest, default)]
    assert compiled[0] == default and set(compiled) == set(cands) | {default}
    assert cands[0] not in calls  # compile failures not timed
    assert c.m_bucket == 16 and (c.n, c.k, c.gpu, c.arch) == (4096, 4096, GPU, "sm_90")
    assert c.winner() == fastest and c.default() == default and c.improved
    assert (c.us, c.default_us, c.speedup) == (5.0, 20.0, 4.0)
    assert c.candidates == len(set(cands) | {default})
    assert c.failed == (1 if cands[0] != default else 0)
    assert not c.stale and tune.record_problem(c.key, c.to_dict()) is None


# ---- persistence ---------------------------------------------------------------------------------


def test_tuned_choice_survives_a_new_cache_and_a_new_process(tmp_path):
    c = _choice()
    assert tune.store(KernelCache(tmp_path), c)
    again = tune.lookup(KernelCache(tmp_path), GPU, "sm_90", dataclasses.replace(P16, m=11))
    assert again == c
    assert tune.lookup(KernelCache(tmp_path), GPU, "sm_90", dataclasses.replace(P16, m=17)) is None
    assert tune.lookup(KernelCache(tmp_path), "NVIDIA A100", "sm_80", P16) is None
    code = (
        "from jitmarlin.service import tune; from jitmarlin.jit.cache import KernelCache; "
        "from jitmarlin.kernels.problem import Problem; "
        f"c = tune.lookup(KernelCache({str(tmp_path)!r}), {GPU!r}, 'sm_90', "
        "Problem(16, 4096, 4096, 'float16', 'uint4b8', 128)); print(c.spec, c.us)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [c.spec, "9.0"]


def test_stale_choices_are_ignored(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    tune.store(cache, _choice())
    assert tune.lookup(cache, GPU, "sm_90", P16) is not None
    monkeypatch.setattr(tuned, "templates_tag", lambda: "f" * 16)  # a template changed
    assert tune.lookup(cache, GPU, "sm_90", P16) is None
    assert tune.choose_for(_gpu_profile(), "sm_90", P16, cache, autotune=False) is None
    monkeypatch.undo()
    monkeypatch.setattr(tuned, "__version__", "9.9.9")  # jitmarlin upgraded
    assert tune.lookup(cache, GPU, "sm_90", P16) is None
    (rec,) = cache.records("tune:").values()
    assert tune.TunedChoice.from_dict(rec).stale


def test_bad_records_are_ignored_with_a_warning(tmp_path, caplog):
    cache = KernelCache(tmp_path)
    c = _choice()
    for bad in (
        dict(c.to_dict(), us="fast"),
        dict(c.to_dict(), spec='{"tm":1}'),
        dict(c.to_dict(), n=6144),
        dict(c.to_dict(), format=7),
        "junk",
    ):
        cache.put_record(c.key, bad)
        with caplog.at_level("WARNING", logger="jitmarlin"):
            assert tune.lookup(cache, GPU, "sm_90", P16) is None
        assert "is bad" in caplog.text
        caplog.clear()


def test_tuned_rows_are_not_kernels_and_survive_lru_and_verify(tmp_path):
    cache = KernelCache(tmp_path, max_mb=0)
    spec = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 8, 4)
    key = cache.get(spec, "sm_90")[1]  # one real kernel (NVRTC)
    c = _choice()
    tune.store(cache, c)
    assert cache.keys() == [key] and [k for k, _ in cache.entries()] == [key]
    assert cache.record_keys("tune:") == [c.key] and set(cache.usage()) == {key}
    cache.max_bytes = 1
    assert cache.enforce_cap(keep={key}) == []  # nothing to evict but the kernel
    assert cache.verify() == [] and cache.has_record(c.key)
    st = cache.stats()
    assert st["entries"] == 1 and st["tuned"] == 1
    cache.put_record(c.key, dict(c.to_dict(), k=8192))  # record under the wrong key
    (bad,) = cache.verify(fix=True)
    assert bad[0] == c.key and bad[1] == "tuned choice" and "key does not match" in bad[2]
    assert KernelCache(tmp_path).record_keys("tune:") == []
    tune.store(cache, c)
    assert cache.clear() == 1
    assert KernelCache(tmp_path).record_keys("tune:") == [] and KernelCache(tmp_path).keys() == []
    with pytest.raises(ValueError):
        cache.put_record("not-a-tune-key", c.to_dict())


# ---- bundles -------------------------------------------------------------------------------------


def test_bundles_carry_tuned_choices(tmp_path):
    src = KernelCache(tmp_path / "src")
    a = _choice()
    b = _choice(dataclasses.replace(P16, m=1), better=False)
    c80 = _choice(profile=dataclasses.replace(get_profile("a100"), name="NVIDIA A100"))
    for c in (a, b, c80):
        tune.store(src, c)
    bundle = tmp_path / "b.tar"
    r = export_bundle(src, bundle)
    assert (r["exported"], r["tuned"], r["skipped"]) == (0, 3, [])
    again = tmp_path / "again.tar"
    export_bundle(src, again)
    assert bundle.read_bytes() == again.read_bytes()  # deterministic
    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        assert "tuned.json" in tar.getnames()
    assert sorted(i["key"] for i in manifest["tuned"]) == sorted([a.key, b.key, c80.key])
    assert export_bundle(src, tmp_path / "sm90.tar", archs={"sm_90"})["tuned"] == 2

    dst = KernelCache(tmp_path / "dst")
    rep = import_bundle(dst, bundle)
    assert (rep.records_imported["tuned"], rep.records_present["tuned"], rep.rejected) == (3, 0, [])
    fresh = KernelCache(tmp_path / "dst")
    assert tune.lookup(fresh, GPU, "sm_90", P16) == a
    assert tune.lookup(fresh, GPU, "sm_90", Problem(1, 4096, 4096, "float16", "uint4b8", 128)) == b
    rep = import_bundle(fresh, bundle)
    assert (rep.records_imported["tuned"], rep.records_present["tuned"]) == (0, 3)

    # an unpacked bundle serves tuned choices as a read-only tier
    unpacked = tmp_path / "unpacked"
    with tarfile.open(bundle) as tar:
        tar.extractall(unpacked)
    ro = KernelCache(tmp_path / "w", ro_dir=unpacked)
    assert tune.lookup(ro, GPU, "sm_90", P16) == a and ro.record_keys("tune:") == []


def test_tampered_or_old_bundles(tmp_path, rewrite_bundle):
    src = KernelCache(tmp_path / "src")
    a, b = _choice(), _choice(dataclasses.replace(P16, m=64))
    tune.store(src, a)
    tune.store(src, b)
    bundle = tmp_path / "b.tar"
    export_bundle(src, bundle)

    def alter(files):  # a faster time for `a`, manifest left alone
        d = json.loads(files["tuned.json"])
        d["choices"][a.key]["us"] = 1.0
        files["tuned.json"] = json.dumps(d).encode()

    def rekey(files):  # `a`'s record moved under another key, hashes fixed up
        import hashlib

        d = json.loads(files["tuned.json"])
        m = json.loads(files["manifest.json"])
        fake = a.key.replace("|m16|", "|m32|")
        d["choices"][fake] = d["choices"].pop(a.key)
        for item in m["tuned"]:
            if item["key"] == a.key:
                item["key"] = fake
                item["sha256"] = hashlib.sha256(tune.canonical_json(d["choices"][fake])).hexdigest()
        files["tuned.json"] = json.dumps(d).encode()
        files["manifest.json"] = json.dumps(m).encode()

    def drop_member(files):
        del files["tuned.json"]

    for i, (edit, reason, good) in enumerate(
        [(alter, "altered", 1), (rekey, "key does not match", 1), (drop_member, "missing", 0)]
    ):
        bad = tmp_path / f"bad{i}.tar"
        rewrite_bundle(bundle, bad, edit)
        rep = import_bundle(KernelCache(tmp_path / f"d{i}"), bad)
        assert rep.records_imported["tuned"] == good, reason
        assert rep.rejected and all(reason in why for _, why in rep.rejected), rep.rejected
        if good:
            assert KernelCache(tmp_path / f"d{i}").record_keys("tune:") == [b.key]

    def old(files):  # a bundle from before tuned choices
        del files["tuned.json"]
        m = json.loads(files["manifest.json"])
        del m["tuned"]
        files["manifest.json"] = json.dumps(m).encode()

    rewrite_bundle(bundle, tmp_path / "old.tar", old)
    rep = import_bundle(KernelCache(tmp_path / "o"), tmp_path / "old.tar")
    assert (rep.imported, rep.records_imported["tuned"], rep.rejected) == (0, 0, [])


# ---- the api hook --------------------------------------------------------------------------------


def test_choose_for_uses_an_improving_stored_choice(tmp_path):
    cache, prof = KernelCache(tmp_path), _gpu_profile()
    assert tune.choose_for(prof, "sm_90", P16, cache, autotune=False) is None
    c = _choice()
    tune.store(cache, c)
    for m in (9, 16):  # the whole bucket
        spec = tune.choose_for(prof, "sm_90", dataclasses.replace(P16, m=m), cache, autotune=False)
        assert spec == c.winner() and spec != planner.plan(prof, P16).spec
    assert tune.choose_for(prof, "sm_90", P16, cache, capturing=True) is None  # not compiled
    cache.get(c.winner(), "sm_90")
    assert tune.choose_for(prof, "sm_90", P16, cache, capturing=True) == c.winner()
    tune.store(cache, _choice(better=False))  # the default won: the planner decides, per exact M
    assert tune.choose_for(prof, "sm_90", P16, cache, autotune=False) is None


def test_choose_for_builds_a_wgmma_winner_for_a_short_row_block(tmp_path):
    """A wgmma winner tuned at a bucket's M (a multiple of its tile) serves the bucket's other M
    built for their short last row block (KernelSpec.tail), and unchanged where M is a multiple."""
    cache, prof = KernelCache(tmp_path), _gpu_profile()
    p256 = Problem(256, 8192, 4096, "float16", "uint4b8", 128)
    win = next(
        s
        for s in planner.candidate_specs(prof, p256)
        if s.wgmma and s.tm == 16 and s.cluster == 1 and s != planner.plan(prof, p256).spec
    )
    assert not win.tail
    tune.store(cache, _choice(p256, spec=win.canonical(), kind=spec_kind(win)))
    assert tune.choose_for(prof, "sm_90", p256, cache, autotune=False) == win
    spec = tune.choose_for(prof, "sm_90", dataclasses.replace(p256, m=200), cache, autotune=False)
    assert spec == dataclasses.replace(win, tail=True)


def test_choose_for_refuses_a_choice_that_does_not_fit(tmp_path, caplog):
    cache, prof = KernelCache(tmp_path), _gpu_profile()
    big = KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 16, 8)  # more smem than an H100 has
    tune.store(cache, _choice(spec=big.canonical()))
    with caplog.at_level("WARNING", logger="jitmarlin"):
        assert tune.choose_for(prof, "sm_90", P16, cache, autotune=False) is None
    assert "does not fit" in caplog.text


def test_autotune_on_first_call_tunes_once_and_stores(tmp_path, monkeypatch):
    cache, prof = KernelCache(tmp_path), _gpu_profile()
    seen = []

    def tuner(profile, arch, p):
        seen.append(p)
        return _choice(p)

    assert tune.choose_for(prof, "sm_90", P16, cache, tuner=tuner, autotune=False) is None
    assert tune.choose_for(prof, "sm_90", P16, cache, tuner=tuner, capturing=True, autotune=True) is None
    assert seen == []
    monkeypatch.setenv("JITMARLIN_AUTOTUNE", "1")
    spec = tune.choose_for(prof, "sm_90", dataclasses.replace(P16, m=5), cache, tuner=tuner)
    assert [p.m for p in seen] == [8] and spec == _choice(seen[0]).winner()  # tuned at the bucket
    assert tune.choose_for(prof, "sm_90", dataclasses.replace(P16, m=7), cache, tuner=tuner) == spec
    assert len(seen) == 1  # stored: not tuned again
    assert (
        tune.lookup(KernelCache(tmp_path), GPU, "sm_90", P16.__class__(8, 4096, 4096, "float16", "uint4b8", 128))
        is not None
    )
    with pytest.raises(InputError, match="multiple of 64"):  # bad problems: their own error
        tune.choose_for(prof, "sm_90", dataclasses.replace(P16, n=100), cache, tuner=tuner)


def test_a_failed_autotune_falls_back_and_is_not_retried(tmp_path, caplog, monkeypatch):
    cache, prof = KernelCache(tmp_path), _gpu_profile()
    monkeypatch.setattr(autotune, "_failed", set())
    calls = []

    def tuner(profile, arch, p):
        calls.append(p)
        raise TuneError("no torch")

    with caplog.at_level("WARNING", logger="jitmarlin"):
        assert tune.choose_for(prof, "sm_90", P16, cache, tuner=tuner, autotune=True) is None
        assert tune.choose_for(prof, "sm_90", P16, cache, tuner=tuner, autotune=True) is None
    assert len(calls) == 1 and "autotune of" in caplog.text and "no torch" in caplog.text
    assert cache.record_keys("tune:") == []


def test_prepare_plans_with_the_stored_choice(tmp_path, monkeypatch):
    """api._prepare asks choose_for before planning: with the GPU parts faked, the plan handed to
    the Launcher carries the tuned spec; an explicit spec (the tuner's own path) wins over it."""
    from jitmarlin.jit import launch
    from jitmarlin.kernels import launch as family_launch
    from jitmarlin.weights.quant import QuantizedWeight

    monkeypatch.setenv("JITMARLIN_CACHE_DIR", str(tmp_path))
    prof = _gpu_profile()
    monkeypatch.setattr(api, "planning_profile", lambda d: prof)
    monkeypatch.setattr(api, "live_profile", lambda d: prof)
    monkeypatch.setattr(launch, "is_capturing", lambda s: False)
    monkeypatch.setattr(launch, "get_function", lambda art, key, dev: "func")
    monkeypatch.setattr(family_launch, "workspace", lambda dev, s, slots: "ws")
    monkeypatch.setattr(family_launch, "Launcher", lambda plan, *a, **kw: plan)
    monkeypatch.setattr(
        KernelCache, "get", lambda self, spec, arch, compile_missing=True: (object(), "k" * 64, "memory")
    )
    ptr = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0))
    monkeypatch.setattr(QuantizedWeight, "to_device", lambda self, d, a: (ptr, ptr, None, None))
    qw = QuantizedWeight("uint4b8", 128, 4096, 4096, np.zeros((256, 8192), np.int32), np.zeros((32, 4096), np.uint16))
    default = planner.plan(prof, dataclasses.replace(P16, m=12)).spec
    assert api._prepare(qw, 0, "float16", 12, 0).spec == default
    c = _choice()
    tune.store(KernelCache(tmp_path), c)
    assert api._prepare(qw, 0, "float16", 12, 0).spec == c.winner() != default
    assert api._prepare(qw, 0, "float16", 12, 0, spec=default).spec == default
    other = api._prepare(qw, 0, "float16", 40, 0).spec  # other bucket: the planner's
    assert other == planner.plan(prof, dataclasses.replace(P16, m=40)).spec != c.winner()


# ---- CLI -----------------------------------------------------------------------------------------


def test_cli_tune_without_a_gpu_is_clear(capsys, monkeypatch):
    from jitmarlin.service import cli

    monkeypatch.setattr(cli, "_gpus", lambda: [])
    assert main(["tune", "--shapes", "4096x4096", "--m", "16"]) == 1
    err = capsys.readouterr().err
    assert "no GPU is visible" in err and "prewarm" in err
    assert main(["tune"]) == 2
    assert "--shapes" in capsys.readouterr().err


def test_cli_tune_with_a_faked_gpu(tmp_path, capsys, monkeypatch):
    """The command's own logic with the GPU parts faked: one tuning per M bucket, stored
    choices reused unless --force, unsupported and failed problems reported, exit 1 on failure."""
    import importlib

    from jitmarlin.service import cli, measure

    profiles = importlib.import_module("jitmarlin.jit.profiles")  # (jitmarlin.profiles is the dict)
    prof = _gpu_profile()
    monkeypatch.setattr(cli, "_gpus", lambda: [(0, GPU, "9.0")])
    monkeypatch.setattr(profiles, "planning_profile", lambda d: prof)
    monkeypatch.setattr(profiles, "live_profile", lambda d: prof)
    tuned = []

    def fake_tune(p, device, jobs=None):
        tuned.append(p)
        if p.n == 6144:
            raise TuneError("the default kernel crashed")
        return _choice(p)

    monkeypatch.setattr(measure, "tune_on_gpu", fake_tune)
    d = str(tmp_path / "c")
    monkeypatch.setattr(measure, "_torch", lambda: (_ for _ in ()).throw(TuneError("install torch")))
    assert main(["tune", "--shapes", "4096x4096", "--cache-dir", d]) == 1
    assert "jitmarlin tune: install torch" in capsys.readouterr().err and tuned == []
    monkeypatch.setattr(measure, "_torch", lambda: None)
    args = ["tune", "--shapes", "4096x4096", "--m", "9,16,1", "--cache-dir", d]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert sorted(p.m for p in tuned) == [1, 16]  # 9 and 16 share a bucket
    assert out.count("[tuned,") == 2 and "x1.11" in out and "M<=16" in out
    assert "default jm_sm80_" in out and "winner jm_sm80_" in out
    assert len(KernelCache(d).record_keys("tune:")) == 2
    assert main(args) == 0 and len(tuned) == 2  # stored: not tuned again
    assert capsys.readouterr().out.count("[stored,") == 2
    assert main(args + ["--force", "--json"]) == 0 and len(tuned) == 4
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["status"] for r in rows] == ["tuned", "tuned"] and rows[0]["speedup"] == pytest.approx(1.111, abs=1e-3)
    assert (
        main(["tune", "--shapes", "4096x6144,4096x4096", "--quant", "nvfp4,uint4b8", "--m", "1", "--cache-dir", d]) == 1
    )
    cap = capsys.readouterr()
    assert "unsupported: nvfp4 uses groups of 16" in cap.out
    assert "failed: TuneError: the default kernel crashed" in cap.out and "1 problem(s) failed" in cap.err


def test_cli_cache_lists_exports_and_clears_tuned_choices(tmp_path, capsys, monkeypatch):
    d = str(tmp_path / "c")
    cache = KernelCache(d)
    tune.store(cache, _choice())
    tune.store(cache, _choice(dataclasses.replace(P16, m=1), better=False))
    monkeypatch.setattr(tuned, "templates_tag", lambda: "e" * 16)
    tune.store(cache, _choice(dataclasses.replace(P16, m=64), templates="e" * 16))
    monkeypatch.undo()
    assert main(["cache", "ls", "--cache-dir", d]) == 0
    out = capsys.readouterr().out
    assert "0 entries" in out and "3 tuned choices (1 stale)" in out
    assert f"{GPU} sm_90 uint4b8 float16 g128 N=4096 K=4096 M<=16: jm_sm80_" in out
    assert "M<=1: planner's choice" in out and "x1.11" in out and "stale" in out
    assert main(["cache", "stats", "--cache-dir", d]) == 0
    assert "tuned choices   3" in capsys.readouterr().out
    assert main(["cache", "verify", "--cache-dir", d]) == 0
    assert "0 entries and 3 tuned choices checked, 0 bad" in capsys.readouterr().out
    bundle = str(tmp_path / "b.tar")
    assert main(["cache", "export", bundle, "--cache-dir", d]) == 0
    assert "exported 0 kernels and 3 tuned choices" in capsys.readouterr().out
    assert main(["cache", "import", bundle, "--cache-dir", str(tmp_path / "o")]) == 0
    assert "tuned choices: imported 3, already present 0" in capsys.readouterr().out
    assert main(["cache", "clear", "--cache-dir", d]) == 0
    assert "removed 0 entries and 3 tuned choices" in capsys.readouterr().out
    assert KernelCache(d).record_keys("tune:") == []


def test_random_weights_for_every_quant_type():
    from jitmarlin.service.measure import random_weight, weight_copies

    for q, g in (
        ("uint4b8", 128),
        ("uint4", 64),
        ("uint8b128", -1),
        ("uint8", 128),
        ("float8_e4m3fn", 32),
        ("nvfp4", 16),
        ("mxfp4", 32),
    ):
        p = Problem(16, 128, 256, "bfloat16", q, g)
        w = random_weight(p)
        assert (w.qtype, w.group_size, w.n, w.k, w.scale_dtype) == (q, g, 128, 256, "bfloat16")
        assert (w.offsets is not None) == (q in ("uint4", "uint8"))
        a, b = weight_copies(w, 2)
        assert a.packed is w.packed and a._device is not b._device and a._launchers == {}


def test_precompile_in_worker_processes(tmp_path, monkeypatch):
    """Candidates compile in fresh `python -c` workers into the disk cache (no multiprocessing:
    it would re-import the caller's script); a worker that dies fails its share with a reason."""
    from jitmarlin.jit import nvrtc
    from jitmarlin.service import measure

    specs = [KernelSpec("sm80", "uint4b8", "float16", 8, 1, 8, 16, st) for st in (2, 3, 4)]
    cache = KernelCache(tmp_path / "c")
    cache.get(specs[0], "sm_90")  # one already cached
    assert measure.precompile(specs + [specs[1]], "sm_90", cache, jobs=2) == {}
    fresh = KernelCache(tmp_path / "c")
    assert all(fresh.get(s, "sm_90", compile_missing=False)[2] == "disk" for s in specs)

    monkeypatch.setattr(measure, "_WORKER", "import sys; print('worker broke'); sys.exit(3)")
    other = [KernelSpec("sm80", "uint4b8", "float16", 8, 1, 4, 16, st) for st in (2, 3)]
    failed = measure.precompile(other, "sm_90", cache, jobs=2)
    assert set(failed) == set(other)
    assert all("exited with code 3" in why and "worker broke" in why for why in failed.values())

    def refuse(*a, **k):
        raise AssertionError("compiled in this process")

    monkeypatch.setattr(nvrtc, "compile_source", refuse)  # cached: nothing to compile
    assert measure.precompile(specs, "sm_90", KernelCache(tmp_path / "c"), jobs=2) == {}


# ---- GPU -----------------------------------------------------------------------------------------


def _gpu_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("JITMARLIN_CACHE_DIR", str(tmp_path))  # kernels and choices of its own
    from jitmarlin.jit.profiles import live_profile, planning_profile

    return planning_profile(0), live_profile(0).arch


def _check_linear(qw, m, rng, expected_spec, seed=None):
    import cupy as cp

    import jitmarlin
    from jitmarlin.reference import check_output, linear_reference

    x = cp.asarray(rng.standard_normal((m, qw.in_features)), dtype=cp.float16)
    out = cp.full((m, qw.out_features), cp.nan, dtype=cp.float16)  # poisoned
    y = jitmarlin.linear(x, qw, out=out)
    lz = qw._launchers[(0, "float16", m, cp.cuda.get_current_stream().ptr, False)]
    assert lz.plan.spec == expected_spec
    check_output(y, linear_reference(x, qw, None, "float16"), "float16", what=f"M={m}", seed=seed, spec=expected_spec)


@pytest.mark.gpu
def test_gpu_tune_then_linear_uses_the_choice(tmp_path, monkeypatch, seed, rng):
    """Tune M=16, 4096x4096 on four candidates (kept small: ~20 s with compiles), store it, see it
    from a second cache instance; linear() then runs the tuned kernel (or the planner's, when it
    won) and matches the float64 reference; a stored non-default choice is run and correct too."""
    import time

    import jitmarlin
    from jitmarlin.jit.cache import default_cache
    from jitmarlin.service.measure import tune_on_gpu

    prof, arch = _gpu_setup(tmp_path, monkeypatch)
    default = planner.plan(prof, P16).spec
    pick = [default] + [c for c in planner.candidate_specs(prof, P16) if c != default][:3]
    t0 = time.perf_counter()
    choice = tune_on_gpu(P16, 0, candidates=pick)
    seconds = time.perf_counter() - t0
    print(
        f"\ntuned in {seconds:.1f} s: {tune.describe_spec(choice.spec, choice.kind)} "
        f"{choice.us:.2f} us, default {default.name} {choice.default_us:.2f} us"
    )
    assert (choice.candidates, choice.failed, choice.m_bucket, choice.arch) == (4, 0, 16, arch)
    assert 0 < choice.us <= choice.default_us and choice.winner() in pick
    assert tune.store(default_cache(), choice)
    assert tune.lookup(KernelCache(tmp_path), prof.name, arch, P16) == choice

    w = rng.standard_normal((4096, 4096)).astype(np.float32)
    qw = jitmarlin.quantize(w, "uint4b8", 128)
    _check_linear(qw, 16, rng, choice.winner() if choice.improved else default, seed)

    forced = dataclasses.replace(choice, spec=pick[1].canonical(), us=choice.default_us / 2)
    tune.store(default_cache(), forced)
    qw2 = jitmarlin.quantize(w, "uint4b8", 128)
    _check_linear(qw2, 11, rng, pick[1], seed)  # M=11: same bucket


@pytest.mark.gpu
def test_gpu_autotune_env_tunes_on_first_call(tmp_path, monkeypatch, seed, rng):
    """JITMARLIN_AUTOTUNE=1: the first linear() of a new bucket tunes (three candidates here),
    stores the choice, and runs correctly."""
    import jitmarlin

    prof, arch = _gpu_setup(tmp_path, monkeypatch)
    monkeypatch.setenv("JITMARLIN_AUTOTUNE", "1")
    monkeypatch.setattr(autotune, "_failed", set())
    p = Problem(3, 1024, 2048, "float16", "uint4b8", 128)
    bp = tune.bucket_problem(p)
    default = planner.plan(prof, bp).spec
    few = [default] + [c for c in planner.candidate_specs(prof, bp) if c != default][:2]
    monkeypatch.setattr(planner, "candidate_specs", lambda profile, problem: list(few))
    qw = jitmarlin.quantize(rng.standard_normal((1024, 2048)).astype(np.float32), "uint4b8", 128)
    import cupy as cp

    from jitmarlin.reference import check_output, linear_reference

    x = cp.asarray(rng.standard_normal((3, 2048)), dtype=cp.float16)
    y = jitmarlin.linear(x, qw, out=cp.full((3, 1024), cp.nan, dtype=cp.float16))  # poisoned
    stored = tune.lookup(KernelCache(tmp_path), prof.name, arch, p)
    assert stored is not None and stored.m_bucket == 4 and stored.candidates == 3
    choice_spec = stored.winner() if stored.improved else planner.plan(prof, p).spec
    lz = qw._launchers[(0, "float16", 3, cp.cuda.get_current_stream().ptr, False)]
    assert lz.plan.spec == choice_spec
    check_output(y, linear_reference(x, qw, None, "float16"), "float16", what="M=3", seed=seed, spec=choice_spec)


@pytest.mark.gpu
def test_gpu_tuner_checks_a_winner_against_the_planners_kernel(monkeypatch, seed, rng):
    """GpuMeasure.verify: a real candidate agrees with the planner's kernel (and both match the
    float64 reference element by element); a kernel that leaves the output unwritten, or writes
    zeros, is rejected, and select() then takes the next fastest (here: a broken candidate
    measured as the fastest never becomes the choice)."""
    pytest.importorskip("torch")
    import cupy as cp
    from gpu_cases import check_forced

    import jitmarlin
    from jitmarlin.jit.profiles import planning_profile
    from jitmarlin.service.measure import GpuMeasure

    prof = planning_profile(0)
    for act in planner.PATH_ACTS[prof.path]:  # (JITMARLIN_EMULATE=t4 / v100: fp16 only)
        p = Problem(16, 2048, 4096, act, "uint4b8", 128)
        default = planner.plan(prof, p).spec
        others = [c for c in planner.candidate_specs(prof, p) if c != default][:3]
        m = GpuMeasure(p, 0)
        assert 0 <= m.verify(others[0], default) <= 2e-3 * (5 if act == "bfloat16" else 1)
        qw = jitmarlin.quantize(rng.standard_normal((p.n, p.k)) * 0.05, "uint4b8", 128, scale_dtype=act)
        for spec in (default, others[0]):  # each against the oracle, not only against each other
            check_forced(qw, p.m, act, spec, rng, seed=seed)
        real = api._prepare
        broken = {others[1]: "skip", others[2]: "zeros"}

        def fake(q, dev, a, mm, stream, spec=None):
            lz = real(q, dev, a, mm, stream, spec)
            if spec not in broken:
                return lz

            def run(x, lda, out, bias):
                if broken[spec] == "zeros":
                    cp.cuda.runtime.memsetAsync(out, 0, mm * p.n * 2, stream)

            return run

        monkeypatch.setattr(api, "_prepare", fake)
        with pytest.raises(TuneError, match="unwritten or not finite"):
            m.verify(others[1], default)
        with pytest.raises(TuneError, match="differs from the planner's"):
            m.verify(others[2], default)
        times = {default: 10.0, others[0]: 9.0, others[1]: 1.0, others[2]: 2.0}
        sel = tune.select(default, others, lambda s: times[s], verify=m.verify)
        assert sel.winner == others[0] and {s for s, _ in sel.failures} == {others[1], others[2]}
        monkeypatch.setattr(api, "_prepare", real)


@pytest.mark.gpu
def test_gpu_whole_tile_candidates_match_reference(seed, rng):
    """The whole-tile plans (KernelSpec.whole) the tuner may pick run correctly through the
    launcher: 8B qkv's shape at M = 16 and 5 (96 blocks of one 64-wide tile; on a GPU or
    emulated profile of fewer SMs, one 64-wide tile an SM), a poisoned output."""
    pytest.importorskip("torch")
    from gpu_cases import check_forced

    import jitmarlin
    from jitmarlin.jit.profiles import planning_profile

    # the profile the launcher plans for (an emulated one under JITMARLIN_EMULATE: its path,
    # activation dtypes and shared memory)
    prof = planning_profile(0)
    n = 64 * min(prof.sms, 96)
    w = rng.standard_normal((n, 4096)).astype(np.float32) * 0.05
    for act in planner.PATH_ACTS[prof.path]:
        qw = jitmarlin.quantize(w, "uint4b8", 128, scale_dtype=act)
        p = Problem(16, n, 4096, act, "uint4b8", 128)
        whole = [c for c in planner.candidate_specs(prof, p) if getattr(c, "whole", False)]
        assert whole
        for spec in {*whole[:1], *[c for c in whole if c.tn == 4][-2:]}:
            for m in (16, 5):
                check_forced(qw, m, act, spec, rng, seed=seed)
