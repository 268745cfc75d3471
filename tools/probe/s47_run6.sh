# Session 47 device run 6: the whole GPU suite under the emulated profiles (JITMARLIN_EMULATE: the
# sm_70 V100 path, the sm_75 T4 path and the sm_120 99 KB path) on main's library, last run in
# session 43 (since then: session 46's four offsets chains in the bf16 raw-code kernels, which the
# sm_120 path plans, and its TMA weight boxes, which the emulated profiles do not plan), all at once.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
for e in ${PROFILES:-v100 rtx-pro-6000 t4}; do
  JITMARLIN_EMULATE=$e timeout ${T:-450} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=25 \
      -o addopts="" -rfE > "$OUT/pytest-$e.log" 2>&1 &
done
wait
echo "all done in $(( $(date +%s) - t0 )) s"
for e in ${PROFILES:-v100 rtx-pro-6000 t4}; do
  echo "== $e: $(grep -E 'passed|failed' $OUT/pytest-$e.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -8
done
