# Session 49 device run 7 (two H200s): the launchers make their device current (moved from
# linear()'s torch path; the dequant route's kernels too): the two-GPU tests, the torch-facing GPU
# tests of test_api.py and test_torch.py (run 3's), then test_dequant_route.py.
source tools/probe/env.sh > /dev/null
bash tools/probe/s49_run3.sh 2>&1 | grep -v "^GPU\|cannot stat"
t0=$(date +%s)
timeout 200 python3 -m pytest tests/test_dequant_route.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest-route.log" 2>&1
echo "dequant route tests rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest-route.log)"
grep -E "^FAILED|^ERROR" "$OUT/pytest-route.log" | head -10
