"""Fleet prewarm of MoE models: the six shipped MoE manifests, their expert shapes per TP and EP
degree, manifest refusals, and the MoE kernels in a prewarm's plan and cache."""

import json

import pytest

from jitmarlin.errors import InputError
from jitmarlin.kernels.moe import MoESpec, MoEWgmmaSpec
from jitmarlin.kernels.moe.plan import AUTO_PDL
from jitmarlin.service import fleet, fleet_moe
from jitmarlin.service.cli import main

MOE_MODELS = {  # experts, top-k, intermediate, activation
    "mixtral-8x7b": (8, 2, 14336, "silu"),
    "qwen3-30b-a3b": (128, 8, 768, "silu"),
    "qwen3-235b-a22b": (128, 8, 1536, "silu"),
    "deepseek-v2-lite": (64, 6, 1408, "silu"),
    "gpt-oss-20b": (32, 4, 2880, "swigluoai"),
    "gpt-oss-120b": (128, 4, 2880, "swigluoai"),
}


def test_shipped_moe_manifests():
    assert set(MOE_MODELS) <= set(fleet.list_models())
    for name, (e, k, inter, act) in MOE_MODELS.items():
        m = fleet.load_manifest(name)
        assert m.moe == fleet_moe.MoEConfig(e, k, inter, act, (1, 2, 4, 8))
        raw = json.loads(fleet._find_manifest(name).read_text())
        if "head_dim" in raw:
            qkv = next(x for x in m.layers if x.name == "qkv_proj")
            assert qkv.n == (m.num_attention_heads + 2 * m.num_key_value_heads) * raw["head_dim"]
            assert qkv.k == m.hidden_size


def test_moe_shapes_per_tp_and_ep():
    m = fleet.load_manifest("qwen3-30b-a3b")
    shapes, skipped = fleet.expand_shapes(m, [1, 2, 4])
    moe = [s for s in shapes if isinstance(s, fleet_moe.MoEShape)]
    got = {s.label.split(" ", 1)[1]: (s.experts, s.inter) for s in moe}
    assert got == {
        "tp=1 experts": (128, 768),
        "tp=2 experts": (128, 384),
        "tp=4 experts": (128, 192),
        "ep=2 experts": (64, 768),
        "ep=4 experts": (32, 768),
        "ep=8 experts": (16, 768),
    }
    assert all(s.hidden == 2048 and s.topk == 8 for s in moe) and not skipped
    # an EP degree that does not divide the experts, a TP degree that breaks the multiple of 8
    cfg = fleet_moe.MoEConfig(6, 2, 40, "silu", (1, 4))
    shapes, skipped = fleet_moe.expand(cfg, "toy", 64, 2, True)
    assert [s.label for s in shapes] == []
    assert [why for _, why in skipped] == [
        "TP=2 does not split the 40 intermediate features into multiples of 8",
        "EP=4 does not divide the 6 experts",
    ]


@pytest.mark.parametrize(
    "moe,match",
    [
        ([1], "'moe' must be an object"),
        ({"experts": 8, "topk": 2}, "intermediate_size"),
        ({"experts": 8, "topk": 9, "intermediate_size": 64}, "exceeds"),
        ({"experts": 8, "topk": 2, "intermediate_size": 64, "activation": "relu"}, "activation"),
        ({"experts": 8, "topk": 2, "intermediate_size": 64, "ep": [0]}, "moe.ep"),
        ({"experts": True, "topk": 2, "intermediate_size": 64}, "moe.experts"),
        ({"experts": 8, "topk": 2, "intermediate_size": 64, "shared": 1}, "unknown moe field"),
    ],
)
def test_moe_manifest_refusals(moe, match):
    d = {
        "format": 1,
        "model": "toy",
        "hidden_size": 64,
        "layers": [{"name": "o", "in_features": 64, "out_features": 64, "split": "row"}],
        "moe": moe,
    }
    with pytest.raises(InputError, match=match):
        fleet.parse_manifest(d)


def test_moe_needs_hidden_size():
    d = {
        "format": 1,
        "model": "toy",
        "layers": [{"name": "o", "in_features": 64, "out_features": 64, "split": "row"}],
        "moe": {"experts": 8, "topk": 2, "intermediate_size": 64},
    }
    with pytest.raises(InputError, match="hidden_size"):
        fleet.expand_shapes(fleet.parse_manifest(d))


def test_plan_fleet_includes_moe_kernels():
    shapes, _ = fleet.expand_shapes(fleet.load_manifest("gpt-oss-20b"), [1])
    report = fleet.FleetReport()
    jobs = fleet.plan_fleet(["h100", "t4"], shapes, [1, 64], ["float16"], ["mxfp4"], [32], report)
    moe = [s for s, _ in jobs if isinstance(s, (MoESpec, MoEWgmmaSpec))]
    assert {s.stage for s in moe} == {"up", "down"} and {s.activation for s in moe} == {"swigluoai", ""}
    assert {s.path for s in moe} == {"sm90", "sm75"}  # H100: the wgmma kind at prefill sizes
    assert any(type(s).__name__ == "MoERouteSpec" for s, _ in jobs)


@pytest.mark.slow
def test_cli_prewarm_moe_model(capsys, tmp_path):
    rc = main(
        [
            "prewarm",
            "--arch",
            "sm_90",
            "--model",
            "qwen3-30b-a3b",
            "--tp",
            "1",
            "--m",
            "1,64",
            "--jobs",
            "2",
            "--cache-dir",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "0 failed" in out
    capsys.readouterr()
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "jm_moe_wgmma_up_silu_sm90_uint4b8_f16_g128" in listed and "jm_moe_align_f16" in listed
    assert "jm_moe_wgmma_down_sm90_uint4b8_f16_g128" in listed


def test_cli_inspect_moe(capsys):
    rc = main(
        [
            "inspect",
            "--moe",
            "--arch",
            "sm_90",
            "--m",
            "1",
            "--experts",
            "8",
            "--topk",
            "2",
            "--hidden",
            "4096",
            "--inter",
            "14336",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    r = json.loads(out)
    assert [k["stage"] for k in r["kernels"]] == ["route", "up", "down"]
    # decode on sm_90: the GEMV kind (8-row blocks, no K splits), direct at T = 1 (a row block a pair)
    assert r["kind"] == "gemv" and r["down_k_splits"] == 1 and r["max_blocks"] == 2 and r["block_m"] == 8
    # and on sm_90 (where AUTO_PDL) the w2 GEMV and the combine launched with PDL (names end in dp)
    assert r["direct"] is True and r["pdl"] is AUTO_PDL
    assert r["kernels"][2]["kernel"].endswith("dp" if AUTO_PDL else "d")
    assert r["kernels"][1]["kernel"].startswith("jm_moe_gemv_up_silu_sm80_uint4b8")
    assert all(k["spill_stores"] == 0 for k in r["kernels"])
    assert (
        main(
            [
                "inspect",
                "--moe",
                "--profile",
                "t4",
                "--m",
                "64",
                "--experts",
                "32",
                "--topk",
                "4",
                "--hidden",
                "2880",
                "--inter",
                "2880",
                "--quant",
                "mxfp4",
                "--group",
                "32",
                "--activation",
                "swigluoai",
                "--stage",
                "up",
                "--source",
            ]
        )
        == 0
    )
    src = capsys.readouterr().out
    assert "jm_moe_up_swigluoai_sm75_mxfp4_f16_g32" in src and "gated_act" in src
    assert main(["inspect", "--moe", "--arch", "sm_90", "--inter", "12"]) != 0  # not a multiple of 8
    assert "multiple" in capsys.readouterr().err
