# Session 39 device run 6: every GPU test of tests/test_wgmma.py on the final tree (the template
# renders every wgmma kernel anew: three-warpgroup tiles, token-half cluster trade).
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests/test_wgmma.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/pytest.log; grep -E "^FAILED|^ERROR|^E " $OUT/pytest.log | head -10
