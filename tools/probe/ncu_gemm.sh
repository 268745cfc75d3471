#!/usr/bin/env bash
# Nsight Compute: tensor-pipe share, clock, issue and shared-memory load of the jm_ kernels and of
# the fp16 cuBLAS kernel on the same shapes (tools/probe/ncu_gemm.py; NCU_ARGS = its arguments);
# metrics this ncu does not know are dropped (listed as missing). V = a source variant of
# variant_env.sh (default: the working tree).
source tools/probe/env.sh
variant_env ${V:-new}
M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.per_cycle_active"
ncu --version | tail -1
ncu --query-metrics --chip gh100 > $OUT/q.txt 2>&1
KEEP=""
for m in ${M//,/ }; do b=${m%%.*}; if grep -q "^$b " $OUT/q.txt; then KEEP="$KEEP,$m"; else echo "missing $b"; fi; done
M=${KEEP#,}
timeout 400 env "${env[@]}" ncu --clock-control none -k "regex:^jm_|nvjet|gemm|xmma|cutlass" --metrics "$M" python3 tools/probe/variant_bench.py probe/ncu_gemm.py ${NCU_ARGS:---shapes 4096x28672,4096x6144 --m 64,256,1024,4096} > $OUT/ncu1.txt 2>&1
echo rc=$?
python3 - $OUT/ncu1.txt <<'PY'
import re,sys
cur=None
for line in open(sys.argv[1]):
    if re.match(r"\s+\S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line):
        cur=line.strip().split("(")[0][:60]; print("==",cur)
    m=re.match(r"\s+(\S+)\s+(\S+)\s+([\d.,]+)\s*$", line)
    if m and cur: print("   ",m.group(1)[:70],m.group(3))
    if "done" in line: print(line.strip())
PY
