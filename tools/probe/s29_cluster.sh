# Session 29: decode plans through thread-block clusters. The capacities of every cluster size
# (tools/probe/clusters.py), the GPU test of the cluster kernels (TESTK, test_api.py), then
# tools/probe/ab_tree.sh with VS / MS / BARGS (c-LOAD[_N]: planner.CLUSTER_DECODE with that
# CLUSTER_MAX_LOAD). Kernel cache kept in /tmp/jmc-s29 on a warm machine.
export CACHE=/tmp/jmc-s29; mkdir -p $CACHE
source tools/probe/env.sh
[ "${CAPS:-1}" = 1 ] && python3 tools/probe/clusters.py
if [ -n "${TESTK:-}" ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/${TESTF:-test_api.py} -m gpu -k "$TESTK" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
  cp -r /tmp/jmcache/. $CACHE/
fi
if [ -n "${VS:-}" ]; then TESTS=0 bash tools/probe/ab_tree.sh; cp -r /tmp/jmcache/. $CACHE/; fi
