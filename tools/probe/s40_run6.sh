# Session 40 device run 6: K-tiles of 512 at M = 12 / 16 on all eight layers, both dtypes: the
# planner's kernels with tk 32 and half their stages (JM_PROBE_TK32=half) or one more (half1), and
# Stream-K plans of 128-wide tk-32 tiles, 3 stages (JM_PROBE_TILE=8,32,3), against the planner's.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=${MS:-12,16} BARGS="--act float16,bfloat16" \
  VS="${VS:-head= h=JM_PROBE_TK32=half h1=JM_PROBE_TK32=half1 t8=JM_PROBE_TILE=8,32,3 head2= hb=JM_PROBE_TK32=half}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -34; rm -f $OUT/ab-*.log
