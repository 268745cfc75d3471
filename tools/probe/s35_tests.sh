# Session 35 device run: the GPU tests that tools/probe/suite.sh's PART=rest did not reach in its
# time (FILES), then test_api's whole-tile decode cases on an emulated V100; summaries last.
source tools/probe/env.sh
python3 tools/prewarm_suite.py --profile h100 --emulate v100 --jobs 16 2>&1 | tail -1
FILES=${FILES:-"tests/test_gemv.py tests/test_launch.py tests/test_torch.py tests/test_tune.py tests/test_wgmma.py"}
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-450} python3 -m pytest $FILES -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest-files.log" 2>&1
r1="files rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest-files.log)"
JITMARLIN_EMULATE=v100 timeout 100 python3 -m pytest tests/test_api.py -k whole_decode -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest-v100.log" 2>&1
r2="v100 whole_decode rc=$?: $(tail -1 $OUT/pytest-v100.log)"
grep -E "^FAILED|^ERROR" "$OUT"/pytest-*.log | head -20
echo "$r1"; echo "$r2"
