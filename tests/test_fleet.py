"""Fleet prewarm: manifests, TP expansion, planning counts and the `jitmarlin prewarm` CLI (CPU)."""

import json
import re

import pytest

from jitmarlin.errors import InputError
from jitmarlin.jit import nvrtc
from jitmarlin.jit.cache import KernelCache
from jitmarlin.service import fleet
from jitmarlin.service.cli import main

MODELS = {"llama-3-8b", "llama-3-70b", "qwen2.5-7b", "qwen2.5-32b", "qwen2.5-72b", "mistral-7b"}
ARCHS7 = "sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_120"
ROW = re.compile(r"^(sm_\d+|total)\s+(\S*)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+$")


def _shapes(name, tp):
    shapes, skipped = fleet.expand_shapes(fleet.load_manifest(name), [tp])
    assert not skipped
    return {s.label.split()[-1]: (s.k, s.n) for s in shapes}


def _table(out: str) -> dict:
    """arch (or 'total') -> dict of the summary table's counts."""
    rows = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = dict(
                zip(("kernels", "compiled", "cached", "failed", "unsupported"), map(int, m.groups()[2:]))
            )
    return rows


# ---- manifests -----------------------------------------------------------------------------------


def test_shipped_manifests_match_their_model_configs():
    assert MODELS <= set(fleet.list_models())
    for name in MODELS:
        m = fleet.load_manifest(name)
        layers = {layer.name: layer for layer in m.layers}
        h, q, kv = m.hidden_size, m.num_attention_heads, m.num_key_value_heads
        raw = json.loads(fleet._find_manifest(name).read_text())
        assert (layers["qkv_proj"].k, layers["qkv_proj"].n) == (h, (q + 2 * kv) * raw["head_dim"])
        assert (layers["gate_up_proj"].k, layers["gate_up_proj"].n) == (h, 2 * raw["intermediate_size"])
        assert (layers["down_proj"].k, layers["down_proj"].n) == (raw["intermediate_size"], h)
        assert layers["o_proj"].n == h and layers["qkv_proj"].split == "column"
        assert layers["down_proj"].split == "row" and set(m.tp) <= {1, 2, 4, 8}


def test_llama3_8b_tp_expansion():
    tp1, tp2, tp8 = _shapes("llama-3-8b", 1), _shapes("llama-3-8b", 2), _shapes("llama-3-8b", 8)
    assert tp1 == {
        "qkv_proj": (4096, 6144),
        "o_proj": (4096, 4096),
        "gate_up_proj": (4096, 28672),
        "down_proj": (14336, 4096),
    }
    assert tp2["down_proj"] == (7168, 4096) and tp2["qkv_proj"] == (4096, 3072)
    assert tp8 == {
        "qkv_proj": (4096, 768),
        "o_proj": (512, 4096),
        "gate_up_proj": (4096, 3584),
        "down_proj": (1792, 4096),
    }
    shapes, _ = fleet.expand_shapes(fleet.load_manifest("llama-3-8b"))
    assert len(shapes) == 16  # 4 layers x the manifest's TP degrees 1, 2, 4, 8


def test_tp_and_kernel_limits_are_skipped_with_a_reason():
    # 28 attention heads do not split over 8 ranks.
    shapes, skipped = fleet.expand_shapes(fleet.load_manifest("qwen2.5-7b"), [8])
    assert not shapes and len(skipped) == 4 and "28 attention heads" in skipped[0].reason
    # Qwen2.5-72B's intermediate size 29568: K=3696 at TP=8 is not a multiple of 64 and K=14784
    # at TP=2 not one of group 128, but both run: the weight is padded (to K=3712 and 14848) and
    # prewarm plans the padded shape, as linear() does. Only the shape rule itself skips.
    assert fleet.shape_problem(3696, 8192, 128) is None
    assert fleet.shape_problem(14784, 8192, 128) is None
    assert "positive multiples of 8" in fleet.shape_problem(3692, 8192, 128)


def test_manifest_by_path_hf_id_and_clear_errors(tmp_path):
    assert fleet.load_manifest("meta-llama/Meta-Llama-3-8B").name == "llama-3-8b"
    good = {
        "model": "tiny",
        "tp": [1, 2],
        "layers": [{"name": "up", "in_features": 256, "out_features": 512, "split": "column"}],
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(good))
    shapes, _ = fleet.expand_shapes(fleet.load_manifest(path))
    assert [(s.k, s.n) for s in shapes] == [(256, 512), (256, 256)]
    bad = dict(good, layers=[dict(good["layers"][0], split="diagonal")])
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="'column' or 'row'"):
        fleet.load_manifest(path)
    with pytest.raises(InputError, match="llama-3-8b"):  # the message lists the known models
        fleet.load_manifest("no-such-model")


