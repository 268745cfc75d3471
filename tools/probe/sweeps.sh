#!/usr/bin/env bash
# Device session for sweeps only: environment as tools/probe/ab.sh, then one tools/sweep run per
# argument string in SWEEPS (separated by ';'), each printed and saved as $OUT/sweep-<i>.json.
set -u
source "$(dirname "$0")/env.sh"
i=0
IFS=';' read -ra runs <<< "$SWEEPS"
for args in "${runs[@]}"; do
  i=$((i + 1)); t0=$(date +%s)
  timeout ${SWEEP_TIMEOUT:-250} python3 tools/sweep --json "$OUT/sweep-$i.json" $args 2>&1 | grep -v "compiled\|cache hit"
  echo "sweep $i rc=$? in $(( $(date +%s) - t0 )) s"
done
