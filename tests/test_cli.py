import json

from jitmarlin.cli import main


def test_info(capsys):
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["jitmarlin"] and "sm_90" in info["nvrtc_archs"]
    assert info["cache_dir"]


def test_inspect_resources_json(capsys):
    assert main(["inspect", "--arch", "sm_90", "--m", "16", "--n", "4096", "--k", "4096", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("registers", "spill_stores", "spill_loads", "shared_bytes", "local_bytes"):
        assert key in r
    assert r["spill_stores"] == 0 and r["kernel"].startswith("jm_sm80_")


def test_inspect_source_and_ptx(capsys):
    assert main(["inspect", "--profile", "a100", "--m", "1", "--source"]) == 0
    assert "mma_16816" in capsys.readouterr().out
    assert main(["inspect", "--arch", "sm_80", "--m", "1", "--ptx"]) == 0
    assert ".target sm_80" in capsys.readouterr().out


def test_inspect_the_pdl_variant(capsys):
    base = ["inspect", "--arch", "sm_90", "--m", "16", "--n", "4096", "--k", "4096"]
    assert main(base + ["--pdl", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["kernel"].endswith("p") and r["spec"]["pdl"] is True and r["spill_stores"] == 0
    assert main(base + ["--pdl", "--ptx"]) == 0
    assert "griddepcontrol.wait" in capsys.readouterr().out
    assert main(base + ["--ptx"]) == 0
    assert "griddepcontrol" not in capsys.readouterr().out


def test_prewarm_then_cached(capsys, tmp_path):
    args = ["prewarm", "--arch", "sm_80,sm_90", "--shapes", "4096x4096", "--m", "1,16",
            "--cache-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    # sm_80: one Stream-K kernel for M = 1 and 16; sm_90: the gemv kernel for M = 1 and Stream-K
    assert "3 compiled" in out
    assert main(args) == 0
    assert "0 compiled" in capsys.readouterr().out


def test_prewarm_pdl_adds_the_sm90_pdl_builds(capsys, tmp_path):
    args = ["prewarm", "--arch", "sm_80,sm_90", "--shapes", "4096x4096", "--m", "1,16",
            "--cache-dir", str(tmp_path), "--pdl"]
    assert main(args) == 0
    assert "5 compiled" in capsys.readouterr().out   # the 3 of test_prewarm_then_cached, 2 of them again for PDL
    from jitmarlin.cache import KernelCache

    built = sorted((e["arch"], e["name"]) for _, e in KernelCache(tmp_path).entries())
    assert [b for b in built if b[1].endswith("p")] == [(a, n + "p") for a, n in built if a == "sm_90" and not n.endswith("p")]


def test_bad_arguments_are_clear(capsys):
    assert main(["inspect", "--act", "bfloat16", "--profile", "t4"]) == 2
    assert "bfloat16" in capsys.readouterr().err
    # --profile and --arch that disagree were once resolved silently in favour of --profile
    assert main(["inspect", "--arch", "sm_90", "--act", "bfloat16", "--profile", "t4"]) == 2
    assert "--profile t4 is sm_75, not --arch sm_90" in capsys.readouterr().err


def test_inspect_sass_or_clear_hint(capsys, monkeypatch):
    from jitmarlin import nvrtc

    if nvrtc.find_disassembler() is not None:
        assert main(["inspect", "--arch", "sm_90", "--m", "1", "--sass"]) == 0
        assert "HMMA" in capsys.readouterr().out          # the tensor-core instructions are there
    monkeypatch.setattr(nvrtc, "find_disassembler", lambda: None)
    assert main(["inspect", "--arch", "sm_90", "--m", "1", "--sass"]) == 2
    assert "nvidia-cuda-nvdisasm" in capsys.readouterr().err


def test_bench_says_what_it_needs_without_a_gpu(capsys):
    import pytest

    from conftest import HAS_GPU

    if HAS_GPU:
        pytest.skip("a GPU is present: bench runs there (tools/gpu_session.sh)")
    assert main(["bench", "--m", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs" in err and ("GPU" in err or "torch" in err)
