# Session 37 device run 7: the whole native GPU suite on the final tree (tail kernels, the 256 x 128
# plans at M <= 256), after a 16-job prewarm: test_wgmma first, then every other file; summaries last.
source tools/probe/env.sh
t0=$(date +%s)
python3 tools/prewarm_suite.py --profile h100 --jobs 16 2>&1 | tail -1
echo "prewarm $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${WG_TIMEOUT:-170} python3 -m pytest tests/test_wgmma.py -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-wgmma.log" 2>&1
r1="wgmma rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'passed|failed' $OUT/pytest-wgmma.log | tail -1)"
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-330} python3 -m pytest tests --ignore=tests/test_wgmma.py -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-native.log" 2>&1
r2="native rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'passed|failed' $OUT/pytest-native.log | tail -1)"
grep -E "^FAILED|^ERROR" "$OUT/pytest-wgmma.log" "$OUT/pytest-native.log" | head -20
echo "$r1"; echo "$r2"
