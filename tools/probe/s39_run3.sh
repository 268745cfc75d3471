# Session 39 device run 3: 8B qkv at M = 192 / 256 / 512, the planner's kernels against 192-feature
# tiles of 5, 7 and 8 stages (8: no room for the cluster's receive area, so the two halves of a
# tile meet in L2), both dtypes.
source tools/probe/env.sh > /dev/null
W=JM_PROBE_WGMMA=${TM:-192/256/512}
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=${MS:-192,256,512} BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="p= t5=$W:8,12,5,1 t7=$W:8,12,7,1 t8=$W:8,12,8,1 p2= t7b=$W:8,12,7,1 t6=$W:8,12,6,1" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log
