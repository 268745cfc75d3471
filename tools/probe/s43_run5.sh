# Session 43 device run 5, run from branch wip/gemv-raw (where GemvSpec.raw and the probe knob
# JM_PROBE_GEMV_RAW live): raw codes in the gemv kernel (the codes' offsets out of each group's sums
# by one more MMA a k16 row, no packed arithmetic a weight) against head at M = 1 and 8 on the eight
# bench layers, both dtypes (run 4: on the H200 the gemv's arithmetic costs 2-12 us at M = 1); SASS
# counts; then its GPU test.
source tools/probe/env.sh > /dev/null
for act in float16 bfloat16; do for v in 0 1; do
  echo "sass $act raw=$v: $(JM_PROBE_GEMV_RAW=$v python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 10240 --act $act 2>&1 | tail -1)"
done; done
for ms in ${MSS:-1 8}; do
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=$ms BARGS="--act float16,bfloat16 --shapes ${SHAPES:-all}" \
  VS="${VS:-head= raw=JM_PROBE_GEMV_RAW=1 head2= raw2=JM_PROBE_GEMV_RAW=1}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m$ms.txt; grep -v "^ *$" /tmp/a.txt | tail -17
rm -f $OUT/ab-*.log $OUT/ab-*.json
done
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_gemv.py -m gpu -k "raw_code" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
