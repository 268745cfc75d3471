#!/usr/bin/env bash
# A/B device session: environment as tools/gpu_session.sh, optional GPU tests, then tools/bench
# for each source variant (VARIANTS: head = the templates of a base commit in
# tools/probe/templates_head, made with
#   mkdir -p tools/probe/templates_head && git archive HEAD templates | tar -x -C tools/probe/templates_head --strip-components=1
# new = the working tree, or substitution names of variant_bench.py; KernelSpec.occupancy has
# replaced the two-blocks-per-SM variant of session 3),
# then one line per row and variant (a variant named twice keeps its last run). CACHE names the
# carried kernel cache (prewarm the variants with tools/probe/prewarm_sweep.py through
# variant_bench.py). templates_head is git-ignored: name it in the device run's carry.
set -u
source "$(dirname "$0")/env.sh"
if [ "${TESTS:-0}" = 1 ]; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests -m gpu -q -p no:cacheprovider --maxfail=25 \
      -o addopts="" -rfE ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error" "$OUT/pytest.log" | tail -2
  grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -20
fi
for v in ${VARIANTS:-new}; do
  t0=$(date +%s)
  variant_env $v
  env "${env[@]}" timeout ${BENCH_TIMEOUT:-200} python3 tools/probe/variant_bench.py bench --json "$OUT/ab-$v.json" \
      ${BENCH_ARGS:---m 1,16 --peers cublas} > "$OUT/ab-$v.log" 2>&1
  echo "bench $v rc=$? in $(( $(date +%s) - t0 )) s"
done
python3 - "$OUT" ${VARIANTS:-new} <<'PY'
import json, sys, os
out, vs = sys.argv[1], sys.argv[2:]
runs = {}
for v in vs:
    try:
        runs[v] = {(r["shape"], r["M"]): r for r in json.load(open(os.path.join(out, f"ab-{v}.json")))["rows"]}
    except Exception as e:
        print(v, "no json", e)
keys = sorted({k for r in runs.values() for k in r}, key=lambda k: (k[1], k[0]))
print(f"{'shape':16s} {'M':>5s} {'floor':>7s} " + " ".join(f"{v:>12s}" for v in runs))
for k in keys:
    rows = [runs[v].get(k) for v in runs]
    fl = next(r["floor_us"] for r in rows if r)
    print(f"{k[0]:16s} {k[1]:5d} {fl:7.1f} " + " ".join(
        f"{r['jitmarlin_us']:7.1f} x{r['jitmarlin_us'] / fl:4.2f}{'!' if r.get('thermal_slowdown_us') else ''}"
        if r else " " * 12 for r in rows))
print("(! = the GPU slowed for heat while that row ran: not a measurement)")
PY
