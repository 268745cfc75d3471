#!/usr/bin/env bash
# One device session: environment, smoke test, the GPU test suite, the benchmark; a short
# table at the end. Knobs: TESTS=0/1, BENCH=0/1, BENCH_ARGS, BENCH_TIMEOUT, PYTEST_ARGS, EMULATE (profiles).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/jm-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
if [ -d .jmcache ]; then rm -rf /tmp/jmcache; cp -r .jmcache /tmp/jmcache; fi
export JITMARLIN_CACHE_DIR=/tmp/jmcache JITMARLIN_TEST_CACHE_DIR=/tmp/jmcache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,temperature.memory --format=csv,noheader
python3 -c "import torch, cupy, cuda.bindings; print('torch', torch.__version__, 'cupy', cupy.__version__, 'cuda.bindings', cuda.bindings.__version__)"
python3 -m jitmarlin info | grep -E "nvrtc |gpus|cache_entries"
t0=$(date +%s)
JITMARLIN_LOG=info timeout 120 python3 tools/gpu_smoke.py 2>&1 | tee "$OUT/smoke.log" | grep -v "cache hit"
echo "smoke: $(( $(date +%s) - t0 )) s"
if [ "${TESTS:-1}" = 1 ] && [ "${NATIVE:-1}" = 1 ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=${MAXFAIL:-25} \
      -o addopts="" -rfEs ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error" "$OUT/pytest.log" | tail -3
  grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -30
fi
if [ "${TESTS:-1}" = 1 ]; then
  for e in ${EMULATE:-}; do
    t0=$(date +%s)
    JITMARLIN_EMULATE=$e timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests -m gpu -q -p no:cacheprovider \
        --maxfail=${MAXFAIL:-25} -o addopts="" -rfE ${PYTEST_ARGS:-} > "$OUT/pytest-$e.log" 2>&1
    echo "pytest EMULATE=$e rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed" "$OUT/pytest-$e.log" | tail -1
    grep -E "^FAILED|^ERROR" "$OUT/pytest-$e.log" | head -10
    grep "JITMARLIN_EMULATE=" "$OUT/pytest-$e.log"
  done
fi
if [ "${SWEEP:-0}" = 1 ]; then
  t0=$(date +%s)
  timeout ${SWEEP_TIMEOUT:-240} python3 tools/sweep --json "$OUT/sweep.json" ${SWEEP_ARGS:-} > "$OUT/sweep.log" 2>&1
  echo "sweep rc=$? in $(( $(date +%s) - t0 )) s"; grep -v "^#" "$OUT/sweep.log" | cut -c1-230 | tail -30
fi
if [ "${CLI_BENCH:-0}" = 1 ]; then
  timeout 120 python3 -m jitmarlin bench ${CLI_BENCH_ARGS:---m 1,16,64 --overhead} 2>&1 | tee "$OUT/cli_bench.log"
fi
if [ "${FIRST_CALL:-0}" = 1 ]; then
  timeout 120 python3 tools/first_call.py 5 2>&1 | tee "$OUT/first_call.log"
fi
if [ "${TORCH_TESTS:-0}" = 1 ]; then
  t0=$(date +%s)
  timeout 200 python3 -m pytest tests/test_torch.py -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest-torch.log" 2>&1
  echo "pytest torch rc=$? in $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/pytest-torch.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest-torch.log" | head
fi
if [ "${BENCH:-1}" = 1 ]; then
  # gemlite (a peer) writes the Triton configs it used to $OUT, for a later --gemlite-config; the
  # bench stops taking new rows 30 s before its timeout so that the table and targets still come.
  t0=$(date +%s); bt=${BENCH_TIMEOUT:-480}
  timeout $bt python3 tools/bench --json "$OUT/bench.json" --gemlite-save "$OUT/gemlite-config.json" \
      --deadline-s $(( bt - 30 )) ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  echo "bench rc=$? in $(( $(date +%s) - t0 )) s"
  grep -v "^  " "$OUT/bench.log" | tail -75
fi
