# Session 43 device run 3: the GPU test files the H200 had not run on the current library code
# (tests/test_api.py, test_gemv.py, test_tune.py natively; session 42 ran test_dequant_route.py and
# test_wgmma.py), and the whole GPU suite under the emulated profiles (JITMARLIN_EMULATE: the sm_70
# V100 path, the sm_75 T4 path and the sm_120 99 KB path), last run in session 38, all at once.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout ${T:-540} python3 -m pytest tests/test_api.py tests/test_gemv.py tests/test_tune.py -m gpu -q \
    -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-native.log" 2>&1 &
for e in ${PROFILES:-v100 rtx-pro-6000 t4}; do
  JITMARLIN_EMULATE=$e timeout ${T:-540} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=25 \
      -o addopts="" -rfE > "$OUT/pytest-$e.log" 2>&1 &
done
wait
echo "all done in $(( $(date +%s) - t0 )) s"
for e in native ${PROFILES:-v100 rtx-pro-6000 t4}; do
  echo "== $e: $(grep -E 'passed|failed' $OUT/pytest-$e.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -8
done
