# Session 49 device run 5 (one H200): test_api.py (three parts), test_dequant_route.py, test_tune.py
# and test_torch.py natively on the final tree (fb4b3fe's launch fix: launch.current_device in the
# CuPy path, the torch path and the dequant route), four processes at once.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
run() { timeout ${T:-300} python3 -m pytest "$@" -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE; }
run tests/test_api.py -k "linear and not bf" > "$OUT/pytest-native-api.log" 2>&1 &
run tests/test_api.py -k "linear and bf" > "$OUT/pytest-native-api2.log" 2>&1 &
run tests/test_api.py -k "not linear" > "$OUT/pytest-native-api3.log" 2>&1 &
run tests/test_dequant_route.py tests/test_tune.py tests/test_torch.py > "$OUT/pytest-native-route.log" 2>&1 &
wait
echo "all done in $(( $(date +%s) - t0 )) s"
for f in api api2 api3 route; do
  echo "== $f: $(grep -E 'passed|failed|no tests ran' $OUT/pytest-native-$f.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-native-$f.log" | head -8
done
