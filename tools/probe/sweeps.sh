#!/usr/bin/env bash
# Device session for sweeps only: environment as tools/probe/ab.sh, then one tools/sweep run per
# argument string in SWEEPS (separated by ';'), each printed and saved as $OUT/sweep-<i>.json.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/jm-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$PWD:/tmp/site"
rm -rf /tmp/jmcache; cp -r ${CACHE:-.jmcache} /tmp/jmcache
export JITMARLIN_CACHE_DIR=/tmp/jmcache
i=0
IFS=';' read -ra runs <<< "$SWEEPS"
for args in "${runs[@]}"; do
  i=$((i + 1)); t0=$(date +%s)
  timeout ${SWEEP_TIMEOUT:-250} python3 tools/sweep --json "$OUT/sweep-$i.json" $args 2>&1 | grep -v "compiled\|cache hit"
  echo "sweep $i rc=$? in $(( $(date +%s) - t0 )) s"
done
