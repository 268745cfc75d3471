# Device session: prewarm every kernel the GPU test suite needs (native h100 and the emulated
# profiles in EMU, default rtx-pro-6000) with 16 parallel NVRTC jobs, then the native GPU suite
# and the emulated ones. Output under $OUT (pytest*.log).
source tools/probe/env.sh 2>/dev/null
t0=$(date +%s)
# EMU=none: native only (no emulated profile prewarmed or run)
EMU=${EMU:-rtx-pro-6000}; [ "$EMU" = none ] && EMU=""
python3 tools/prewarm_suite.py --profile h100 ${EMU:+--emulate ${EMU// /,}} --jobs 16 2>&1 | tail -2
echo "prewarm $(( $(date +%s) - t0 )) s"
# PART: all (default), api (tests/test_api.py alone, ~45 s on H100) or rest (the other files,
# ~290 s, then the emulated profiles, ~90 s): with the prewarm, all of it is near the 600 s that
# one device command may take (session 19: the native suite alone ran past 390 s).
case ${PART:-all} in api) FILES=tests/test_api.py ;; rest) FILES="tests --ignore=tests/test_api.py" ;; *) FILES=tests ;; esac
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-330} python3 -m pytest $FILES -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-${PART:-all}.log" 2>&1
echo "pytest ${PART:-all} rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error" "$OUT/pytest-${PART:-all}.log" | tail -2; grep -E "^FAILED|^ERROR" "$OUT/pytest-${PART:-all}.log" | head -20
[ "${PART:-all}" = api ] && exit 0
for e in $EMU; do
  t0=$(date +%s)
  JITMARLIN_EMULATE=$e timeout ${EMU_TIMEOUT:-150} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-$e.log" 2>&1
  echo "pytest EMULATE=$e rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed" "$OUT/pytest-$e.log" | tail -1; grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -10
done
