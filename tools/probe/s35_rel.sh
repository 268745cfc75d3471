# Session 35 device run: split-tile contributors counted in by one release (PERF.md entry 72) in
# both Stream-K kernels. GPU tests of test_wgmma and of test_api's Stream-K cases (TESTS=1), then
# an A/B of tools/bench rows against main before the change (tools/probe/head_tree; carry it).
mkdir -p .jmcache
source tools/probe/env.sh
if [ "${TESTS:-1}" = 1 ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests/test_wgmma.py ${TESTX:-} -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest.log)"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
fi
if [ -n "${VS:-}" ]; then
  MS=${MS:-16,256,1024} BARGS="${BARGS:---act float16}" TESTS=0 bash tools/probe/ab_tree.sh
  python3 tools/probe/ab_table.py "$OUT" $VS
fi
