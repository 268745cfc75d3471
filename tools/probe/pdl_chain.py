#!/usr/bin/env python3
"""What programmatic dependent launch (linear(enable_pdl=True)) saves a decode GEMM behind another
kernel, measured without letting a GEMM overlap the GEMM before it (tools/bench's per-call figure).

Each step of a CUDA graph is a short kernel that writes x (an RMSNorm-like elementwise product of
a hidden state and a gain, the kind of kernel ahead of qkv and gate_up in a decoder layer) and then
the GEMM reading x, weights rotated past 4x L2 as in tools/bench. The kernel ahead is torch's mul
('torch'), or a raw kernel doing the same that lets its dependents launch at its start
(griddepcontrol.launch_dependents, as PDL-aware kernels do: 'trigger'). Times per step (us, graph
replay, median of 5): the kernel ahead alone, the GEMM alone (and, for reference only, the GEMM
alone with PDL: each call behind the previous GEMM, the overlap tools/bench keeps out), and the
pair with the GEMM launched without and with PDL. The GEMM's results with PDL are checked
against those without.
    python3 tools/probe/pdl_chain.py [--shapes all] [--m 1,16] [--act float16] [--json FILE]"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from benchlib import select_shapes  # noqa: E402

import jitmarlin  # noqa: E402
from jitmarlin.jit.profiles import live_profile  # noqa: E402
from jitmarlin.service.bench import Timer, copies_needed, random_weights  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="all")
ap.add_argument("--m", default="1,16")
ap.add_argument("--act", default="float16")
ap.add_argument("--group", type=int, default=128)
ap.add_argument("--target-ms", type=float, default=20.0)
ap.add_argument("--json", default="")
a = ap.parse_args()

import torch  # noqa: E402

dev = torch.cuda.current_device()
l2 = live_profile(dev).l2_bytes
dt = getattr(torch, a.act)
timer = Timer(torch, a.target_ms)
rows = []
SRC = r"""
#include <cuda_fp16.h>
extern "C" __global__ void scale_rows(const __half* h, const __half* gain, __half* x, int k, int n, int trigger) {
  if (trigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __hmul(h[i], gain[i % k]);
}
"""
import cupy  # noqa: E402

raw = cupy.RawKernel(SRC, "scale_rows")
print(f"# {torch.cuda.get_device_name(dev)}, {a.act}, group {a.group}; us per step")
print(
    f"{'layer':20s} {'M':>4s} {'ahead':>7s} {'ahead':8s} {'GEMM':>7s} {'GEMM PDL':>8s} {'pair':>7s} {'pair PDL':>8s} {'saved':>6s}"
)
for name, (k, n) in select_shapes(a.shapes).items():
    g = a.group
    qws = random_weights(n, k, g, a.act, copies_needed(n * k // 2 + n * (k // g) * 2, l2))
    for m in map(int, a.m.split(",")):
        h = torch.randn(m, k, device="cuda", dtype=dt)
        gain = torch.rand(k, device="cuda", dtype=dt) + 0.5
        x = torch.empty(m, k, device="cuda", dtype=dt)
        out = torch.empty(m, n, device="cuda", dtype=dt)

        def ahead_torch():
            torch.mul(h, gain, out=x)

        def ahead_raw(trigger):
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                raw(
                    ((m * k + 255) // 256,),
                    (256,),
                    (
                        h.data_ptr(),
                        gain.data_ptr(),
                        x.data_ptr(),
                        cupy.int32(k),
                        cupy.int32(m * k),
                        cupy.int32(trigger),
                    ),
                )

        aheads = (
            {"torch": ahead_torch} if a.act != "float16" else {"torch": ahead_torch, "trigger": lambda: ahead_raw(1)}
        )
        t_gemm = timer([lambda q=q: jitmarlin.linear(x, q, out=out, enable_pdl=False) for q in qws])
        t_gemm_pdl = timer([lambda q=q: jitmarlin.linear(x, q, out=out, enable_pdl=True) for q in qws])
        ahead_torch()
        ref = jitmarlin.linear(x, qws[0], enable_pdl=False).float()
        got = jitmarlin.linear(x, qws[0], enable_pdl=True).float()
        torch.cuda.synchronize()
        same = bool(torch.equal(ref, got))
        kern = sorted({lz.plan.spec.name for key, lz in qws[0]._launchers.items() if key[2] == m})
        for which, ahead in aheads.items():
            t_ahead = timer([ahead])
            pair = {}
            for pdl in (False, True):
                pair[pdl] = timer(
                    [lambda q=q, p=pdl: (ahead(), jitmarlin.linear(x, q, out=out, enable_pdl=p)) for q in qws]
                )
            row = {
                "shape": name,
                "K": k,
                "N": n,
                "M": m,
                "act": a.act,
                "ahead": which,
                "ahead_us": round(t_ahead, 2),
                "gemm_us": round(t_gemm, 2),
                "gemm_pdl_us": round(t_gemm_pdl, 2),
                "pair_us": round(pair[False], 2),
                "pair_pdl_us": round(pair[True], 2),
                "saved_us": round(pair[False] - pair[True], 2),
                "same_result": same,
                "kernel": "/".join(kern),
            }
            rows.append(row)
            print(
                f"{name:20s} {m:4d} {t_ahead:7.2f} {which:8s} {t_gemm:7.2f} {t_gemm_pdl:8.2f} {pair[False]:7.2f} "
                f"{pair[True]:8.2f} {pair[False] - pair[True]:6.2f}  {row['kernel'].replace('jm_', '')}"
                f"{'' if same else '  RESULTS DIFFER'}",
                flush=True,
            )
if a.json:
    with open(a.json, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(dev), "rows": rows}, f, indent=1)
