# Session 46 device run 6 (branch wip/sk-bulk, the planner's bulk rule and four offsets chains in the
# library): the GPU tests that run decode plans of the mma.sync kernel natively on this sm_90 GPU
# (the new test_bulk_weight_boxes_match_reference, raw codes, K-tiles of 512, whole and late plans,
# every linear() case, the autotuner's, now with bulk candidates).
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout 400 python3 -m pytest tests/test_api.py tests/test_tune.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE \
  -k "bulk or raw_codes or k512 or whole_decode or late or decode or tune or linear_matches" > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/pytest.log; grep -E "^FAILED|^ERROR|^E " $OUT/pytest.log | head -20
