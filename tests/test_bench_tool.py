"""tools/bench and tools/benchlib.py without a GPU: ratios, best peer, the markdown table, issue 6's
targets (pass, fail, worst row) on synthetic rows, --report, and gemlite's one-line refusal."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import types

import pytest

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
sys.path.insert(0, TOOLS)
import benchlib as bl  # noqa: E402

SMALL = ("L3-8B o", 4096, 4096)
BIG = ("L3-70B gate_up", 8192, 57344)


def row(shape=BIG, m=1, act="float16", jm=100.0, floor=90.0, cublas=300.0, peers=None, **extra):
    name, k, n = shape
    r = {
        "shape": name,
        "K": k,
        "N": n,
        "M": m,
        "act": act,
        "floor_us": floor,
        "jitmarlin_us": jm,
        "cublas_fp16_us": cublas,
        "peers": dict(peers or {}),
    }
    r.update(extra)
    return r


def bench_module():
    loader = importlib.machinery.SourceFileLoader("bench_tool", os.path.join(TOOLS, "bench"))
    spec = importlib.util.spec_from_loader("bench_tool", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


# --- ratios and best peer ---------------------------------------------------------------------


def test_best_peer_is_the_fastest_of_the_named_peers_only():
    r = row(peers={"tinygemm": 50.0, "gemlite": 40.0, "ist_marlin_benchmd": 45.0, "other": 1.0})
    assert bl.best_peer(r) == ("gemlite", 40.0)
    assert bl.best_peer(row(peers={"tinygemm": None, "ist_marlin_benchmd": 45.0})) == ("ist_marlin_benchmd", 45.0)
    assert bl.best_peer(row(peers={})) == (None, None)
    assert bl.best_peer(row(peers={"other": 3.0})) == (None, None)


def test_row_ratios():
    q = bl.row_ratios(row(jm=100.0, floor=80.0, cublas=200.0, peers={"tinygemm": 125.0, "gemlite": 250.0}))
    assert q["x_floor"] == pytest.approx(1.25)
    assert q["best_peer"] == "tinygemm" and q["x_best_peer"] == pytest.approx(0.8)
    assert q["x_cublas"] == pytest.approx(0.5) and q["cublas_over_jitmarlin"] == pytest.approx(2.0)
    q = bl.row_ratios(row(cublas=None, peers={}))
    assert q["x_cublas"] is None and q["x_best_peer"] is None and q["cublas_over_jitmarlin"] is None


# --- targets ----------------------------------------------------------------------------------


def test_target_a_judges_only_big_layers_at_m_1_and_16():
    rows = [
        row(BIG, 1, jm=100.0, floor=90.0),  # 1.11: meets 1.15
        row(BIG, 16, jm=110.0, floor=100.0),  # 1.10
        row(SMALL, 1, jm=30.0, floor=3.0),  # small layer: not judged by (a)
        row(BIG, 64, jm=300.0, floor=100.0),
    ]  # M=64: not judged by (a)
    t = bl.evaluate_targets(rows)["a"]
    assert t["pass"] is True and t["evaluated"] == 2 and t["failing"] == 0
    rows.append(row(("L3-8B down", 14336, 4096), 16, jm=13.0, floor=10.0))  # 1.30: fails
    t = bl.evaluate_targets(rows)["a"]
    assert t["pass"] is False and t["failing"] == 1
    assert t["worst"]["shape"] == "L3-8B down" and t["worst"]["M"] == 16
    assert t["worst"]["value"] == pytest.approx(1.3)


def test_target_a_layers_are_the_issue_list():
    assert set(bl.FLOOR_TARGET_SHAPES) <= set(bl.SHAPES)
    assert "L3-8B qkv" not in bl.FLOOR_TARGET_SHAPES and "L3-8B o" not in bl.FLOOR_TARGET_SHAPES


def test_targets_b_and_c_against_the_best_peer():
    rows = [
        row(SMALL, 1, jm=8.0, peers={"tinygemm": 10.0, "gemlite": 12.0}),  # 0.80 ok
        row(BIG, 16, jm=80.0, peers={"gemlite": 100.0, "tinygemm": 400.0}),  # 0.80 ok
        row(BIG, 64, jm=90.0, peers={"gemlite": 100.0}),
    ]  # 0.90 > 0.85
    t = bl.evaluate_targets(rows)
    assert t["b"]["pass"] is True and t["b"]["evaluated"] == 2
    assert t["c"]["pass"] is False and t["c"]["worst"]["value"] == pytest.approx(0.9)
    rows.append(row(SMALL, 16, jm=9.0, peers={"tinygemm": 10.0, "ist_marlin_benchmd": 9.5}))  # 0.947
    t = bl.evaluate_targets(rows)["b"]
    assert t["pass"] is False and t["worst"]["shape"] == "L3-8B o" and t["worst"]["M"] == 16


def test_rows_without_a_peer_are_missing_not_passed():
    t = bl.evaluate_targets([row(SMALL, 1, peers={}), row(SMALL, 16, peers={})])["b"]
    assert t["pass"] is None and t["evaluated"] == 0 and t["missing"] == 2 and t["worst"] is None
    t = bl.evaluate_targets([row(SMALL, 1, peers={}), row(SMALL, 16, jm=1.0, peers={"tinygemm": 10.0})])["b"]
    assert t["pass"] is True and t["missing"] == 1


def test_targets_d_and_e_against_cublas():
    rows = [
        row(BIG, 256, jm=300.0, cublas=350.0),  # 0.86 ok for (d)
        row(BIG, 1024, jm=1200.0, cublas=1250.0),  # 0.96 ok
        row(BIG, 4096, jm=5500.0, cublas=5000.0),
    ]  # 1.10: fails (d), 0.909 meets (e)
    t = bl.evaluate_targets(rows)
    assert t["d"]["pass"] is False and t["d"]["failing"] == 1 and t["d"]["worst"]["M"] == 4096
    assert t["e"]["pass"] is True and t["e"]["worst"]["value"] == pytest.approx(5000 / 5500, abs=1e-3)
    rows.append(row(SMALL, 4096, jm=300.0, cublas=180.0))  # cuBLAS/jm = 0.6 < 0.8
    t = bl.evaluate_targets(rows)["e"]
    assert t["pass"] is False and t["worst"]["shape"] == "L3-8B o" and t["worst"]["value"] == pytest.approx(0.6)
    assert bl.evaluate_targets([row(BIG, 256, cublas=None)])["d"]["pass"] is None


def test_target_f_pairs_bf16_with_fp16():
    rows = [
        row(BIG, 1, "float16", jm=100.0),
        row(BIG, 1, "bfloat16", jm=104.0),
        row(SMALL, 16, "float16", jm=10.0),
        row(SMALL, 16, "bfloat16", jm=9.7),
    ]
    t = bl.evaluate_targets(rows)["f"]
    assert t["pass"] is True and t["evaluated"] == 2
    rows.append(row(BIG, 64, "float16", jm=100.0))
    rows.append(row(BIG, 64, "bfloat16", jm=108.0))
    rows.append(row(SMALL, 1, "float16", jm=10.0))  # no bf16 partner: missing
    t = bl.evaluate_targets(rows)["f"]
    assert t["pass"] is False and t["failing"] == 1 and t["missing"] == 1
    assert t["worst"]["M"] == 64 and t["worst"]["value"] == pytest.approx(1.08)
    assert bl.evaluate_targets([row(BIG, 1, "float16")])["f"]["pass"] is None


def test_format_targets_reads_pass_fail_and_na():
    rows = [row(BIG, 1, jm=200.0, floor=100.0, peers={"gemlite": 100.0})]
    text = bl.format_targets(bl.evaluate_targets(rows))
    assert "(a) FAIL" in text and "worst 2.000 at L3-70B gate_up M=1" in text
    assert "(d) n/a" in text and "(f) n/a" in text
    assert len(text.splitlines()) == 7


# --- table, merge, kernel name ----------------------------------------------------------------


def test_markdown_one_line_per_row_with_marks():
    rows = [
        row(
            SMALL,
            1,
            jm=10.0,
            floor=5.0,
            cublas=20.0,
            kernel="jm_x",
            peers={"tinygemm": 12.5, "gemlite": 11.0},
            peers_method={"gemlite": "eager"},
        ),
        row(BIG, 4096, jm=9000.0, cublas=5000.0, peers={}, peers_skipped={"tinygemm": "one call 126 ms"}),
    ]
    lines = bl.markdown(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert "| jm_x |" in lines[2] and "| 2.00 |" in lines[2] and "gemlite 11.0" in lines[2]
    assert "11.0 (eager)" in lines[2] and "| 0.91 |" in lines[2] and "| 0.50 |" in lines[2]
    assert "| skip |" in lines[3] and "| 1.80 |" in lines[3]


def test_merge_rows_later_run_replaces():
    a = [row(BIG, 1, jm=1.0), row(BIG, 16, jm=2.0)]
    b = [row(BIG, 16, jm=3.0), row(BIG, 16, "bfloat16", jm=4.0)]
    m = bl.merge_rows(a, b)
    assert [(r["M"], r["act"], r["jitmarlin_us"]) for r in m] == [
        (1, "float16", 1.0),
        (16, "float16", 3.0),
        (16, "bfloat16", 4.0),
    ]


def test_kernel_name_from_launchers():
    def lz(name):
        return types.SimpleNamespace(plan=types.SimpleNamespace(spec=types.SimpleNamespace(name=name)))

    qw = types.SimpleNamespace(
        _launchers={
            (0, "float16", 16, 0): lz("jm_a"),
            (0, "float16", 16, 77): lz("jm_a"),
            (0, "float16", 64, 0): lz("jm_b"),
            (0, "bfloat16", 16, 0): lz("jm_c"),
        }
    )
    assert bl.kernel_name(qw, "float16", 16) == "jm_a"
    assert bl.kernel_name(qw, "bfloat16", 16) == "jm_c"
    assert bl.kernel_name(qw, "float16", 1) is None
    qw._launchers[(0, "float16", 64, 5)] = lz("jm_d")
    assert bl.kernel_name(qw, "float16", 64) == "jm_b/jm_d"


# --- the tool ---------------------------------------------------------------------------------


def test_report_merges_runs_and_writes_targets(tmp_path, capsys):
    fp16 = {
        "gpu": "X",
        "date": "d",
        "copy_tbps": 3.0,
        "rows": [row(BIG, 1, "float16", jm=95.0, floor=90.0, peers={"gemlite": 140.0})],
    }
    bf16 = {
        "gpu": "X",
        "date": "d",
        "copy_tbps": 3.0,
        "rows": [row(BIG, 1, "bfloat16", jm=120.0, floor=90.0, peers={"gemlite": 150.0})],
    }
    paths = []
    for name, run in (("a.json", fp16), ("b.json", bf16)):
        p = tmp_path / name
        p.write_text(json.dumps(run))
        paths.append(str(p))
    out = tmp_path / "merged.json"
    assert bench_module().main(["--report", *paths, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("| L3-70B gate_up (8192×57344) |") == 2
    assert "(f) FAIL" in text  # 120 / 95 = 1.26
    merged = json.loads(out.read_text())
    assert merged["gpu"] == "X" and len(merged["rows"]) == 2
    assert merged["targets"]["f"]["worst"]["value"] == pytest.approx(120 / 95, abs=1e-3)
    assert merged["targets"]["a"]["pass"] is False  # bf16 row: 1.33x the floor


def test_quick_and_default_limits():
    b = bench_module()
    a = b.parse_args([])
    assert a.peers == "cublas,tinygemm,gemlite,humming" and a.target_ms == 25.0 and a.peer_max_ms == 25.0
    assert a.data == "full" and a.qtypes == ["uint4b8"]
    q = b.parse_args(["--quick"])
    assert q.target_ms < a.target_ms and q.peer_max_ms < a.peer_max_ms
    assert b.parse_args(["--quick", "--peer-max-ms", "100"]).peer_max_ms == 100.0
    assert b.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_gemlite_unavailable_is_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gemlite" else real(name, *a))
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__="3.6.0"))
    with pytest.raises(RuntimeError) as e:
        bl.load_gemlite("short", [])
    assert "gemlite is not installed" in str(e.value) and "\n" not in str(e.value)


def test_gemlite_without_triton_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    with pytest.raises(RuntimeError) as e:
        bl.load_gemlite("short", [])
    assert str(e.value).startswith("triton is not importable") and "\n" not in str(e.value)


def test_version_tuple():
    assert bl._version_tuple("3.6.0") == (3, 6, 0)
    assert bl._version_tuple("3.5.1+git1234") < (3, 6)
    assert bl._version_tuple("3.10.0rc1") > (3, 6)


# --- the measuring loop, with a fake GPU ------------------------------------------------------


class _T:
    """A stand-in tensor: only its shape matters to the fakes."""

    def __init__(self, shape):
        self.shape = shape

    def half(self):
        return self

    def to(self, *a, **k):
        return self

    def t(self):
        return self

    def __mul__(self, other):
        return self


def _fake_gpu(monkeypatch, gemlite_error=None, gpu_name="Fake NVIDIA H100 80GB HBM3"):
    """tools/bench's main() on fakes: every call returns (peer, M); the Timer prices them; gemlite's
    calls cannot be captured in a graph; tinygemm's single call is 'slow' from M=1024."""
    import jitmarlin

    profiles = importlib.import_module("jitmarlin.jit.profiles")  # jitmarlin.profiles is also a name in jitmarlin
    cuda = types.SimpleNamespace(
        current_device=lambda: 0, get_device_name=lambda d: gpu_name, empty_cache=lambda: None, synchronize=lambda: None
    )
    torch = types.SimpleNamespace(
        float16="f16",
        bfloat16="bf16",
        cuda=cuda,
        manual_seed=lambda s: None,
        randn=lambda *shape, device=None, dtype=None: _T(shape),
        empty=lambda *shape, device=None, dtype=None: _T(shape),
        matmul=lambda x, w, out=None: ("cublas", x.shape[0]),
        _weight_int4pack_mm=lambda x, w, g, sz: ("tinygemm", x.shape[0]),
    )
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(get_default_memory_pool=lambda: pool))

    def fake_linear(x, q, out=None, enable_pdl=None):
        assert enable_pdl is False  # the per-call figure must not overlap the previous call
        return ("jitmarlin", x.shape[0])

    monkeypatch.setattr(jitmarlin, "linear", fake_linear)
    monkeypatch.setattr(
        profiles, "live_profile", lambda d: types.SimpleNamespace(l2_bytes=50 << 20, arch="sm_90", sms=132)
    )
    b = bench_module()
    price = {"jitmarlin": 1.0, "cublas": 2.0, "tinygemm": 3.0, "gemlite": 1.5, "humming": 1.25}
    probes = []

    class Timer:
        def __init__(self, torch, target_ms):
            pass

        def __call__(self, fns, use_graph=True):
            kind, m = fns[0]()
            if kind == "gemlite" and use_graph:
                raise RuntimeError("operation not permitted when stream is capturing")
            return price[kind] * (10 + m)

    def single_call_ms(torch, fn):
        kind, m = fn()
        probes.append((kind, m))
        return 100.0 if kind == "tinygemm" and m >= 1024 else 0.01

    class Layer:
        bench_rel_err = 1e-3

        def __call__(self, x):
            return ("gemlite", x.shape[0])

    class Humming:
        rel_err = 2e-3

        def __call__(self, x):
            return ("humming", x.shape[0])

    built = []

    def make_humming(torch, n, k, qtype, group, act_dtype, copies, check_m=16):
        built.append((qtype, group, act_dtype))
        return [Humming() for _ in range(copies)]

    def load_gemlite(autotune, files):
        if gemlite_error:
            raise RuntimeError(gemlite_error)
        return None, {
            "autotune": autotune,
            "triton": "3.6.0",
            "version": "0.6.0.post2",
            "config_shipped": "h100.json",
            "config_files": [],
        }

    monkeypatch.setattr(b, "Timer", Timer)
    monkeypatch.setattr(b, "copy_bandwidth", lambda torch: 3.0)
    monkeypatch.setattr(b, "random_weights", lambda n, k, g, act, c, **kw: [object()] * c)
    monkeypatch.setattr(b, "kernel_name", lambda qw, act, m: f"jm_fake_m{m}")
    # the planner agrees with the kernel that ran, except at M = 1024 (a tuned choice)
    monkeypatch.setattr(
        b,
        "planner_kernel",
        lambda dev, m, n, k, act, g, qtype="uint4b8": "jm_planned_m1024" if m == 1024 else f"jm_fake_m{m}",
    )
    monkeypatch.setattr(b, "make_tinygemm", lambda torch, n, k, g, c: [(None, None)] * c)
    monkeypatch.setattr(b, "load_gemlite", load_gemlite)
    monkeypatch.setattr(b, "make_gemlite", lambda torch, n, k, g, c, **kw: [Layer() for _ in range(c)])
    monkeypatch.setattr(b, "gemlite_config_source", lambda m, n, k, g: "GEMM (autotuned)")
    monkeypatch.setattr(b, "single_call_ms", single_call_ms)
    monkeypatch.setattr(b, "make_humming", make_humming)
    b.humming_built = built
    return b, probes


