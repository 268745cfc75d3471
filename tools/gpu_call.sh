#!/usr/bin/env bash
# One device call: tools/gpu_tests.sh's groups, then tools/bench --quant and --moe runs, logs packed
# into $OUT/all.tgz. Carried kits (`jitmarlin cache export`, xz) in .carry/ (imported by
# gpu_tests.sh) and .kitq/ (imported here); a call carries what it needs within 64 MiB, e.g.
# [".carry", ".whl"] for the tests and [".kitq", ".whl"] for a bench (tools/PERF.md Open). Knobs:
#   TGROUPS="float moe moew" (tools/gpu_tests.sh groups, "" for none), TEST_TIMEOUT (s, each group)
#   QUANT="shapes|M|acts|types|peers|limit_s"   a tools/bench --quant run
#   MOE="shapes|T|acts|peers|limit_s"            a tools/bench --moe run
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
FINAL=${OUT:-/tmp/jm-out}; L=/tmp/logs; mkdir -p $L
if [ -n "${TGROUPS-float moe moew}" ]; then
  OUT=/tmp/gt TEST_GROUPS="${TGROUPS-float moe moew}" PREWARM=0 FIRST_CALL=0 TEST_TIMEOUT=${TEST_TIMEOUT:-240} \
    bash tools/gpu_tests.sh 2>&1 | tail -40 | tee $L/gpu_tests.txt
  cp /tmp/gt/logs.tgz $L/gpu_tests_logs.tgz 2>/dev/null
else   # the setup gpu_tests.sh does (wheels, carried kits)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 2; }
  mkdir -p -m 700 /tmp/jmcache
  for b in .carry/*.tar.xz; do [ -f "$b" ] && xz -dc "$b" > /tmp/b.tar && PYTHONPATH="$PWD:/tmp/site" python3 -m jitmarlin cache --cache-dir /tmp/jmcache import /tmp/b.tar | tail -1; done
fi
export PYTHONPATH="$PWD:/tmp/site" JITMARLIN_CACHE_DIR=/tmp/jmcache
# a kit that travels apart from .carry (e.g. tools/bench --quant's kernels)
for b in .kitq/*.tar.xz; do [ -f "$b" ] && xz -dc "$b" > /tmp/b.tar && python3 -m jitmarlin cache --cache-dir /tmp/jmcache import /tmp/b.tar | tail -1; done
if [ -n "${QUANT:-}" ]; then
  IFS='|' read -r shapes ms acts q peers lim <<< "$QUANT"
  t0=$(date +%s)
  timeout -k 10 $lim python3 tools/bench --shapes "$shapes" --m "$ms" --act "$acts" --quant "$q" --peers "$peers" \
     --deadline-s $(( lim - 30 )) --json $L/quant.json > $L/quant.log 2>&1
  echo "bench quant rc=$? in $(( $(date +%s) - t0 )) s"; grep -v "^  " $L/quant.log | tail -40
fi
if [ -n "${MOE:-}" ]; then
  IFS='|' read -r shapes ts acts peers lim <<< "$MOE"
  t0=$(date +%s)
  timeout -k 10 $lim python3 tools/bench --moe --shapes "$shapes" --m "$ts" --act "$acts" --peers "$peers" \
     --deadline-s $(( lim - 40 )) --json $L/moe.json > $L/moe.log 2>&1
  echo "bench moe rc=$? in $(( $(date +%s) - t0 )) s"; grep -v "^  " $L/moe.log | tail -40
fi
mkdir -p "$FINAL" && tar -C $L -czf "$FINAL/all.tgz" .
echo "total $(( $(date +%s) - T0 )) s"
