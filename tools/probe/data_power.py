#!/usr/bin/env python3
"""Does the data itself change GEMM speed on this GPU? Times the same GEMMs (tools/bench's timer:
graph replay, weights rotated past L2) with inputs drawn two ways:
  full   x ~ randn and cuBLAS's W ~ 0.02 randn in fp16, scales random in fp16 (tools/bench's fp16 pass);
  bfval  the same draws rounded to bf16 first, so fp16 and bf16 hold exactly the same numbers.
Columns: cuBLAS fp16 (full, bfval), cuBLAS bf16 (bfval), jitmarlin fp16 (full, bfval), jitmarlin
bf16 (bfval). The six are timed in turn, ROUNDS rounds; a line per row gives each one's median
[range] and the medians of the round-by-round ratios."""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import torch  # noqa: E402

import jitmarlin  # noqa: E402
from jitmarlin.bench import Timer, copies_needed, random_weights  # noqa: E402
from jitmarlin.profiles import live_profile  # noqa: E402

SHAPES = {"8B down": (14336, 4096), "70B o": (8192, 8192), "8B gate_up": (4096, 28672)}
G = 128
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def main():
    torch.manual_seed(0)
    l2 = live_profile(0).l2_bytes
    timer = Timer(torch, 20.0, stream=torch.cuda.Stream())
    ms = [int(m) for m in (sys.argv[1] if len(sys.argv) > 1 else "1024,4096").split(",")]
    for name, (k, n) in SHAPES.items():
        nc = copies_needed(n * k * 2, l2)
        wf = [torch.randn(n, k, device="cuda") * 0.02 for _ in range(nc)]
        w_full = [w.half() for w in wf]
        w_bfv = [w.bfloat16().half() for w in wf]
        w_bf = [w.bfloat16() for w in wf]
        del wf
        qc = copies_needed(n * k // 2, l2)
        q_full = random_weights(n, k, G, "float16", qc)
        q_bfv = random_weights(n, k, G, "float16", qc, shared_values=True)
        q_bf = random_weights(n, k, G, "bfloat16", qc, shared_values=True)
        for m in ms:
            x32 = torch.randn(m, k, device="cuda")
            x_full, x_bfv, x_bf = x32.half(), x32.bfloat16().half(), x32.bfloat16()
            oh = torch.empty(m, n, device="cuda", dtype=torch.float16)
            ob = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            cases = {
                "cublas16 full": [lambda w=w: torch.matmul(x_full, w.t(), out=oh) for w in w_full],
                "cublas16 bfval": [lambda w=w: torch.matmul(x_bfv, w.t(), out=oh) for w in w_bfv],
                "cublasbf bfval": [lambda w=w: torch.matmul(x_bf, w.t(), out=ob) for w in w_bf],
                "jm16 full": [lambda q=q: jitmarlin.linear(x_full, q, out=oh) for q in q_full],
                "jm16 bfval": [lambda q=q: jitmarlin.linear(x_bfv, q, out=oh) for q in q_bfv],
                "jmbf bfval": [lambda q=q: jitmarlin.linear(x_bf, q, out=ob) for q in q_bf],
            }
            res = {c: [] for c in cases}
            for _ in range(ROUNDS):
                for c, fns in cases.items():
                    res[c].append(timer(fns))

            def ratio(a, b):   # median of the round-by-round ratios (same round: similar clocks)
                return statistics.median(x / y for x, y in zip(res[a], res[b]))

            cells = "  ".join(f"{c} {statistics.median(v):7.1f} [{min(v):.0f}-{max(v):.0f}]" for c, v in res.items())
            print(f"{name:10s} M={m:5d}  {cells}  | cublas16 bfval/full {ratio('cublas16 bfval', 'cublas16 full'):.3f}"
                  f"  jm16 bfval/full {ratio('jm16 bfval', 'jm16 full'):.3f}"
                  f"  jmbf/jm16 same values {ratio('jmbf bfval', 'jm16 bfval'):.3f}"
                  f"  jmbf/jm16 own values {ratio('jmbf bfval', 'jm16 full'):.3f}", flush=True)


if __name__ == "__main__":
    main()
