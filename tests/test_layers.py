"""The package's shape (DESIGN.md, "Layers"): the import-linter contracts in pyproject.toml hold
on this tree and catch an upward import, and no module grows past MAX_LINES."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "jitmarlin"
MAX_LINES = 700


def _tools() -> list:
    """tools/'s Python files and scripts (bench, e2e, sweep have no .py suffix)."""
    tools = [p for p in (ROOT / "tools").iterdir() if p.is_file()]
    return [p for p in tools if p.suffix == ".py" or p.read_text().startswith("#!/usr/bin/env python")]


def test_no_module_over_700_lines():
    files = [*PKG.rglob("*.py"), *_tools()]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert len(files) > 60 and any(p.name == "bench" for p in files)
    assert long == {}, f"split these modules (at most {MAX_LINES} lines each): {long}"


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not os.path.exists(exe):
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    env = dict(os.environ, PYTHONPATH=str(root))  # grimp imports the root package from here
    return subprocess.run(
        [exe, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    shutil.copytree(PKG, dst / "jitmarlin", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def test_layer_contracts_hold():
    r = _lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 2 kept, 0 broken." in r.stdout


@pytest.mark.parametrize(
    "module,line,broken",
    [
        (
            "jit/cache.py",
            "from jitmarlin.service import cli",
            "jitmarlin.jit is not allowed to import jitmarlin.service",
        ),
        (
            "weights/quant.py",
            "from jitmarlin.kernels import planner",
            "jitmarlin.weights is not allowed to import jitmarlin.kernels",
        ),
        (
            "ops/linear.py",
            "from jitmarlin.service import tune",
            "jitmarlin.ops is not allowed to import jitmarlin.service",
        ),
        ("kernels/render.py", "from jitmarlin import reference", "jitmarlin.reference"),
    ],
)
def test_an_upward_import_breaks_the_contracts(tmp_path, module, line, broken):
    tree = _copy(tmp_path)
    assert _lint_imports(tree).returncode == 0  # the copy itself passes
    with open(tree / "jitmarlin" / module, "a") as f:
        f.write(f"\n{line}  # planted\n")
    r = _lint_imports(tree)
    assert r.returncode != 0, r.stdout
    assert broken in r.stdout, r.stdout


def test_no_import_circle_anywhere():
    """No module reaches itself through imports (function-level imports count too)."""
    grimp = pytest.importorskip("grimp")  # import-linter's graph builder
    graph = grimp.build_graph("jitmarlin", cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    state: dict = {}  # module -> 1 (on the path) or 2 (done)
    circles = []

    def visit(m, path):
        state[m] = 1
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                circles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert circles == []
