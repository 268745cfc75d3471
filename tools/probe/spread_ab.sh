# Device session: spread gemv kernels against whole-column-block ones (VS: whole*, spread, or
# variant_bench.py substitution names without their sp_ prefix, on spread plans), on SHAPES at MS;
# TESTS=1 runs tests/test_gemv.py's GPU tests first.
source tools/probe/env.sh 2>/dev/null
if [ "${TESTS:-0}" = 1 ]; then
  t0=$(date +%s)
  timeout 330 python3 -m pytest tests/test_gemv.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE -x > "$OUT/pytest-gemv.log" 2>&1
  echo "pytest gemv rc=$? in $(( $(date +%s) - t0 )) s"; tail -1 "$OUT/pytest-gemv.log"; grep -E "^FAILED|^E " "$OUT/pytest-gemv.log" | head -5
fi
run() { local tag=$1; shift; t0=$(date +%s); env "$@" timeout 150 python3 tools/probe/variant_bench.py bench --json "$OUT/s-$tag.json" --peers cublas --shapes "${SHAPES:-L3-8B qkv,L3-70B o}" --m ${MS:-1} > "$OUT/s-$tag.log" 2>&1; echo "$tag rc=$? $(( $(date +%s)-t0 )) s"; }
VS="${VS:-whole spread loop nogather nodiv all whole2}"
for v in $VS; do case $v in whole*) run $v X=1 ;; spread) run $v JM_PROBE_GEMV=sp=1,cl=1 ;; *) run $v JM_PROBE_GEMV=sp=1,cl=1 JM_PROBE_SUB=sp_$v ;; esac; done
python3 - "$OUT" $VS <<'PY'
import json, sys, os
out, vs = sys.argv[1], sys.argv[2:]
runs = {}
for v in vs:
    try: runs[v] = {(r["shape"], r["M"]): r for r in json.load(open(os.path.join(out, f"s-{v}.json")))["rows"]}
    except Exception as e: print(v, "no json", e)
keys = sorted({k for r in runs.values() for k in r})
print(f"{'shape':16s} " + " ".join(f"{v:>12s}" for v in runs))
for k in keys:
    print(f"{k[0]:16s} " + " ".join(f"{runs[v][k]['jitmarlin_us']:12.2f}" if k in runs[v] else " "*12 for v in runs))
for v in runs: print(v, sorted({r.get('kernel','?').replace('jm_gemv_sm80_uint4b8_f16_g128_','') for r in runs[v].values()}))
PY
