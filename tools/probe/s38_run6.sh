# Session 38 device run 6: 8B qkv at M = 9..16 (whole 64-wide tiles a block, 16 K-steps of 256)
# with deeper pipelines than the planner's 8 stages (JM_PROBE_WHOLE=TN,TK,STAGES), both dtypes.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=120 MS=12,16 BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="p= w10=JM_PROBE_WHOLE=4,16,10 w12=JM_PROBE_WHOLE=4,16,12 w13=JM_PROBE_WHOLE=4,16,13 p2= w12b=JM_PROBE_WHOLE=4,16,12 w13b=JM_PROBE_WHOLE=4,16,13" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -8; rm -f $OUT/ab-*.log
