# Session 40 device run 8: the K-tile-of-512 GPU tests again (the N-tail case on a shape the test
# helper packs), then the run of record (tools/gpu_session.sh, planner only, both dtypes, all peers).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
t0=$(date +%s)
PYTHONPATH="$PWD:/tmp/site" timeout 90 python3 -m pytest tests/test_api.py -m gpu -k "k512" -q -p no:cacheprovider -o addopts="" -rfE > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/pytest.log; grep -E "^FAILED|^ERROR|^E " $OUT/pytest.log | head -10
OUT=$OUT TESTS=0 BENCH_TIMEOUT=${BENCH_TIMEOUT:-470} BENCH_ARGS="--act float16,bfloat16" bash tools/gpu_session.sh
