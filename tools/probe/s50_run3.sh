# Session 50 device run 3 (two H200s): on main's final tree (d912d70, the launchers' device switch),
# the two-GPU tests of test_api.py, then the whole GPU suite under the emulated profiles (session 49
# ran them on the tree before the switch), v100 and t4 on GPU 1, rtx-pro-6000 on GPU 0, at once.
source tools/probe/env.sh > /dev/null
nvidia-smi -L
t0=$(date +%s)
timeout ${T2:-240} python3 -m pytest tests/test_api.py -m gpu -k "not_current or second_gpu" -q -p no:cacheprovider \
    -o addopts="" -rfEs > "$OUT/pytest-two-gpus.log" 2>&1
echo "two-GPU tests rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest-two-gpus.log)"
grep -E "^FAILED|^ERROR|^E  " "$OUT/pytest-two-gpus.log" | head -20
[ -n "${NO_EMU:-}" ] && exit 0
t0=$(date +%s)
for e in v100 t4 rtx-pro-6000; do
  gpu=$([ $e = rtx-pro-6000 ] && echo 0 || echo 1)
  CUDA_VISIBLE_DEVICES=$gpu JITMARLIN_EMULATE=$e timeout ${T:-400} python3 -m pytest tests -m gpu -q -p no:cacheprovider \
      --maxfail=25 -o addopts="" -rfE > "$OUT/pytest-$e.log" 2>&1 &
done
wait
echo "emulated suites done in $(( $(date +%s) - t0 )) s"
for e in v100 t4 rtx-pro-6000; do
  echo "== $e: $(grep -E 'passed|failed' $OUT/pytest-$e.log | tail -1)"; grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -8
done
