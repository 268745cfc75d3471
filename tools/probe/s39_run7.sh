# Session 39 device run 7: the 128 x 192 and 64 x 192 GPU tests, then the autotuner on 8B qkv at
# M = 256 (its candidates now carry the three-warpgroup tiles; each winner is checked against the
# reference by the tuner's output check).
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_wgmma.py -m gpu -k wide3 -q -p no:cacheprovider -o addopts="" -rfE > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/pytest.log; grep -E "^FAILED|^ERROR|^E " $OUT/pytest.log | head -10
t0=$(date +%s)
timeout ${TUNE_TIMEOUT:-240} python3 -m jitmarlin tune --shapes 4096x6144 --quant uint4b8 --group 128 --act float16,bfloat16 --m ${TUNE_M:-256} --jobs 16 > $OUT/tune.log 2>&1
echo "tune rc=$? in $(( $(date +%s) - t0 )) s"; tail -12 $OUT/tune.log
