# Session 36 device run 3: GPU tests of the wgmma kernel (half-tile plans through the workspace
# and in clusters of two), then A/B of the half-tile plans: none (off), sums through L2 (l2),
# sums through distributed shared memory (dsm, the working tree's default).
mkdir -p .jmcache
source tools/probe/env.sh
if [ "${TESTS:-1}" = 1 ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests/test_wgmma.py ${TESTX:-} -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest.log)"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
fi
MS=${MS:-256,1024} BARGS="${BARGS:---act float16,bfloat16 --shapes 4096x4096,14336x4096,28672x8192,4096x6144}" \
VS="${VS:-off=JM_PROBE_HALVES=off l2=JM_PROBE_HALVES=l2 dsm= off2=JM_PROBE_HALVES=off l22=JM_PROBE_HALVES=l2 dsm2=}" \
  bash tools/probe/env_ab.sh
