#!/usr/bin/env bash
# The GPU test suite on a lent GPU machine, in parallel groups, with the element-wise checker's
# margins collected per group; then the warm first call and the host overhead per call.
#   OUT=<dir> [EMULATE="t4 v100"] [PREWARM=1] [JOBS=16] [TEST_GROUPS="api1 gemv ..."] bash tools/gpu_tests.sh
# Carried wheels in .whl/ are installed to /tmp/site; the kernel cache is /tmp/jmcache (a carried
# .jmcache is copied there first). A cold cache is filled by tools/prewarm_suite.py first.
set -u
export PYTHONUNBUFFERED=1
# the lent machine returns at most 8 files: logs are written to $OUT/logs and packed into one
# archive at the end ($OUT keeps logs.tgz and margins.json)
FINAL=${OUT:-/tmp/jm-out}; OUT=$FINAL/logs; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 2; }
  export PYTHONPATH="$PWD:/tmp/site"
else
  export PYTHONPATH="$PWD"
fi
if [ -d .jmcache ] && [ ! -d /tmp/jmcache ]; then cp -r .jmcache /tmp/jmcache; fi
# a carried cache as one archive (smaller than the folder): .carry/jmcache.tar.xz holds jmcache/
if [ -f .carry/jmcache.tar.xz ] && [ ! -d /tmp/jmcache ]; then tar -C /tmp -xJf .carry/jmcache.tar.xz; fi
mkdir -p /tmp/jmcache && chmod 700 /tmp/jmcache
# further carried bundles (`jitmarlin cache export`, xz-compressed): .carry/<name>.tar.xz is merged into
# /tmp/jmcache, and .carry/base-*.tar.xz (kernels of the base tree, for BENCH_AB) into /tmp/jmcache-base
for b in .carry/*.tar.xz; do
  case $b in
    .carry/jmcache.tar.xz) ;;
    .carry/base-*) mkdir -p -m 700 /tmp/jmcache-base; xz -dc "$b" > /tmp/b.tar
      (cd /tmp && PYTHONPATH="$OLDPWD/.base:/tmp/site" python3 -m jitmarlin cache --cache-dir /tmp/jmcache-base import /tmp/b.tar | tail -1) ;;
    *) xz -dc "$b" > /tmp/b.tar; python3 -m jitmarlin cache --cache-dir /tmp/jmcache import /tmp/b.tar | tail -1 ;;
  esac
done
export JITMARLIN_CACHE_DIR=/tmp/jmcache JITMARLIN_TEST_CACHE_DIR=/tmp/jmcache
nvidia-smi --query-gpu=name,driver_version,temperature.gpu --format=csv,noheader
python3 -c "import torch, cupy, jitmarlin; from jitmarlin.jit import nvrtc; print('torch', torch.__version__, 'cupy', cupy.__version__, 'nvrtc', nvrtc.version())"
if [ "${PREWARM:-1}" = 1 ]; then
  t0=$(date +%s)
  # the emulated groups' kernels too (else each compiles serially inside its test)
  timeout ${PREWARM_TIMEOUT:-300} python3 tools/prewarm_suite.py --profile "${PROFILE:-h100}" --jobs "${JOBS:-16}" \
    --emulate "$(echo ${EMULATE:-} | tr ' ' ',')" > "$OUT/prewarm.log" 2>&1
  echo "prewarm rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/prewarm.log")"
fi
run() {   # name, pytest args...
  local name=$1; shift
  # SIGINT at the limit: pytest still prints its summary and the margins
  JITMARLIN_MARGINS_JSON="$OUT/margins-$name.json" timeout -s INT -k 30 ${TEST_TIMEOUT:-420} python3 -m pytest "$@" -m gpu -q \
    -p no:cacheprovider --maxfail=25 -o addopts="" -rfE --durations=12 > "$OUT/pytest-$name.log" 2>&1
}
t0=$(date +%s)
# gemv and wgmma in two halves each: their host-side packing made one group outlast a 400 s limit (s56)
for g in ${TEST_GROUPS:-api1 api2 api3 gemv gemv2 tune wgmma wgmma2 route moe moew}; do   # route also runs test_shard.py
  case $g in
    api1) run api1 tests/test_api.py -k "linear and not bf" & ;;
    api2) run api2 tests/test_api.py -k "linear and bf" & ;;
    api3) run api3 tests/test_api.py -k "not linear" & ;;
    gemv) run gemv tests/test_gemv.py -k "not (hybrid or pair)" & ;;
    gemv2) run gemv2 tests/test_gemv.py -k "hybrid or pair" & ;;
    tune) run tune tests/test_tune.py tests/test_torch.py & ;;
    wgmma) run wgmma tests/test_wgmma.py -k "every_tile or small_token" & ;;
    wgmma2) run wgmma2 tests/test_wgmma.py -k "not (every_tile or small_token)" & ;;
    route) run route tests/test_dequant_route.py tests/test_shard.py & ;;
    moe) run moe tests/test_moe_gpu.py tests/test_hf_load.py tests/test_hf_gguf.py tests/test_tune_moe.py & ;;
    moew) run moew tests/test_moe_wgmma.py tests/test_hf_moe.py & ;;
    # every family's float-type cases (the decode of weights/kernel_form.py's words, e134)
    float) run float tests/test_api.py tests/test_gemv.py tests/test_wgmma.py tests/test_dequant_route.py \
      -k "fp4 or fp8 or float8 or every_quant or every_type" & ;;
  esac
done
# emulated GPUs in parallel with the native groups (the GPU is rarely the bottleneck of a test run)
for e in ${EMULATE:-}; do
  JITMARLIN_EMULATE=$e run "emu-$e" tests/test_api.py tests/test_gemv.py tests/test_dequant_route.py tests/test_moe_gpu.py &
done
wait
echo "native and emulated suites: $(( $(date +%s) - t0 )) s"
if [ "${FIRST_CALL:-1}" = 1 ]; then
  # this tree, and (where a base tree was carried as .base/, e.g. `git archive <rev> jitmarlin
  # templates cache`) the base in the same run, each with a cache of its own
  for tree in . .base; do
    [ -d "$tree/jitmarlin" ] || continue
    tag=$([ "$tree" = . ] && echo head || echo base)
    # from /tmp: python puts the working directory first on sys.path, which would shadow the tree
    (root=$PWD; export PYTHONPATH="$root/$tree:/tmp/site" JITMARLIN_CACHE_DIR=/tmp/jmcache-$tag
     mkdir -p -m 700 /tmp/jmcache-$tag; cd /tmp
     timeout 150 python3 "$root/tools/first_call.py" 5 > "$OUT/first_call-$tag.log" 2>&1
     echo "first call ($tag): $(tail -1 "$OUT/first_call-$tag.log")"
     timeout 150 python3 -m jitmarlin bench --m 1,16 --overhead > "$OUT/overhead-$tag.log" 2>&1
     echo "overhead ($tag): $(grep -i "overhead" "$OUT/overhead-$tag.log" | tail -1)")
  done
fi
if [ "${BENCH_AB:-0}" = 1 ]; then
  # tools/bench of this tree and of the base tree (.base/, with its own tools/), interleaved
  # twice, jitmarlin and cuBLAS only, fp16, M = 1, 16, 64, 1024: the move must not change times
  for pass in 1 2; do
    for tree in . .base; do
      [ -d "$tree/jitmarlin" ] || continue
      tag=$([ "$tree" = . ] && echo head || echo base)
      c=$([ "$tag" = head ] && echo /tmp/jmcache || echo /tmp/jmcache-base)   # head: the prewarmed one
      (root=$PWD; export PYTHONPATH="$root/$tree:/tmp/site" JITMARLIN_CACHE_DIR=$c
       mkdir -p -m 700 $c; cd /tmp
       timeout ${BENCH_TIMEOUT:-200} python3 "$root/$tree/tools/bench" --peers cublas --m ${BENCH_M:-1,16,64,1024} \
         --act float16 --data full --repeats 3 --json "$OUT/bench-$tag-$pass.json" > "$OUT/bench-$tag-$pass.log" 2>&1
       echo "bench $tag pass $pass rc=$?")
    done
  done
  python3 - "$OUT" <<'PYEOF'
import json, sys
o = sys.argv[1]
def rows(tag):
    out = {}
    for p in (1, 2):
        try:
            for r in json.load(open(f"{o}/bench-{tag}-{p}.json"))["rows"]:
                out.setdefault((r["shape"], r["M"]), []).append(r["jitmarlin_us"])
        except (OSError, ValueError, KeyError):
            pass
    return {k: min(v) for k, v in out.items()}
h, b = rows("head"), rows("base")
print("bench head / base (jitmarlin us, best of two passes):")
for k in sorted(set(h) & set(b), key=lambda k: (k[0], k[1])):
    print(f"  {k[0]:<14} M={k[1]:<5} {h[k]:8.2f} {b[k]:8.2f}  {h[k] / b[k]:.3f}")
PYEOF
fi
for f in "$OUT"/pytest-*.log; do
  echo "== $(basename "$f" .log): $(grep -E '(passed|failed|error|no tests ran)' "$f" | tail -1)"
  grep -E "^FAILED|^ERROR" "$f" | head -8
done
python3 - "$OUT" <<'EOF'
import glob, json, sys
worst = {}
for f in glob.glob(sys.argv[1] + "/margins-*.json"):
    for r in json.load(open(f)):
        k = (r["family"], r["act"])
        w = worst.setdefault(k, {"ratio": 0.0, "rel": 0.0, "checks": 0})
        w["ratio"], w["rel"] = max(w["ratio"], r["ratio"]), max(w["rel"], r["rel"])
        w["checks"] += r["checks"]
print("margins (largest |out - ref| / bound, largest rel error, checks):")
for (fam, act), w in sorted(worst.items()):
    print(f"  {fam:<22} {act:<9} {w['ratio']:.3f}  {w['rel']:.2e}  {w['checks']}")
json.dump([{"family": f, "act": a, **w} for (f, a), w in sorted(worst.items())],
          open(sys.argv[1] + "/margins.json", "w"), indent=1)
EOF
cp "$OUT/margins.json" "$FINAL/" 2>/dev/null
tar -C "$OUT" -czf "$FINAL/logs.tgz" . && rm -rf "$OUT"
