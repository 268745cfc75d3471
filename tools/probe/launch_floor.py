#!/usr/bin/env python3
"""What a kernel launch costs inside a CUDA graph on this GPU (the part of a decode call's time no
kernel change removes): N launches of an empty kernel (1 block, and 132 blocks of 512 threads,
and clusters of 2) captured in one graph, replayed; microseconds a launch."""
import cupy as cp

SRC = r'''
extern "C" __global__ void empty(int* p) { if (p && threadIdx.x == 1234567) p[0] = 1; }
extern "C" __global__ void __cluster_dims__(2, 1, 1) empty_cl(int* p) { if (p && threadIdx.x == 1234567) p[0] = 1; }
'''
mod = cp.RawModule(code=SRC, options=("-arch=sm_90",))
s = cp.cuda.Stream(non_blocking=True)
for name, grid, block in (("empty", 1, 32), ("empty", 132, 512), ("empty_cl", 132, 512)):
    f = mod.get_function(name)
    n = 200
    with s:
        f((grid,), (block,), (cp.uint64(0),))
        s.synchronize()
        s.begin_capture()
        for _ in range(n):
            f((grid,), (block,), (cp.uint64(0),))
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        best = 1e9
        for _ in range(5):
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(e0, e1) * 1e3 / n)
    print(f"launch floor {name:9s} grid {grid:4d} x {block:4d}: {best:.2f} us a launch (graph of {n})")
