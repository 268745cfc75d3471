# Session 40 device run 4: 8B qkv at M = 16 on the planner's 96 blocks of whole 64-wide tiles with
# K-steps of 128 instead of 256 (JM_PROBE_WHOLE=4,8,S: the same bytes in flight in twice as many,
# half-size stages, refilled twice as often), against the planner's 16 x 8 stages.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=${MS:-16} BARGS="--act ${ACTS:-float16,bfloat16} --shapes ${SHAPES:-4096x6144}" \
  VS="${VS:-head= k8s12=JM_PROBE_WHOLE=4,8,12 k8s16=JM_PROBE_WHOLE=4,8,16 k8s20=JM_PROBE_WHOLE=4,8,20 head2= k8s16b=JM_PROBE_WHOLE=4,8,16}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -4; rm -f $OUT/ab-*.log
