# Session 40 device run 7: the GPU tests of K-tiles of 512 (forced Stream-K and whole kernels, the
# planner's whole decode plans), of raw codes and of the tuner.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
t0=$(date +%s)
PYTHONPATH="$PWD:/tmp/site" timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/test_api.py tests/test_tune.py -m gpu -k "k512 or whole_decode or raw_codes or tune" \
  -q -p no:cacheprovider -o addopts="" -rfE > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/pytest.log; grep -E "^FAILED|^ERROR|^E " $OUT/pytest.log | head -10
