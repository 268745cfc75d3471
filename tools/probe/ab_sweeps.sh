#!/usr/bin/env bash
# Device session: environment as tools/probe/ab.sh; the GPU tests of test_wgmma, test_api and
# test_tune (TESTS=0 skips them); then one tools/sweep run per entry of SWEEPS (';'-separated,
# each "VARIANT ARGS", VARIANT as in env.sh's variant_env), printed and saved as
# $OUT/sweep-<i>-<variant>.json.
set -u
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
t0=$(date +%s)
[ "${TESTS:-1}" = 1 ] && timeout 200 python3 -m pytest tests/test_wgmma.py tests/test_api.py tests/test_tune.py -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error" "$OUT/pytest.log" | tail -2; grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -20
i=0
IFS=';' read -ra runs <<< "$SWEEPS"
for args in "${runs[@]}"; do
  i=$((i + 1)); t0=$(date +%s)
  v=${args%% *}; args=${args#* }
  variant_env $v
  env "${env[@]}" timeout ${SWEEP_TIMEOUT:-200} python3 tools/probe/variant_bench.py sweep --json "$OUT/sweep-$i-$v.json" --target-ms 5 --top 4 $args > "$OUT/sweep-$i-$v.log" 2>&1
  echo "sweep $i $v rc=$? in $(( $(date +%s) - t0 )) s"; grep -v "compiled\|cache hit" "$OUT/sweep-$i-$v.log" | cut -c1-220 | tail -30
done
