# Session 24: tune tools/bench's rows with the autotuner (tools/probe/tune_rows.py), keep the
# choices in .jmcache on the device for the next command's tools/bench run. PHASES: "16 256".
source tools/probe/env.sh 2>/dev/null
t0=$(date +%s)
for m in ${PHASES:-16 256}; do
  left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) ))
  [ $left -lt 30 ] && { echo "no time left for M=$m"; break; }
  if [ $m -le 16 ]; then F="--paths sm80 --tiles ${TILES16:-1x4x16,1x8x8,1x8x16,1x16x8,1x16x16} --stages ${STAGES16:-3,4,6,8}";
  else F="--paths ${PATHS_BIG:-sm90}"; fi
  python3 tools/probe/tune_rows.py --m $m --act ${ACT:-float16,bfloat16} $F --json "$OUT/tune-m$m.json" \
      --deadline-s $(( left - 25 )) 2>&1 | grep -v "cache hit"
done
rm -rf .jmcache; cp -r /tmp/jmcache .jmcache; echo "kept $(ls .jmcache | wc -l) cache files in .jmcache"
