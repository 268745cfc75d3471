#!/usr/bin/env bash
# Nsight Compute on one source variant (variant_env V) of the jm_ kernel tools/probe/ncu_gemm.py
# launches: the tensor-pipe / issue metrics of ncu_gemm.sh and per-instruction warp-stall sampling
# (CSV for tools/probe/stall_regions.py). V=variant, NCU_ARGS=ncu_gemm.py's arguments.
source "$(dirname "$0")/env.sh"
V=${V:-new}; variant_env $V; F=${V//+/_}   # $OUT names without "+"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
env "${env[@]}" timeout 200 ncu --clock-control none -k "regex:^jm_" --metrics "$M" \
    python3 tools/probe/variant_bench.py probe/ncu_gemm.py --no-cublas ${NCU_ARGS} > $OUT/ncu-$F.txt 2>&1
echo "metrics rc=$?"; grep -E "jm_|pct|duration|per_second|issue" $OUT/ncu-$F.txt | head -40
env "${env[@]}" timeout 300 ncu --clock-control none -k "regex:^jm_" -c 1 --section SourceCounters --section WarpStateStats -f \
    -o /tmp/srcv python3 tools/probe/variant_bench.py probe/ncu_gemm.py --no-cublas ${NCU_ARGS} > /tmp/srcv.log 2>&1
echo "sampling rc=$?"
ncu -i /tmp/srcv.ncu-rep --page source --csv --print-source sass > "$OUT/src-$F.csv" 2>/dev/null
python3 tools/probe/stall_regions.py "$OUT/src-$F.csv" --top 25
