# Session 38 device run 3: the GPU suite under the emulated profiles (JITMARLIN_EMULATE: the sm_70
# V100 path and the sm_120 99 KB path on the H100), both at once, then their summaries.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
for e in ${PROFILES:-v100 rtx-pro-6000 t4}; do
  JITMARLIN_EMULATE=$e timeout ${T:-520} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=25 \
      -o addopts="" -rfE > "$OUT/pytest-$e.log" 2>&1 &
done
wait
echo "all done in $(( $(date +%s) - t0 )) s"
for e in ${PROFILES:-v100 rtx-pro-6000 t4}; do
  echo "== $e: $(grep -E 'passed|failed' $OUT/pytest-$e.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -8
done
