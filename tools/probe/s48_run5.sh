# Session 48 device run 5: test_api.py (three parts), test_tune.py and test_torch.py natively on main
# with KernelSpec.xbox (the bf16 plans at M = 9..16 on sm_90 changed; gemv, wgmma and the emulated
# profiles did not: session 47's run 6-7 stand for them), four processes at once.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
run() { timeout ${T:-250} python3 -m pytest "$@" -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE; }
run tests/test_api.py -k "linear and not bf" > "$OUT/pytest-native-api.log" 2>&1 &
run tests/test_api.py -k "linear and bf" > "$OUT/pytest-native-api2.log" 2>&1 &
run tests/test_api.py -k "not linear" > "$OUT/pytest-native-api3.log" 2>&1 &
run tests/test_tune.py tests/test_torch.py > "$OUT/pytest-native-tune.log" 2>&1 &
wait
echo "all done in $(( $(date +%s) - t0 )) s"
for f in api api2 api3 tune; do
  echo "== $f: $(grep -E 'passed|failed|no tests ran' $OUT/pytest-native-$f.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-native-$f.log" | head -8
done
