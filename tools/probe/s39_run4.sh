# Session 39 device run 4: the GPU tests of the 128 x 192 tiles and of the cluster / tail / tall
# kernels whose template changed, then 8B qkv at M = 192 / 256 / 512 with the planner's rule
# (planner._wide3) against the tiles it took before (JM_PROBE_WIDE3=off), both dtypes.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/test_wgmma.py -m gpu -k "${TESTK:-wide3 or tall_unsplit or short_row or half}" -q -p no:cacheprovider -o addopts="" -rfE > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/pytest.log; grep -E "^FAILED|^ERROR|^E " $OUT/pytest.log | head -10
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=${MS:-192,256,512} BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="off=JM_PROBE_WIDE3=off wide3= off2=JM_PROBE_WIDE3=off wide3b=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -8; rm -f $OUT/ab-*.log