def test_planning_counts_unsupported_not_failed():
    report = fleet.FleetReport()
    jobs = fleet.plan_fleet(
        ["v100", "sm_90"], [(4096, 4096), (4096, 100)], [1, 64], ["float16", "bfloat16"], ["uint4b8"], [128], report
    )
    # v100 has no bf16 tensor cores: its 2 bf16 problems are unsupported; h100 plans all four.
    assert report.count("unsupported", "sm_70") == 2 and report.count("unsupported", "sm_90") == 0
    assert {arch for _, arch in jobs} == {"sm_70", "sm_90"}
    assert all(spec.act == "float16" for spec, arch in jobs if arch == "sm_70")
    assert [(s.k, s.n) for s in report.skipped] == [(4096, 100)]
    with pytest.raises(InputError):
        fleet.plan_fleet(["sm_90"], [(4096, 4096)], [1], ["float32"], ["uint4b8"], [128], report)


def test_api_prewarm_keeps_its_contract(tmp_path):
    import jitmarlin

    cache = KernelCache(tmp_path)
    r = jitmarlin.prewarm(["sm_90"], [(4096, 4096)], [1], cache=cache)
    assert [x.status for x in r] == ["compiled"] and r[0].kernel.startswith("jm_gemv_sm80_")  # decode on H100
    r = jitmarlin.prewarm(["sm_90", "t4"], [(4096, 4096)], [1], act="bfloat16", cache=cache)
    assert [x.status for x in r] == ["compiled", "failed"] and "bfloat16" in r[1].detail


# ---- CLI -----------------------------------------------------------------------------------------


def test_cli_list_models_and_argument_errors(capsys):
    assert main(["prewarm", "--list-models"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MODELS)
    assert main(["prewarm", "--arch", "sm_90", "--shapes", "4096x4096", "--tp", "2"]) == 2
    assert "--tp" in capsys.readouterr().err
    assert main(["prewarm", "--arch", "sm_90", "--model", "nope"]) == 2
    assert "unknown model manifest" in capsys.readouterr().err
    assert main(["prewarm", "--arch", "sm_90"]) == 2


def test_cli_reports_an_arch_nvrtc_cannot_build(capsys, tmp_path, monkeypatch):
    # Pretend the NVRTC in use is 13.0, which dropped Volta. Worker processes would not see this
    # monkeypatch, hence --jobs 1.
    archs = tuple(a for a in nvrtc.supported_archs() if a != "sm_70")
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: archs)
    monkeypatch.setattr(nvrtc, "version", lambda: (13, 0))
    args = [
        "prewarm",
        "--arch",
        "sm_70,sm_90",
        "--shapes",
        "4096x4096",
        "--m",
        "1",
        "--jobs",
        "1",
        "--cache-dir",
        str(tmp_path),
    ]
    assert main(args) == 1
    out = capsys.readouterr().out
    rows = _table(out)
    assert rows["sm_70"]["failed"] == rows["sm_70"]["kernels"] == 1
    assert rows["sm_90"]["failed"] == 0 and rows["sm_90"]["compiled"] == 1
    failures = out.split("failed (1 kernels):")[1]
    assert "jm_sm70_" in failures and "cu12" in failures and "sm_70" in failures


@pytest.mark.slow
def test_cli_prewarm_llama3_8b_on_seven_archs(capsys, tmp_path):
    if "sm_70" not in nvrtc.supported_archs():
        pytest.skip("this NVRTC cannot build sm_70 (install the cu12 extra)")
    args = [
        "prewarm",
        "--model",
        "llama-3-8b",
        "--arch",
        ARCHS7,
        "--m",
        "1",
        "--jobs",
        "2",
        "--cache-dir",
        str(tmp_path),
    ]
    assert main(args) == 0
    captured = capsys.readouterr()
    rows = _table(captured.out)
    assert set(rows) == set(ARCHS7.split(",")) | {"total"}
    total = rows.pop("total")
    for key in total:  # the total row is the sum of the arch rows
        assert total[key] == sum(r[key] for r in rows.values())
    for r in rows.values():
        assert r["kernels"] == r["compiled"] >= 1 and r["cached"] == r["failed"] == 0
    assert f"prewarm: {total['compiled']} compiled, 0 already cached" in captured.out
    assert "kernels done" in captured.err  # stderr is no TTY here: only the final line
    assert "\r" not in captured.err

    assert main(args) == 0
    again = _table(capsys.readouterr().out)["total"]
    assert again["compiled"] == 0 and again["cached"] == total["kernels"]


def test_nvfp4_prewarms_with_its_own_group(tmp_path):
    # group 16 (nvfp4's) was refused as a typo, so nvfp4 kernels could not be prewarmed at all
    report = fleet.prewarm_fleet(
        ["sm_90"], [(4096, 4096)], [1], qtypes=["nvfp4"], group_sizes=[16], cache=KernelCache(tmp_path)
    )
    assert [r.status for r in report.results] == ["compiled"] and not report.unsupported
