# Session 22: GPU tests of the Stream-K kernel with the group scale on its sums (tools/PERF.md
# entry 48): prewarm, then tests/test_api.py (and FILES) natively and under each JITMARLIN_EMULATE
# profile in EMU (default t4 = the sm_75 path, rtx-pro-6000 = sm_120's 99 KB of shared memory).
source tools/probe/env.sh 2>/dev/null
EMU=${EMU:-t4 rtx-pro-6000}
t0=$(date +%s)
python3 tools/prewarm_suite.py --profile h100 --emulate "$(echo $EMU | tr ' ' ,)" --jobs 16 2>&1 | tail -1
echo "prewarm $(( $(date +%s) - t0 )) s"
for e in native $EMU; do
  t0=$(date +%s)
  env $([ $e = native ] || echo JITMARLIN_EMULATE=$e) timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_api.py ${FILES:-} -m gpu -q \
    -p no:cacheprovider --maxfail=20 -o addopts="" -rfE > "$OUT/pytest-$e.log" 2>&1
  echo "pytest $e rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'passed|failed' "$OUT/pytest-$e.log" | tail -1)"
  grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -10
done
