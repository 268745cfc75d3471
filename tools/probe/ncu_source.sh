#!/usr/bin/env bash
# Nsight Compute warp-stall sampling per SASS instruction of the jm_ kernels that
# tools/probe/ncu_gemm.py launches (one profile per argument string), exported as CSV for
# tools/probe/stall_regions.py. V = a source variant of variant_env.sh (default: the working tree).
source "$(dirname "$0")/env.sh"
variant_env ${V:-new}
i=0
for args in "${@}"; do
  i=$((i + 1))
  timeout 300 env "${env[@]}" ncu --clock-control none -k "regex:^jm_" -c 1 --section SourceCounters \
      --section WarpStateStats -f -o /tmp/src$i python3 tools/probe/variant_bench.py probe/ncu_gemm.py --no-cublas $args > /tmp/src$i.log 2>&1
  echo "profile $i ($args) rc=$?"
  ncu -i /tmp/src$i.ncu-rep --page source --csv --print-source sass > "$OUT/src$i.csv" 2> /tmp/src$i.err
  echo "export rc=$? lines $(wc -l < $OUT/src$i.csv)"; head -c 600 "$OUT/src$i.csv"; echo; tail -2 /tmp/src$i.err
done
