# Session 28: hybrid wgmma plans. TESTK: a -k filter of tests/test_wgmma.py's GPU tests (empty: none);
# then tools/probe/ab_tree.sh with VS / MS / BARGS. The kernel cache persists in /tmp/jmc-s28 between
# the commands of one warm machine (env.sh rebuilds /tmp/jmcache from $CACHE each time).
export CACHE=/tmp/jmc-s28; mkdir -p $CACHE
source tools/probe/env.sh
if [ -n "${TESTK:-}" ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/${TESTF:-test_wgmma.py} -m gpu -k "$TESTK" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
  cp -r /tmp/jmcache/. $CACHE/
fi
if [ -n "${VS:-}" ]; then TESTS=0 bash tools/probe/ab_tree.sh; cp -r /tmp/jmcache/. $CACHE/; fi
