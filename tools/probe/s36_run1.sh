# Session 36 device run 1: the cost of moving a tile's partial sums between the two blocks of a
# cluster against L2 (tools/probe/dsmem.py), then M = 1024 plans whose last-wave tiles split into
# equal halves (JM_PROBE_HYBRID_GRID=128), with and without the reduction (wg_nored, timing only).
source tools/probe/env.sh
python3 tools/probe/dsmem.py --kb ${KB:-32,64,128} --reps 20 2>&1 | tee "$OUT/dsmem.txt"
MS=${MS:-1024} BARGS="${BARGS:---act float16 --shapes 4096x6144,8192x10240}" \
VS="${VS:-a= g=JM_PROBE_HYBRID_GRID=128 gnr=JM_PROBE_HYBRID_GRID=128+JM_PROBE_SUB=wg_nored nr=JM_PROBE_SUB=wg_nored a2= g2=JM_PROBE_HYBRID_GRID=128}" \
  bash tools/probe/env_ab.sh
