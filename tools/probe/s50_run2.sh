# Session 50 device run 2: every GPU test file natively on main (d912d70: the launchers make their
# device current where another is; session 49 ran the whole suite only on the tree before that).
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
run() { timeout ${T:-440} python3 -m pytest "$@" -m gpu -q -p no:cacheprovider --maxfail=25 -o addopts="" -rfE; }
run tests/test_api.py -k "linear and not bf" > "$OUT/pytest-native-api.log" 2>&1 &
run tests/test_api.py -k "linear and bf" > "$OUT/pytest-native-api2.log" 2>&1 &
run tests/test_api.py -k "not linear" > "$OUT/pytest-native-api3.log" 2>&1 &
run tests/test_gemv.py > "$OUT/pytest-native-gemv.log" 2>&1 &
run tests/test_tune.py tests/test_torch.py > "$OUT/pytest-native-tune.log" 2>&1 &
run tests/test_wgmma.py tests/test_dequant_route.py > "$OUT/pytest-native-wgmma.log" 2>&1 &
wait
echo "all done in $(( $(date +%s) - t0 )) s"
for f in api api2 api3 gemv tune wgmma; do
  echo "== $f: $(grep -E 'passed|failed|no tests ran' $OUT/pytest-native-$f.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-native-$f.log" | head -8
done
