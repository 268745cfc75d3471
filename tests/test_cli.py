import json

from jitmarlin.service.cli import main


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
    args = ["prewarm", "--arch", "sm_80,sm_90", "--shapes", "4096x4096", "--m", "1,16", "--cache-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    # sm_80: one Stream-K kernel for M = 1 and 16; sm_90: the gemv kernel for M = 1 and Stream-K
    assert "3 compiled" in out
    assert main(args) == 0
    assert "0 compiled" in capsys.readouterr().out


def test_prewarm_pdl_adds_the_sm90_pdl_builds(capsys, tmp_path):
    args = [
        "prewarm",
        "--arch",
        "sm_80,sm_90",
        "--shapes",
        "4096x4096",
        "--m",
        "1,16",
        "--cache-dir",
        str(tmp_path),
        "--pdl",
    ]
    assert main(args) == 0
    assert "5 compiled" in capsys.readouterr().out  # the 3 of test_prewarm_then_cached, 2 of them again for PDL
    from jitmarlin.jit.cache import KernelCache

    built = sorted((e["arch"], e["name"]) for _, e in KernelCache(tmp_path).entries())
    assert [b for b in built if b[1].endswith("p")] == [
        (a, n + "p") for a, n in built if a == "sm_90" and not n.endswith("p")
    ]


def test_bad_arguments_are_clear(capsys):
    assert main(["inspect", "--act", "bfloat16", "--profile", "t4"]) == 2
    assert "bfloat16" in capsys.readouterr().err
    # --profile and --arch that disagree were once resolved silently in favour of --profile
    assert main(["inspect", "--arch", "sm_90", "--act", "bfloat16", "--profile", "t4"]) == 2
    assert "--profile t4 is sm_75, not --arch sm_90" in capsys.readouterr().err


def test_inspect_sass_or_clear_hint(capsys, monkeypatch):
    from jitmarlin.jit import nvrtc

    if nvrtc.find_disassembler() is not None:
        assert main(["inspect", "--arch", "sm_90", "--m", "1", "--sass"]) == 0
        assert "HMMA" in capsys.readouterr().out  # the tensor-core instructions are there
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


# ---- the CLI tells the truth (issue #57): exit codes and messages, as a user's shell sees them ----

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402


def _run(args, tmp_path, env=None, **kw):
    """`python -m jitmarlin ARGS` with its cache in tmp_path: CompletedProcess (text)."""
    e = dict(os.environ, JITMARLIN_CACHE_DIR=str(tmp_path / "cache"))
    e.pop("JITMARLIN_LOG", None)
    e.update(env or {})
    e = {k: v for k, v in e.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-m", "jitmarlin", *args], capture_output=True, text=True, env=e, timeout=300, **kw
    )


def test_prewarm_fails_when_nothing_can_be_saved(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ["prewarm", "--arch", "sm_90", "--shapes", "4096x4096", "--m", "1"]
    r = _run(args + ["--cache-dir", str(blocker / "cache")], tmp_path)  # below a file
    assert r.returncode == 1 and "cannot save any kernel" in r.stderr and "Traceback" not in r.stderr
    r = _run(
        args, tmp_path, env={"JITMARLIN_CACHE_DIR": None, "XDG_CACHE_HOME": None, "HOME": str(blocker / "home")}
    )  # an unusable HOME
    assert r.returncode == 1 and "cannot save any kernel" in r.stderr


def test_prewarm_fails_when_every_problem_is_skipped_or_unsupported(tmp_path):
    r = _run(["prewarm", "--arch", "sm_90", "--shapes", "100x4096", "--m", "1"], tmp_path)
    assert r.returncode == 1 and "compiled nothing" in r.stderr and "multiples of 8" in r.stdout
    r = _run(["prewarm", "--arch", "sm_70", "--shapes", "4096x4096", "--m", "1", "--act", "bfloat16"], tmp_path)
    assert r.returncode == 1 and "compiled nothing" in r.stderr and "bfloat16" in r.stdout


@pytest.mark.parametrize(
    "args,msg",
    [
        (["prewarm", "--arch", "sm_90", "--shapes", "0x0"], "positive integers"),
        (["prewarm", "--arch", "sm_90", "--shapes", "4096x-64"], "positive integers"),
        (["prewarm", "--arch", "sm_90", "--shapes", "4096x4096", "--jobs", "-1"], "--jobs: must be an integer >= 1"),
        (["prewarm", "--arch", "sm_90", "--shapes", "4096x4096", "--jobs", "two"], "--jobs: must be an integer"),
        (["prewarm", "--arch", "sm_90", "--shapes", "4096x4096", "--m", "0"], "M buckets must be integers >= 1"),
        (["prewarm", "--arch", "sm_99", "--shapes", "4096x4096"], "unknown device profile 'sm_99'"),
        (["inspect", "--n", "0"], "--n: must be a positive integer, got 0"),
        (["inspect", "--n", "-64"], "--n: must be a positive integer, got -64"),
        (["inspect", "--k", "4096.5"], "--k: must be a positive integer"),
        (["inspect", "--m", "0"], "--m: must be a positive integer"),
        (["inspect", "--group", "0"], "--group: must be -1"),
        (["inspect", "--profile", "v100", "--arch", "sm_90"], "--profile v100 is sm_70, not --arch sm_90"),
        (["inspect", "--arch", "sm_101"], "unknown device profile 'sm_101'"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else None,
)
def test_bad_values_exit_2_with_the_reason(args, msg, tmp_path):
    r = _run(args, tmp_path)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "ZeroDivisionError" not in r.stderr


def test_version_and_help_show_defaults(tmp_path):
    from jitmarlin import __version__

    r = _run(["--version"], tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"jitmarlin {__version__}"
    r = _run(["prewarm", "--help"], tmp_path)
    assert r.returncode == 0 and "(default: 1)" in r.stdout and "(default: 1,16,64)" in r.stdout
    assert "(default: 4096)" in _run(["inspect", "--help"], tmp_path).stdout


def test_every_option_has_help():
    import argparse

    from jitmarlin.service.cli import build_parser

    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    if name != "cache":  # the cache subcommand documents itself
                        yield from walk(sub, path + [name])
            elif a.option_strings and not a.help:
                yield " ".join(path + [a.option_strings[-1]])

    assert list(walk(build_parser(), [])) == []


@pytest.mark.parametrize("args", [["cache", "ls"], ["info"], ["prewarm", "--list-models"]])
def test_a_closed_stdout_is_no_traceback(args, tmp_path):
    """`jitmarlin cache ls | head`: the reader goes away before the output is written."""
    e = dict(os.environ, JITMARLIN_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.Popen(
        [sys.executable, "-m", "jitmarlin", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e
    )
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc in (0, 141)


def test_an_unexpected_error_is_one_line(monkeypatch, capsys):
    from jitmarlin.service import cli

    def boom(args):
        raise RuntimeError("something broke")

    monkeypatch.setattr(cli, "cmd_info", boom)
    monkeypatch.delenv("JITMARLIN_LOG", raising=False)
    assert cli.main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("jitmarlin: error: RuntimeError: something broke") and err.count("\n") == 1
    monkeypatch.setenv("JITMARLIN_LOG", "debug")
    with pytest.raises(RuntimeError):
        cli.main(["info"])


def test_info_explains_every_arch_it_lists(capsys):
    from jitmarlin.jit.profiles import get_profile

    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for arch in info["nvrtc_archs"]:
        note = info["arch_profiles"][arch]
        if "compile only" not in note:
            assert get_profile(arch).arch == arch and get_profile(note).arch == arch
    for arch in ("sm_100", "sm_103"):  # Blackwell datacenter parts plan as sm_80-class GPUs
        assert main(["inspect", "--arch", arch, "--m", "64", "--source"]) == 0
        assert capsys.readouterr().out.startswith("// jm_sm80_")  # mma.sync, not wgmma


def test_prewarm_logs_progress_lines_and_counts_repeats(tmp_path):
    # the same 4096x4096 twice and at two M of one kernel: asked again, compiled once
    r = _run(["prewarm", "--arch", "sm_80", "--shapes", "4096x4096,4096x4096", "--m", "1,16"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "prewarm: 1 kernels to compile or find in the cache" in r.stderr and "\r" not in r.stderr
    assert "prewarm: 1 compiled, 0 already cached, 3 asked twice" in r.stdout


def _children(pid: int) -> set[int]:
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_prewarm_kills_its_workers(tmp_path):
    e = dict(os.environ, JITMARLIN_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jitmarlin",
            "prewarm",
            "--model",
            "llama-3-8b,qwen2.5-7b",
            "--arch",
            "sm_75,sm_80,sm_86,sm_89,sm_90",
            "--m",
            "1,16,64",
            "--jobs",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=e,
    )
    workers: set[int] = set()
    deadline = time.time() + 120
    try:
        while time.time() < deadline and p.poll() is None:
            # spawn workers run `python -c from multiprocessing.spawn import spawn_main ...`
            workers = {c for c in _children(p.pid) if b"spawn_main" in open(f"/proc/{c}/cmdline", "rb").read()}
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert p.poll() is None and workers, "prewarm finished before its workers could be seen"
        time.sleep(0.5)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for w in left:  # never leave them behind, even when the test fails
        os.kill(w, signal.SIGKILL)
    assert not left, f"workers {left} outlived the killed prewarm"
