# Session 36 device run 4: the native GPU suite on the final kernels, every file but test_wgmma
# (run 3 ran its 50 GPU tests on this tree), after a 16-job prewarm; summaries last.
source tools/probe/env.sh
t0=$(date +%s)
python3 tools/prewarm_suite.py --profile h100 --jobs 16 2>&1 | tail -1
echo "prewarm $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-470} python3 -m pytest tests --ignore=tests/test_wgmma.py -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-native.log" 2>&1
r="native rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'passed|failed' $OUT/pytest-native.log | tail -1)"
grep -E "^FAILED|^ERROR" "$OUT/pytest-native.log" | head -20
echo "$r"
