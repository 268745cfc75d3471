# Session 40 device run 1: what the Stream-K chain costs 8B qkv at M = 16 today. The planner's
# whole 64-wide tiles on 96 blocks (head) against Stream-K plans of the same tile on 128 blocks of
# 12 K-steps (JM_PROBE_TILE), with the finisher's wait removed (sk_nowait) or no cross-block sum
# at all (probe_no_red): timing only, those sums are wrong on purpose.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes ${SHAPES:-4096x6144}" \
  VS="${VS:-head= sk8=JM_PROBE_TILE=4,16,8 sk8nw=JM_PROBE_TILE=4,16,8+JM_PROBE_SUB=sk_nowait sk8nr=JM_PROBE_TILE=4,16,8+JM_PROBE_SUB=probe_no_red sk6=JM_PROBE_TILE=4,16,6 sk6nw=JM_PROBE_TILE=4,16,6+JM_PROBE_SUB=sk_nowait head2= sk8b=JM_PROBE_TILE=4,16,8}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log
