# Session 49 device run 3 (two H200s): after the fix (a torch x on a GPU that is not current makes
# that GPU current for the launch, as CuPy arrays already did), the two-GPU tests again, then the
# torch-facing GPU tests of test_api.py (every torch case, graphs, streams, PDL) and test_torch.py.
source tools/probe/env.sh > /dev/null
NO_EMU=1 bash tools/probe/s49_run2.sh | grep -v "^GPU"
t0=$(date +%s)
timeout ${T:-300} python3 -m pytest tests/test_api.py tests/test_torch.py -m gpu -k "torch or graph or stream or pdl or capture" \
    -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest-torch.log" 2>&1
echo "torch-facing tests rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest-torch.log)"
grep -E "^FAILED|^ERROR" "$OUT/pytest-torch.log" | head -10
