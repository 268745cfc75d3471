# Session 35 device run: the wgmma kernel's Stream-K tail from %globaltimer stamps
# (tools/probe/timeline.py, PERF.md entry 72), M = 256, fp16, the 128 x 128 tile plans, for each
# substitution list in SUBSETS (space-separated; "-" = none), e.g. SUBSETS="- wg_relfence"; then,
# with VS set, an A/B of tools/bench rows (tools/probe/env_ab.sh, MS / BARGS as there).
mkdir -p .jmcache
source tools/probe/env.sh
for S in ${SUBSETS:--}; do
  subs=wg_timeline; [ "$S" != - ] && subs="$S,wg_timeline"
  for L in ${LAYERS:-8B_qkv 8B_o 8B_down}; do
    echo "== $subs"
    JM_PROBE_SUB=$subs timeout 120 python3 tools/probe/variant_bench.py probe/timeline.py --layer "${L/_/ }" --m ${M:-256} --samples ${SAMPLES:-9} 2>&1 | tail -7
  done
done
if [ -n "${VS:-}" ]; then MS=${MS:-256,1024} BARGS="${BARGS:---act float16}" bash tools/probe/env_ab.sh; fi
