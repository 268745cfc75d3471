# Session 37 device run 7: the whole native GPU suite on the final tree (tail kernels, the 256 x 128
# plans at M <= 256), after a 16-job prewarm; summaries last.
source tools/probe/env.sh
t0=$(date +%s)
python3 tools/prewarm_suite.py --profile h100 --jobs 16 2>&1 | tail -1
echo "prewarm $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-500} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-native.log" 2>&1
r="native rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'passed|failed' $OUT/pytest-native.log | tail -1)"
grep -E "^FAILED|^ERROR" "$OUT/pytest-native.log" | head -20
echo "$r"
