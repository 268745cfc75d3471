#!/usr/bin/env bash
# ncu metrics of the decode kernels per source variant (after tools/probe/ab.sh set up the env).
export PYTHONPATH="$PWD:/tmp/site" JITMARLIN_CACHE_DIR=/tmp/jmcache
source "$(dirname "$0")/variant_env.sh"
M=gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.avg,launch__registers_per_thread,dram__bytes_read.sum
for r in long_scoreboard barrier wait lg_throttle short_scoreboard mio_throttle no_instruction; do
  M=$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
for v in ${NCU_VARIANTS:-head new}; do
  variant_env $v
  echo "== $v"
  env "${env[@]}" timeout 120 ncu --clock-control none -k regex:^jm_ --metrics $M \
      python3 tools/probe/variant_bench.py probe/ncu_gemm.py --no-cublas --m 1 --shapes ${NCU_SHAPES:-14336x4096,8192x57344} --calls 1 2>&1 \
      | grep -E "^  jm_|duration|inst_executed|cycles_active|registers|bytes_read|stalled" | sed -e 's/smsp__average_warps_issue_stalled_//' -e 's/_per_issue_active.ratio//'
done
