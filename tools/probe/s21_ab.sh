# Session 21 (tools/PERF.md entry 47): gemv with the group scale on the sums. PART=a: the GPU gemv
# tests (TESTS=0: none), then an A/B at MS (default 1,8) in ACT through tools/probe/ab_tree.sh (VS:
# headN = tools/probe/head_tree, newN = the working tree, s-ss_off = the working tree with the scale
# back on the weights, anything else a JM_PROBE_GEMV setting); PART=b: M = 16 with the 16-row gemv
# forced (JM_PROBE_GEMV=pm=16), against Stream-K.
source tools/probe/env.sh 2>/dev/null
if [ "${PART:-a}" = a ]; then
  if [ "${TESTS:-1}" = 1 ]; then
    t0=$(date +%s)
    timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/test_gemv.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE -x > "$OUT/pytest-gemv.log" 2>&1
    echo "pytest gemv rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest-gemv.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest-gemv.log" | head -10
  fi
  TESTS=0 MS=${MS:-1,8} BARGS="--act ${ACT:-float16}" VS="${VS:-head1 new1 s-ss_off head2 new2}" bash tools/probe/ab_tree.sh
else
  VS="${VS:-sk::: hd:pm=16::h new:pm=16:: nss:pm=16:ss_off}" bash tools/probe/gemv16.sh
fi
