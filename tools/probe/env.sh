# Sourced by the probe session scripts on the device: $OUT, the carried wheels (.whl) installed
# to /tmp/site, the carried kernel cache ($CACHE, default .jmcache) copied to /tmp/jmcache.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/jm-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$PWD:/tmp/site"
rm -rf /tmp/jmcache; cp -r "${CACHE:-.jmcache}" /tmp/jmcache
export JITMARLIN_CACHE_DIR=/tmp/jmcache JITMARLIN_TEST_CACHE_DIR=/tmp/jmcache
source "$(dirname "${BASH_SOURCE[0]}")/variant_env.sh"
# The GPU's temperatures before anything runs: a GPU (or its HBM) already hot when idle throttles
# during the session (tools/bench flags the rows; PERF.md, session 14).
nvidia-smi --query-gpu=name,temperature.gpu,temperature.memory,clocks.sm --format=csv,noheader
# MAX_IDLE_C=N: stop here (exit 3) where the GPU or its HBM is hotter than N C before any work
# (checked once a machine: later passes of a session find it warm from the first).
if [ -n "${MAX_IDLE_C:-}" ] && [ ! -e /tmp/jm-idle-checked ]; then
  touch /tmp/jm-idle-checked
  hot=$(nvidia-smi --query-gpu=temperature.gpu,temperature.memory --format=csv,noheader,nounits |
        awk -F', ' -v m="$MAX_IDLE_C" '$1 > m || ($2 ~ /^[0-9]+$/ && $2 > m) {print "hot"}')
  if [ -n "$hot" ]; then echo "GPU hotter than ${MAX_IDLE_C} C when idle: no measurement"; exit 3; fi
fi
# probe_tests_and_ab DEFAULT_FILE: with TESTK set, the GPU tests of tests/${TESTF:-DEFAULT_FILE}
# matching -k "$TESTK"; with VS set, tools/probe/ab_tree.sh. The kernel cache goes back to $CACHE
# after each (a warm machine's next command starts from it).
probe_tests_and_ab() {
  if [ -n "${TESTK:-}" ]; then
    local t0=$(date +%s)
    timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/${TESTF:-$1} -m gpu -k "$TESTK" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
    echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
    cp -r /tmp/jmcache/. "$CACHE"/
  fi
  if [ -n "${VS:-}" ]; then TESTS=0 bash tools/probe/ab_tree.sh; cp -r /tmp/jmcache/. "$CACHE"/; fi
}