def test_main_loop_records_peers_methods_and_skips(tmp_path, monkeypatch, capsys):
    b, probes = _fake_gpu(monkeypatch)
    out = tmp_path / "run.json"
    assert b.main(["--shapes", "L3-8B o", "--m", "4096,1,1024", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    res = json.loads(out.read_text())
    assert {"gpu", "date", "copy_tbps", "rows", "targets"} <= set(res)
    rows = res["rows"]
    assert [r["M"] for r in rows] == [1, 1024, 4096]
    r1, r1024, r4096 = rows
    assert r1["jitmarlin_us"] == 11.0 and r1["cublas_fp16_us"] == 22.0 and r1["kernel"] == "jm_fake_m1"
    assert r1["peers"] == {
        "tinygemm": 33.0,
        "gemlite": 16.5,
        "humming": 13.75,
        "ist_marlin_benchmd": bl.IST_MARLIN["L3-8B o"][1],
    }
    assert r1["qtype"] == "uint4b8" and r1["group_size"] == 128 and r1["humming_rel_err"] == 2e-3
    assert r1["peers_method"]["gemlite"] == "eager" and r1["peers_method"]["tinygemm"] == "graph"
    assert res["peers_method"]["gemlite"] == "eager"
    assert text.count("CUDA-graph capture failed") == 1  # said once, eager from then on
    assert "tinygemm" not in r1024["peers"] and "--peer-max-ms" in r1024["peers_skipped"]["tinygemm"]
    assert r4096["peers_skipped"]["tinygemm"] == r1024["peers_skipped"]["tinygemm"]
    assert ("tinygemm", 4096) not in probes  # not called once the gate tripped
    assert r4096["peers"]["gemlite"] == 1.5 * 4106
    assert res["targets"]["b"]["evaluated"] == 1 and res["targets"]["e"]["evaluated"] == 1
    assert "## Targets (issue 6)" in text and text.count("| L3-8B o (4096×4096) |") == 3
    # a row that ran another kernel than the planner's names both
    assert r1024["planner_kernel"] == "jm_planned_m1024" and "planner_kernel" not in r1
    assert "jm_fake_m1024 (tuned; planner: jm_planned_m1024)" in text and "jm_fake_m1 (tuned" not in text


def test_ist_marlin_anchors_are_a_peer_on_an_h100_only(tmp_path, monkeypatch, capsys):
    # BENCH.md's IST Marlin times were measured on an H100: on an H200 they are left out, so the
    # best peer is one measured in the same run
    b, _ = _fake_gpu(monkeypatch, gpu_name="NVIDIA H200")
    out = tmp_path / "run.json"
    assert b.main(["--shapes", "L3-8B o", "--m", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["ist_marlin_anchor"] is False and "not an H100" in text
    (r1,) = res["rows"]
    assert "ist_marlin_benchmd" not in r1["peers"] and r1["peers"]["gemlite"] == 16.5
    assert bl.best_peer(r1) == ("humming", 13.75)


def test_report_drops_anchors_from_runs_on_other_gpus(tmp_path, capsys):
    anchor = bl.IST_MARLIN["L3-70B gate_up"][1]
    runs = {}
    for gpu in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
        runs[gpu] = {
            "gpu": gpu,
            "date": "d",
            "copy_tbps": 3.0,
            "rows": [row(BIG, 1, jm=95.0, floor=90.0, peers={"gemlite": 140.0, "ist_marlin_benchmd": anchor})],
        }
    for gpu, run in runs.items():
        p = tmp_path / "run.json"
        p.write_text(json.dumps(run))
        out = tmp_path / "out.json"
        assert bench_module().main(["--report", str(p), "--json", str(out)]) == 0
        text = capsys.readouterr().out
        (r,) = json.loads(out.read_text())["rows"]
        if gpu == "NVIDIA H200":
            assert "ist_marlin_benchmd" not in r["peers"] and "left out" in text
        else:
            assert r["peers"]["ist_marlin_benchmd"] == anchor and "left out" not in text


def test_main_loop_without_gemlite_goes_on(tmp_path, monkeypatch, capsys):
    b, _ = _fake_gpu(monkeypatch, gemlite_error="import gemlite failed (ImportError: no triton)")
    out = tmp_path / "run.json"
    assert b.main(["--shapes", "4096x4096", "--m", "16", "--act", "bfloat16", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("gemlite unavailable") == 1
    res = json.loads(out.read_text())
    assert "error" in res["gemlite"]
    r = res["rows"][0]
    assert set(r["peers"]) == {"tinygemm", "humming"} and r["act"] == "bfloat16"  # no IST anchor for bf16


def test_deadline_stops_measuring_but_still_reports(tmp_path, monkeypatch, capsys):
    b, _ = _fake_gpu(monkeypatch)
    out = tmp_path / "run.json"
    assert b.main(["--shapes", "8b", "--m", "1,16", "--deadline-s", "0", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["rows"] == [] and "deadline" in res["stopped_early"]
    assert res["targets"]["a"]["pass"] is None
    assert "## Targets (issue 6)" in capsys.readouterr().out


def _recording_gpu(monkeypatch):
    """The fake GPU, with torch's seeding, draws and conversions and random_weights recorded."""
    b, _ = _fake_gpu(monkeypatch)
    torch = sys.modules["torch"]
    log = []

    class T(_T):
        def to(self, dtype):
            log.append(("to", dtype))
            return T(self.shape)

    def randn(*shape, device=None, dtype=None):
        log.append(("randn", shape, dtype))
        return T(shape)

    torch.randn = randn
    torch.manual_seed = lambda s: log.append(("seed", s))
    monkeypatch.setattr(
        b,
        "random_weights",
        lambda n, k, g, act, c, shared_values=False, qtype="uint4b8": (
            log.append(("weights", act, shared_values)) or [object()] * c
        ),
    )
    return b, log


def test_shared_data_gives_fp16_and_bf16_rows_the_same_bf16_exact_x(tmp_path, monkeypatch):
    b, log = _recording_gpu(monkeypatch)
    out = tmp_path / "run.json"
    assert (
        b.main(
            [
                "--shapes",
                "L3-8B o",
                "--m",
                "1,16",
                "--act",
                "float16,bfloat16",
                "--peers",
                "cublas",
                "--data",
                "shared",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["data"].startswith("shared")
    seeds = [e[1] for e in log if e[0] == "seed"][1:]  # the first is the run's own seed
    # per shape and M, the same for both dtypes (measured side by side: M = 1's rows, then M = 16's)
    assert len(seeds) == 4 and seeds[0] == seeds[1] and seeds[2] == seeds[3] and seeds[0] != seeds[2]
    assert ("weights", "float16", True) in log and ("weights", "bfloat16", True) in log
    # every draw is fp32 (no dtype), rounded to bf16 before it becomes the row's dtype
    draws = [i for i, e in enumerate(log) if e[0] == "randn"]
    assert draws and all(log[i][2] is None and log[i + 1] == ("to", "bf16") for i in draws)


def test_own_data_draws_in_each_dtype(tmp_path, monkeypatch):
    b, log = _recording_gpu(monkeypatch)
    out = tmp_path / "run.json"
    assert (
        b.main(
            [
                "--shapes",
                "L3-8B o",
                "--m",
                "1",
                "--act",
                "float16",
                "--peers",
                "cublas",
                "--data",
                "own",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["data"].startswith("own")
    assert ("weights", "float16", False) in log and ("to", "bf16") not in log
    assert len([e for e in log if e[0] == "seed"]) == 1


def test_full_data_gives_cublas_its_own_fp16_x_in_bf16_rows(tmp_path, monkeypatch):
    b, log = _recording_gpu(monkeypatch)
    out = tmp_path / "run.json"
    assert (
        b.main(
            [
                "--shapes",
                "L3-8B o",
                "--m",
                "16",
                "--act",
                "float16,bfloat16",
                "--peers",
                "cublas",
                "--data",
                "full",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["data"].startswith("full")
    assert ("weights", "bfloat16", False) in log
    x_draws = [i for i, e in enumerate(log) if e[0] == "randn" and e[1] == (16, 4096)]
    # fp16 row: x in fp16 (cuBLAS takes it); bf16 row: x in bf16, then cuBLAS's own draw in fp16
    assert [log[i + 1] for i in x_draws] == [("to", "f16"), ("to", "bf16"), ("to", "f16")]


def test_bf16_rounded_values_are_exact_in_fp16(rng):
    """What 'shared' data rests on: bf16-rounded normal draws (x, 0.02 W) and scales
    (0.001..0.011) survive a trip through fp16 unchanged."""
    import numpy as np

    from jitmarlin.weights import halves

    for v in (rng.standard_normal(1 << 16), 0.02 * rng.standard_normal(1 << 16), rng.random(1 << 16) * 0.01 + 0.001):
        v = v[np.abs(v) > 2.0**-14]  # fp16's normal range (smaller ones: subnormal)
        r = halves.round_to(v, "bfloat16")
        assert np.array_equal(halves.round_to(r, "float16"), r)
        assert not np.array_equal(halves.round_to(v, "float16"), halves.round_to(v, "bfloat16"))


def _sequence_timer(monkeypatch, b, order, times):
    """A Timer that records the kind of each call it times and prices jitmarlin's and cuBLAS's
    from `times` in the order they come (a drifting clock), peers at 1 us."""
    times = iter(times)

    class Timer:
        def __init__(self, torch, target_ms):
            pass

        def __call__(self, fns, use_graph=True):
            kind, _ = fns[0]()
            order.append(kind)
            return float(next(times)) if kind in ("jitmarlin", "cublas") else 1.0

    monkeypatch.setattr(b, "Timer", Timer)


def test_repeats_alternate_jitmarlin_and_cublas_and_keep_medians(tmp_path, monkeypatch):
    b, _ = _fake_gpu(monkeypatch)
    order = []
    _sequence_timer(monkeypatch, b, order, [30.0, 10.0, 20.0, 31.0, 9.0, 40.0, 33.0, 11.0, 12.0, 50.0])
    out = tmp_path / "run.json"
    assert b.main(["--shapes", "L3-8B o", "--m", "16", "--peers", "cublas", "--repeats", "5", "--json", str(out)]) == 0
    assert order == ["jitmarlin", "cublas"] * 5
    r = json.loads(out.read_text())["rows"][0]
    assert r["samples_us"] == {
        "jitmarlin": [30.0, 20.0, 9.0, 33.0, 12.0],
        "cublas_fp16": [10.0, 31.0, 40.0, 11.0, 50.0],
    }
    assert r["jitmarlin_us"] == 20.0 and r["cublas_fp16_us"] == 31.0
    with pytest.raises(SystemExit):
        b.parse_args(["--repeats", "0"])


def test_both_dtypes_and_cublas_are_timed_in_turn_at_each_m(tmp_path, monkeypatch):
    """Target f compares jitmarlin's bf16 row with its fp16 row: they are timed side by side (and
    share cuBLAS's column with shared data), not one whole dtype after the other."""
    b, _ = _fake_gpu(monkeypatch)
    order = []
    _sequence_timer(monkeypatch, b, order, range(100, 10_000))
    out = tmp_path / "run.json"
    assert (
        b.main(
            [
                "--shapes",
                "L3-8B o",
                "--m",
                "1,64",
                "--act",
                "float16,bfloat16",
                "--peers",
                "cublas",
                "--repeats",
                "3",
                "--data",
                "shared",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert order == ["jitmarlin", "cublas", "jitmarlin"] * 6  # 3 turns at M = 1, then 3 at M = 64
    rows = json.loads(out.read_text())["rows"]
    assert [(r["M"], r["act"]) for r in rows] == [(1, "float16"), (1, "bfloat16"), (64, "float16"), (64, "bfloat16")]
    f16, bf16 = rows[0], rows[1]
    assert f16["samples_us"]["jitmarlin"] == [100.0, 103.0, 106.0]
    assert bf16["samples_us"]["jitmarlin"] == [102.0, 105.0, 108.0]
    assert f16["samples_us"]["cublas_fp16"] == bf16["samples_us"]["cublas_fp16"] == [101.0, 104.0, 107.0]
    assert f16["cublas_fp16_us"] == bf16["cublas_fp16_us"] == 104.0


def test_own_data_times_each_rows_cublas_in_the_turn(tmp_path, monkeypatch):
    b, _ = _fake_gpu(monkeypatch)
    order = []
    _sequence_timer(monkeypatch, b, order, range(100, 10_000))
    out = tmp_path / "run.json"
    assert (
        b.main(
            [
                "--shapes",
                "L3-8B o",
                "--m",
                "16",
                "--act",
                "float16,bfloat16",
                "--peers",
                "cublas",
                "--repeats",
                "2",
                "--data",
                "own",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert order == ["jitmarlin", "cublas"] * 4
    f16, bf16 = json.loads(out.read_text())["rows"]
    assert f16["samples_us"] == {"jitmarlin": [100.0, 104.0], "cublas_fp16": [101.0, 105.0]}
    assert bf16["samples_us"] == {"jitmarlin": [102.0, 106.0], "cublas_fp16": [103.0, 107.0]}


# --- the GPU's thermal state (nvidia-smi) -----------------------------------------------------

# Abridged `nvidia-smi -q -d PERFORMANCE,TEMPERATURE` of an H100 that had been throttling for heat.
NVSMI_HOT = """
==============NVSMI LOG==============

Timestamp                                              : Sun Nov 22 07:33:07 2026
Driver Version                                         : 580.159.04

Attached GPUs                                          : 1
GPU 00000000:00:06.0
    Performance State                                  : P0
    Clocks Event Reasons
        Idle                                           : Active
        SW Power Cap                                   : Not Active
        HW Slowdown                                    : Not Active
            HW Thermal Slowdown                        : Not Active
        SW Thermal Slowdown                            : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                               : 83760803 us
        Sync Boost                                     : 0 us
        SW Thermal Slowdown                            : 114363905 us
        HW Thermal Slowdown                            : 5307310 us
        HW Power Braking                               : 0 us
    Temperature
        GPU Current Temp                               : 69 C
        GPU Shutdown Temp                              : 92 C
        Memory Current Temp                            : 70 C
"""


def test_gpu_state_parses_temperatures_and_slowdown_counters():
    st = bl.parse_gpu_state(NVSMI_HOT)
    assert st["gpu_temp_c"] == 69 and st["mem_temp_c"] == 70
    # the counters, not the "Active / Not Active" flags of the same names above them
    assert st["slowdown_us"] == {
        "SW Power Capping": 83760803,
        "Sync Boost": 0,
        "SW Thermal Slowdown": 114363905,
        "HW Thermal Slowdown": 5307310,
        "HW Power Braking": 0,
    }
    assert bl.parse_gpu_state("nvidia-smi: no devices") == {"gpu_temp_c": None, "mem_temp_c": None, "slowdown_us": {}}


def test_thermal_slowdown_counts_heat_not_the_power_cap():
    before = bl.parse_gpu_state(NVSMI_HOT)
    after = bl.parse_gpu_state(NVSMI_HOT.replace("114363905", "116363905").replace("83760803", "93760803"))
    assert bl.thermal_slowdown(before, after) == {"SW Thermal Slowdown": 2000000}
    assert bl.thermal_slowdown(before, before) == {}
    assert bl.thermal_slowdown(None, after) == {}


def test_sweep_filter_keeps_gemv_kernels_out_of_tile_and_stage_filters():
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.planner import candidate_specs
    from jitmarlin.kernels.problem import Problem

    specs = candidate_specs(get_profile("h100"), Problem(16, 8192, 28672, "float16", "uint4b8", 128))
    gemv = [s for s in specs if not hasattr(s, "stages")]
    assert gemv and len(gemv) < len(specs)
    tiles = [s for s in specs if bl.candidate_filter("sm80", "1x16,1x8")(s)]
    assert tiles and all(hasattr(s, "stages") and (s.tm, s.tn) in ((1, 16), (1, 8)) for s in tiles)
    assert not any(bl.candidate_filter("", "", "3")(s) for s in gemv)
    assert [s for s in specs if bl.candidate_filter("gemv")(s)] == gemv
    assert len([s for s in specs if bl.candidate_filter("sm80")(s)]) == len(specs)


def test_shapes_given_as_k_by_n_keep_their_layer_name():
    """--shapes 4096x6144 is 8B qkv (its IST Marlin anchor applies); other sizes keep their text."""
    got = bl.select_shapes("4096x6144,1024x512,L3-70B o")
    assert got == {"L3-8B qkv": (4096, 6144), "1024x512": (1024, 512), "L3-70B o": (8192, 8192)}
    assert bl.IST_MARLIN["L3-8B qkv"][16] == 11.8


# --- weight types (--quant) -------------------------------------------------------------------


@pytest.mark.parametrize("qtype", bl.BENCH_QTYPES)
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_random_weights_of_every_type_are_valid(qtype, act):
    """The bench's random weights (here built with NumPy: same code as the CuPy path) pass
    QuantizedWeight's validation, in the type's scale format, and dequantize to finite values."""
    import numpy as np

    import jitmarlin
    from jitmarlin.weights import halves, packing
    from jitmarlin.weights.quant import E4M3, from_codes

    n, k = 128, 256
    for group in (128, -1):
        for shared in (False, True):
            qws = bl.random_weights(n, k, group, act, 2, shared_values=shared, qtype=qtype, xp=np)
            assert len(qws) == 2 and qws[0].packed is not qws[1].packed
            w = qws[0]
            w.validate()
            assert w.qtype == qtype and w.scale_dtype == act and (w.n, w.k) == (n, k)
            assert w.group_size == {"nvfp4": 16, "mxfp4": 32}.get(qtype, group)
            d = jitmarlin.dequantize(w)
            assert d.shape == (n, k) and np.all(np.isfinite(d)) and np.any(d != 0)
            assert 0.01 < np.abs(d).max() < 1.0
            codes = packing.unpack(w.packed, n, k, w.bits)
            if w.group_size == -1 and w.offsets is None:
                s = halves.from_bits(w.scales, act)
            else:
                s = halves.from_bits(packing.unpermute_scales(w.scales), act)
            assert np.all(s > 0)
            if shared:  # bf16-exact scales: fp16 holds them too
                assert np.array_equal(halves.round_to(s, "bfloat16"), s)
            if qtype == "float8_e4m3fn":
                assert not np.any((codes & 0x7F) == 0x7F)
            if qtype == "nvfp4":
                assert np.all(np.isin(s, E4M3[np.isfinite(E4M3)])) and w.global_scale == 2.0**-8
            if qtype == "mxfp4":
                assert np.array_equal(np.exp2(np.round(np.log2(s))), s)
            if qtype == "uint4":  # offsets are (8 - z) * s for integer zero points z in 0..15
                assert w.offsets is not None
                m = halves.from_bits(packing.unpermute_scales(w.offsets.reshape(-1, n)), act)
                z = 8 - m / s
                assert np.allclose(z, np.round(z), atol=0.05) and z.min() >= -0.05 and z.max() <= 15.05
                # the same weight through from_codes' zero points dequantizes the same
                zi = np.clip(np.round(z), 0, 15)
                ref = from_codes("uint4", codes, s, w.group_size, zeros=zi, scale_dtype=act)
                assert np.allclose(jitmarlin.dequantize(ref), d, rtol=1e-2, atol=2e-3)  # m rounded to act
            else:
                assert w.offsets is None


def test_random_weights_default_is_uint4b8():
    import numpy as np

    w = bl.random_weights(64, 128, 64, "float16", 1, xp=np)[0]
    assert w.qtype == "uint4b8" and w.group_size == 64 and w.offsets is None


def test_floor_bytes_per_type():
    n, k = 4096, 8192
    assert bl.weight_bytes(n, k, 128) == n * k / 2 + n * k / 128 * 2  # BENCH.md's formula
    assert bl.weight_bytes(n, k, 128, "uint4") == n * k / 2 + n * k / 128 * 2.5  # + 4-bit zero points
    assert bl.weight_bytes(n, k, 128, "uint8b128") == n * k + n * k / 128 * 2
    assert bl.weight_bytes(n, k, -1, "float8_e4m3fn") == n * k + n * 2  # per-channel scales
    assert bl.weight_bytes(n, k, 16, "nvfp4") == n * k / 2 + n * k / 16 + 4  # e4m3 scales + global
    assert bl.weight_bytes(n, k, 32, "mxfp4") == n * k / 2 + n * k / 32  # e8m0 scales
    assert [bl.qtype_group(q, 128) for q in bl.BENCH_QTYPES] == [128, 128, 128, 128, 16, 32]
    # the old signature is uint4b8
    assert bl.floor_us(16, n, k, 128, 3.0) == bl.floor_us(16, n, k, 128, 3.0, "uint4b8")
    assert bl.floor_us(16, n, k, 128, 3.0) == pytest.approx(
        (n * k / 2 + n * k / 128 * 2 + 16 * k * 2 + 16 * n * 2) / 3e12 * 1e6
    )
    assert bl.floor_us(1, n, k, 128, 3.0, "uint8b128") > 1.9 * bl.floor_us(1, n, k, 128, 3.0)
    assert bl.floor_us(1, n, k, 16, 3.0, "nvfp4") > bl.floor_us(1, n, k, 32, 3.0, "mxfp4")


def test_markdown_adds_a_qtype_column_for_several_types():
    one = [row(SMALL, 1, qtype="uint4b8"), row(SMALL, 16)]
    lines = bl.markdown(one).splitlines()
    assert "qtype" not in lines[0] and lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    rows = [
        row(SMALL, 1, qtype="uint4b8"),
        row(SMALL, 1, qtype="nvfp4", peers={"humming": 12.0}),
        row(SMALL, 1),
    ]  # a row from before --quant: uint4b8
    lines = bl.markdown(rows).splitlines()
    assert "| qtype | act |" in lines[0] and "humming µs" in lines[0]
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert "| uint4b8 | float16 |" in lines[2] and "| nvfp4 | float16 |" in lines[3]
    assert "| uint4b8 | float16 |" in lines[4] and "humming 12.0" in lines[3]


def test_rows_of_different_types_stay_apart():
    a = [row(BIG, 1, jm=1.0, qtype="uint4b8"), row(BIG, 1, jm=2.0, qtype="mxfp4")]
    assert len(bl.merge_rows(a, [row(BIG, 1, jm=3.0, qtype="mxfp4")])) == 2
    # target f pairs fp16 with bf16 of the same type only
    rows = [
        row(BIG, 1, "float16", jm=100.0, qtype="uint4b8"),
        row(BIG, 1, "bfloat16", jm=101.0, qtype="uint4b8"),
        row(BIG, 1, "float16", jm=50.0, qtype="nvfp4"),
        row(BIG, 1, "bfloat16", jm=60.0, qtype="nvfp4"),
    ]
    t = bl.evaluate_targets(rows)["f"]
    assert t["evaluated"] == 2 and t["failing"] == 1 and t["worst"]["qtype"] == "nvfp4"
    assert "M=1 bfloat16/float16 nvfp4" in bl.format_targets(bl.evaluate_targets(rows))


def test_quant_argument():
    b = bench_module()
    assert b.parse_args([]).qtypes == ["uint4b8"]
    a = b.parse_args(["--quant", "nvfp4, uint4b8,nvfp4,mxfp4"])
    assert a.qtypes == ["nvfp4", "uint4b8", "mxfp4"]
    assert b.parse_args(["--quant", ",".join(bl.BENCH_QTYPES)]).qtypes == list(bl.BENCH_QTYPES)


def test_moe_sweep_routing_argument(capsys):
    """--sweep alone times the uniform routing, --sweep skewed the skewed one; no --sweep: None."""
    b = bench_module()
    assert b.parse_args(["--moe"]).sweep is None
    assert b.parse_args(["--moe", "--sweep"]).sweep == "uniform"
    assert b.parse_args(["--moe", "--sweep", "skewed"]).sweep == "skewed"
    with pytest.raises(SystemExit) as e:
        b.parse_args(["--moe", "--sweep", "zipf"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["int4", "uint4b8,fp8", "uint8", ""])
def test_quant_argument_refuses_unknown_types(bad, capsys):
    with pytest.raises(SystemExit) as e:
        bench_module().parse_args(["--quant", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--quant: unknown weight type" in err and "uint4b8, uint4, uint8b128, float8_e4m3fn, nvfp4, mxfp4" in err


def test_main_loop_over_types_skips_int4_only_peers(tmp_path, monkeypatch):
    b, _ = _fake_gpu(monkeypatch)
    out = tmp_path / "run.json"
    assert (
        b.main(
            ["--shapes", "L3-8B o", "--m", "1,16", "--quant", "uint4b8,nvfp4,uint4,float8_e4m3fn", "--json", str(out)]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["quant"] == ["uint4b8", "nvfp4", "uint4", "float8_e4m3fn"]
    rows = res["rows"]
    assert [(r["qtype"], r["M"]) for r in rows] == [(q, m) for q in res["quant"] for m in (1, 16)]
    by = {(r["qtype"], r["M"]): r for r in rows}
    for qt in ("uint4b8", "uint4"):
        assert {"tinygemm", "gemlite", "humming"} <= set(by[qt, 1]["peers"]) and not by[qt, 1]["peers_skipped"]
    for qt in ("nvfp4", "float8_e4m3fn"):
        r = by[qt, 16]
        assert set(r["peers"]) == {"humming"} and r["humming_rel_err"] == 2e-3
        assert set(r["peers_skipped"]) == {"tinygemm", "gemlite"} and qt in r["peers_skipped"]["tinygemm"]
    assert "ist_marlin_benchmd" in by["uint4b8", 1]["peers"] and "ist_marlin_benchmd" not in by["uint4", 1]["peers"]
    assert by["nvfp4", 1]["group_size"] == 16 and by["float8_e4m3fn", 1]["group_size"] == 128
    # the floor follows the type: fp8 moves twice the bytes of uint4b8
    assert by["float8_e4m3fn", 1]["floor_us"] > 1.9 * by["uint4b8", 1]["floor_us"]
    assert ("nvfp4", 16, "f16") in b.humming_built and ("uint4b8", 128, "f16") in b.humming_built


def test_humming_unavailable_is_one_line_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    b, _ = _fake_gpu(monkeypatch)

    def no_humming(*a, **k):
        raise ImportError("humming-kernels is not importable (ModuleNotFoundError: No module named 'humming')")

    monkeypatch.setattr(b, "make_humming", no_humming)
    out = tmp_path / "run.json"
    assert (
        b.main(
            [
                "--shapes",
                "L3-8B o",
                "--m",
                "1",
                "--quant",
                "uint4b8,mxfp4",
                "--act",
                "float16,bfloat16",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert text.count("humming unavailable") == 1
    res = json.loads(out.read_text())
    assert "error" in res["humming"] and len(res["rows"]) == 4
    assert all("humming" not in r["peers"] for r in res["rows"])


def test_humming_weight_configs_follow_the_moe_adapter():
    import benchhumming as bh
    import benchmoe_humming as bmh

    assert set(bh.HUMMING_QTYPES) == set(bl.BENCH_QTYPES) | {"uint8b128"}
    assert bh.humming_weight_config("uint4b8", 128) == {"dtype": "uint4", "group_size": 128}
    assert bh.humming_weight_config("uint4b8", -1) == {"dtype": "uint4"}  # per channel
    assert bh.humming_weight_config("uint4", 64) == {"dtype": "uint4", "has_zero_point": True, "group_size": 64}
    assert bh.humming_weight_config("nvfp4", 128)["group_size"] == 16
    assert bh.humming_weight_config("mxfp4", 128) == {**bmh._QTYPES["mxfp4"][0], "group_size": 32}
    with pytest.raises(NotImplementedError):
        bh.humming_weight_config("uint8", 128)


def test_moe_models_include_a_swiglu_gpt_oss_and_refuse_unknown_names():
    """gpt-oss-20b-silu: gpt-oss-20b's expert shapes and mxfp4 with SwiGLU, so that humming (SwiGLU
    only) is timed against jitmarlin on mxfp4 like for like; a misspelt model is an error, not a
    KeyError after the GPU set-up."""
    import benchmoe as bm

    assert bm.MODELS["gpt-oss-20b-silu"][:6] == bm.MODELS["gpt-oss-20b"][:6]
    assert bm.MODELS["gpt-oss-20b-silu"][6] == "silu" and bm.MODELS["gpt-oss-20b"][6] == "swigluoai"
    assert bm.MODELS["gpt-oss-20b"][4:6] == ("mxfp4", 32)
    # humming asserts on gpt-oss's shapes: Qwen3-30B's and Mixtral's with mxfp4 codes as well
    for name in ("qwen3-30b-a3b", "mixtral-8x7b"):
        assert bm.MODELS[f"{name}-mxfp4"] == bm.MODELS[name][:4] + ("mxfp4", 32, "silu")
    assert bm.model_names("mixtral-8x7b,gpt-oss-20b-silu") == ["mixtral-8x7b", "gpt-oss-20b-silu"]
    assert bm.model_names("all") == list(bm.MODELS)
    with pytest.raises(SystemExit, match="unknown model"):
        bm.model_names("mixtral-8x7")


def test_prewarm_suite_moe_bench_kernels(monkeypatch):
    """tools/prewarm_suite.py --moe-bench: the planner's three kernels of each model, T and dtype
    (what tools/bench --moe launches), in the switches' state at the time (--moe-switches
    collects both)."""
    import prewarm_suite as ps

    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.moe import wgmma as moe_wgmma

    h = get_profile("h100")
    monkeypatch.setattr(moe_wgmma, "SORTED_LAYOUTS", False)
    specs = list(ps.moe_bench_specs(h, [1, 1024], ["mixtral-8x7b"]))
    assert len(specs) == 2 * 2 * 3 and len({s.act for s in specs}) == 2
    names = [s.name for s in specs]
    assert any("_gemv_" in n for n in names) and any("_wgmma_" in n for n in names)
    assert not any(n.endswith(("h", "hx")) for n in names if "_wgmma_" in n)
    monkeypatch.setattr(moe_wgmma, "SORTED_LAYOUTS", True)
    on = [s.name for s in ps.moe_bench_specs(h, [1024], ["mixtral-8x7b"]) if "_wgmma_" in s.name]
    assert sorted(n[-2:] for n in on) == ["4h", "4h", "hx", "hx"]  # (down: sorted_h; up: and sorted_x)


def test_moe_sweep_trials_cover_splits_row_blocks_and_direct():
    """The sweep's alternatives (and so tools/prewarm_suite.py --moe-sweep): a wgmma plan on the H100
    gets its w2 K splits, other row blocks and both with splits; a T = 1 GEMV plan gets its other
    mode (sorted, for the planner's direct one); every trial either plans or is refused by plan_moe with a clear error."""
    import benchmoe as bm

    from jitmarlin.errors import JitMarlinError
    from jitmarlin.jit.profiles import get_profile
    from jitmarlin.kernels.moe import MoEProblem, plan_moe
    from jitmarlin.weights.qtypes import kernel_dims

    prof = get_profile("h100")

    def problem(model, t):
        e, k, hidden, inter, qt, g, activation = bm.MODELS[model]
        n13, k13 = kernel_dims(2 * inter, hidden, g)
        n2, k2 = kernel_dims(hidden, inter, g)
        return MoEProblem(t, k, e, n13, k13, n2, k2, inter, hidden, "float16", qt, g, activation)

    from jitmarlin.kernels.moe.plan import AUTO_PDL
    from jitmarlin.kernels.moe.wgmma import SORTED_LAYOUTS

    p = problem("mixtral-8x7b", 256)
    base = plan_moe(prof, p)
    assert base.wgmma and base.up.tm == 4
    trials = bm.sweep_trials(prof, p, base)
    whats = {w for w, _, _ in trials}
    assert {"up", "down", "tm", "splits", "tm+splits", "order", "sorted_h", "sorted_h+order", "kind"} <= whats
    # (the plan's own layouts are no trial: unsorted, or sorted_hx at 64 rows an expert)
    assert {"sorted_x", "sorted_hx+order", "unsorted" if SORTED_LAYOUTS else "sorted_hx"} <= whats
    assert ("sorted_hx" in whats) != SORTED_LAYOUTS and ("unsorted" in whats) == SORTED_LAYOUTS
    p64 = problem("mixtral-8x7b", 64)  # 16 rows an expert: the GEMV kind in 16-row blocks too
    rows16 = [kw for w, _, kw in bm.sweep_trials(prof, p64, plan_moe(prof, p64)) if w == "rows"]
    assert len(rows16) == 1 and plan_moe(prof, p64, **rows16[0]).block_m == 16
    for w, _, kw in trials:  # x's sorted copy on the up stage only; H's layout on both or neither
        if w.startswith("sorted_"):
            pl = plan_moe(prof, p, **kw)
            assert pl.up.sorted_x == ("x" in w) and not getattr(pl.down, "sorted_x", False)
            assert pl.up.sorted_h == pl.down.sorted_h == (w.startswith("sorted_h")), w
    assert "direct" not in whats
    split_plans = [plan_moe(prof, p, **kw) for w, _, kw in trials if w == "splits" and kw["splits"] > 1]
    assert split_plans and all(pl.splits == kw for pl, kw in zip(split_plans, (2, 3, 4)))
    p1 = problem("qwen3-30b-a3b", 1)
    base1 = plan_moe(prof, p1)
    assert base1.gemv and base1.direct  # the planner's decode plan: the other mode is the sorted one
    trials1 = bm.sweep_trials(prof, p1, base1)
    direct = [kw for w, _, kw in trials1 if w == "direct"]
    assert direct == [{"direct": False}] and not plan_moe(prof, p1, **direct[0]).direct
    # the planner's direct plan on sm_90 has PDL where AUTO_PDL (e125): the trial is the other launch
    assert base1.pdl == AUTO_PDL and ("pdl", not AUTO_PDL, {"pdl": not AUTO_PDL}) in trials1
    assert not plan_moe(prof, p1, pdl=False).pdl and plan_moe(prof, p1, pdl=True).pdl
    for prob, kws in ((p, trials), (p1, trials1)):
        for _, _, kw in kws:
            try:
                plan_moe(prof, prob, **kw)
            except (JitMarlinError, ValueError) as e:
                assert str(e)


def _plot_rows():
    rows = []
    for shape, base in (("L3-8B o", 5.0), ("L3-8B down", 12.0)):
        for m in (1, 16, 64, 256):
            rows.append(
                {
                    "shape": shape,
                    "K": 4096,
                    "N": 4096,
                    "M": m,
                    "act": "float16",
                    "qtype": "uint4b8",
                    "jitmarlin_us": base * (1 + m / 64),
                    "floor_us": base / 2,
                    "cublas_fp16_us": 4 * base + m,
                    "peers": {"humming": base * (1.3 + m / 64)},
                }
            )
    rows.append(dict(rows[0], qtype="nvfp4", jitmarlin_us=999.0))  # another type: not drawn
    return rows


def test_plot_draws_one_line_a_series_and_shape_inside_its_panel():
    import xml.etree.ElementTree as ET

    import benchplot as bp

    rows = _plot_rows()
    root = ET.fromstring(bp.plot_svg(rows, "uint4b8", "float16", "t"))
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert sorted({ln.get("data-series") for ln in lines}) == ["cublas_fp16", "floor", "humming", "jitmarlin"]
    assert len(lines) == 2 * 4
    legend = [t.text for t in root.findall(f"{ns}text")]
    assert {"jitmarlin", "humming", "cuBLAS fp16", "byte floor", "L3-8B o", "L3-8B down"} <= set(legend)
    for panel, group in enumerate((lines[:4], lines[4:])):
        x_lo, x_hi = panel * bp.PANEL_W + bp.PAD_L, (panel + 1) * bp.PANEL_W - bp.PAD_R
        y_lo, y_hi = 22 + bp.PAD_T, 22 + bp.PANEL_H - bp.PAD_B
        for ln in group:
            pts = [tuple(map(float, p.split(","))) for p in ln.get("points").split()]
            assert len(pts) == 4
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            assert xs == sorted(xs) and x_lo - 0.1 <= xs[0] and xs[-1] <= x_hi + 0.1
            assert all(y_lo - 0.1 <= y <= y_hi + 0.1 for y in ys)
        series = {ln.get("data-series"): ln for ln in group}
        jm = [float(p.split(",")[1]) for p in series["jitmarlin"].get("points").split()]
        assert jm == sorted(jm, reverse=True)  # times grow with M: the line climbs
        hum = [float(p.split(",")[1]) for p in series["humming"].get("points").split()]
        assert all(h < j for h, j in zip(hum, jm))  # humming slower: drawn above jitmarlin
    with pytest.raises(ValueError, match="no rows"):
        bp.plot_svg(rows, "mxfp4", "float16")


def test_report_plot_writes_the_svg(tmp_path, capsys):
    b = bench_module()
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07", "rows": _plot_rows()}))
    svg = tmp_path / "plot.svg"
    assert b.main(["--report", str(run), "--plot", str(svg)]) == 0
    text = svg.read_text()
    assert text.startswith("<svg") and "NVIDIA H100 80GB HBM3, 2026-12-07: uint4b8, float16" in text
    with pytest.raises(SystemExit):
        b.parse_args(["--plot", str(svg)])
