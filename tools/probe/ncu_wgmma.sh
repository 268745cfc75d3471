#!/usr/bin/env bash
# Nsight Compute sections (speed of light, compute, memory, warp state, occupancy) of the
# planner's kernels at M in NCU_M (default 256 64) on NCU_SHAPES (KxN, default 70B gate_up).
source tools/probe/env.sh
for m in ${NCU_M:-256 64}; do
  echo "== M=$m"
  timeout 150 ncu --clock-control none -k regex:^jm_ --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      python3 tools/probe/ncu_gemm.py --no-cublas --shapes ${NCU_SHAPES:-8192x57344} --m $m --calls 1 > "$OUT/ncu-m$m.txt" 2>&1
  echo "rc=$?"
  grep -E "^  jm_|Duration|Throughput|Busy|Pipe|Hit Rate|Bandwidth|Stall|Warp Cycles|Issued|Registers|Achieved|Block Limit|Mem Busy|Max Band" "$OUT/ncu-m$m.txt" | head -60
done
