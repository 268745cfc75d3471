"""Shared by the forced-kernel probes (tk32_check.py, bulk_check.py): each case's kernel against the
float64 reference on the GPU through tests/gpu_cases.run_forced (poisoned output, fresh random x and
weights), both activation dtypes, one line a case and a count of the failures. GPU only."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))

import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from gpu_cases import rel, run_forced  # noqa: E402
from jitmarlin.qtypes import QTYPES  # noqa: E402

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


def check(name, cases):
    """cases: (m, n, k, qtype, group, make_spec) with make_spec(act, group_blocks) -> KernelSpec.
    Prints a line a case and dtype; returns the number that failed (an error counts as a failure)."""
    rng = np.random.default_rng()
    bad = 0
    for m, n, k, qtype, group, make_spec in cases:
        w = rng.standard_normal((n, k)) * 0.02
        for act in ("float16", "bfloat16"):
            qw = jitmarlin.quantize(w, qtype, group, scale_dtype=act)
            gb = (0 if QTYPES[qtype].zero_points else -1) if group < 0 else group // 16
            spec = make_spec(act, gb)
            try:
                y, ref = run_forced(qw, m, act, spec, rng)
            except Exception as e:   # a case this build cannot take is reported, not hidden
                bad += 1
                print(f"check {spec.name:44s} M={m:3d} N={n} K={k}: ERROR {type(e).__name__}: {e}", flush=True)
                continue
            e = rel(y, ref)
            ok = e <= TOL[act]
            bad += not ok
            print(f"check {spec.name:44s} M={m:3d} N={n} K={k}: rel {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    print(f"{name}: {bad} failed")
    return bad
