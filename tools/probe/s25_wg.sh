# Session 25: tests/test_wgmma.py's GPU tests (TESTK: a -k filter), then tools/probe/ab_tree.sh (AB=0: not).
source tools/probe/env.sh
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_wgmma.py -m gpu ${TESTK:+-k "$TESTK"} -q -p no:cacheprovider -o addopts="" -rfE -x > "$OUT/pytest-wgmma.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest-wgmma.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest-wgmma.log" | head -10
[ "${AB:-1}" = 1 ] && TESTS=0 bash tools/probe/ab_tree.sh
