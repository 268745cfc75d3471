# Session 42 device run 1: the M = 64 gate_up rows of (f) (bf16 / fp16 1.05-1.06): what the bf16
# dequantisation's two extra shifts cost (bf_1sh, timing only) and what x's traffic costs (x_half,
# timing only), A/B/A; then the dequant-route GPU tests (not run in session 41).
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=${MS:-64} BARGS="--act float16,bfloat16 --shapes ${SHAPES:-4096x28672,8192x57344,8192x10240}" \
  VS="${VS:-head= bf1=JM_PROBE_SUB=bf_1sh xh=JM_PROBE_SUB=x_half head2= bf1b=JM_PROBE_SUB=bf_1sh}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -20
rm -f $OUT/ab-*.log
if [ -n "${TESTF:-}" ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/$TESTF -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
  echo "pytest $TESTF rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -10
fi
