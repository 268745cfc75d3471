#!/usr/bin/env python3
"""Is jitmarlin's cuBLAS call (large-M route) as fast as torch's matmul for the same GEMM?
Times (CUDA events, median of 5 x 10 calls) torch x @ W.t() (TN), torch x @ Wt (NN, W stored
K x N) and jitmarlin.cublas.Blas.linear (TN) in fp16 and bf16."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import torch  # noqa: E402

from jitmarlin import cublas  # noqa: E402


def t(fn, reps=10):
    fn()
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1000 / reps)
    return sorted(times)[2]


ws = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
blas = cublas.Blas(ws.data_ptr(), ws.numel())
stream = torch.cuda.current_stream().cuda_stream
for (k, n) in [(4096, 4096), (4096, 28672), (8192, 57344), (28672, 8192)]:
    for m in (1024, 4096):
        for dt, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
            x = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt) * 0.02
            wt = w.t().contiguous()
            out = torch.empty(m, n, device="cuda", dtype=dt)
            a = t(lambda: torch.matmul(x, w.t()))
            b = t(lambda: torch.matmul(x, wt))
            c = t(lambda: blas.linear(stream, name, m, n, k, x.data_ptr(), k, w.data_ptr(), k,
                                      out.data_ptr(), n))
            ref = torch.matmul(x, w.t())
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            print(f"{k}x{n} M={m} {name:8s} torch TN {a:8.1f} us  torch NN {b:8.1f}  jm TN {c:8.1f}"
                  f"  jm/torch {c / a:.3f}  NN/TN {b / a:.3f}  err {err:.1e}", flush=True)
blas.close()
