#!/usr/bin/env bash
# Session 32: Nsight Compute stall metrics of the decode kernel under probe settings, one line a
# variant: VS="name=ENV[+ENV...] ..." as in env_ab.sh; NCU_SHAPES (KxN list), NCU_M (default 1).
export CACHE=${CACHE:-/tmp/jmc-ncu}; mkdir -p $CACHE
source tools/probe/env.sh >/dev/null
M=gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.avg,launch__registers_per_thread,dram__bytes_read.sum
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
for r in long_scoreboard barrier wait lg_throttle short_scoreboard mio_throttle no_instruction math_pipe_throttle not_selected selected membar sleeping branch_resolving dispatch_stall drain imc_miss tex_throttle; do
  M=$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
for v in $VS; do
  tag=${v%%=*}; envs=${v#*=}
  echo "== $tag"
  env ${envs//+/ } timeout 150 ncu --clock-control none -k regex:^jm_ --launch-skip 1 --launch-count 1 --metrics $M \
      python3 tools/probe/variant_bench.py probe/ncu_gemm.py --no-cublas --m ${NCU_M:-1} --shapes ${NCU_SHAPES:-8192x10240} --calls 2 ${NCU_ARGS:-} 2>&1 \
      | grep -E "^  jm_|duration|inst_executed|cycles_active|registers|bytes_read|stalled|issue_active|throughput|==ERR|rror" \
      | sed -e 's/smsp__average_warps_issue_stalled_//' -e 's/_per_issue_active.ratio//'
done
