#!/usr/bin/env python3
"""Quick GPU smoke test with diagnostics: a few shapes through jitmarlin.linear against a
float64 reference; on a mismatch, prints where the errors sit (rows, 64-column blocks, K)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import jitmarlin  # noqa: E402
from jitmarlin import QuantizedWeight  # noqa: E402
from jitmarlin.weights import halves, packing  # noqa: E402


def weight(n, k, group, act, rng):
    q = rng.integers(0, 16, (n, k), dtype=np.uint8)
    g = 1 if group == -1 else k // group
    s = halves.to_bits(rng.random((g, n), dtype=np.float32) * 0.02 + 0.002, act)
    scales = packing.permute_scales(s) if group != -1 else s.reshape(n)
    qw = QuantizedWeight("uint4b8", group, n, k, packing.pack_int4(q), scales, scale_dtype=act)
    w = (q.astype(np.float64) - 8) * np.repeat(halves.from_bits(s, act).T.astype(np.float64), k // g, axis=1)
    return qw, w


def check(m, n, k, group, act, rng):
    qw, w = weight(n, k, group, act, rng)
    xf = rng.standard_normal((m, k)).astype(np.float32)
    xb = halves.to_bits(xf, act)
    x64 = halves.from_bits(xb, act).astype(np.float64)
    if act == "float16":
        x = cp.asarray(xb.view(np.float16))
    else:
        import torch

        x = torch.from_numpy(xb.view(np.int16)).view(torch.bfloat16).cuda()
    y = jitmarlin.linear(x, qw)
    if act == "float16":
        yh = cp.asnumpy(y).astype(np.float64)
    else:
        yh = y.float().cpu().numpy().astype(np.float64)
    ref = x64 @ w.T
    err = np.linalg.norm(yh - ref) / np.linalg.norm(ref)
    ok = err <= (2e-3 if act == "float16" else 1e-2) and np.isfinite(yh).all()
    print(f"{'ok ' if ok else 'BAD'} m={m} n={n} k={k} g={group} {act}: rel err {err:.2e}", flush=True)
    if not ok:
        bad = ~np.isclose(yh, ref, rtol=0.05, atol=0.05 * np.abs(ref).mean())
        print("   bad fraction", bad.mean(), "nan", np.isnan(yh).sum())
        print("   bad rows   ", np.nonzero(bad.any(1))[0][:40])
        cols = bad.any(0)
        print("   bad 64-col blocks", np.nonzero(cols.reshape(-1, 64).any(1))[0][:40])
        print("   bad cols mod 64  ", np.nonzero(cols.reshape(-1, 64).any(0))[0])
        print("   sample y/ref", yh.ravel()[:6], ref.ravel()[:6])
    return ok


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    ok = True
    for args in [
        (1, 256, 256, 128, "float16"),
        (16, 256, 4096, 128, "float16"),
        (33, 4096, 4096, 64, "float16"),
        (1, 6144, 4096, -1, "float16"),
        (7, 4096, 4096, 32, "bfloat16"),
        (300, 4160, 4096, 128, "float16"),
    ]:
        ok &= check(*args, rng)
    print("SMOKE", "PASS" if ok else "FAIL")
