# Session 41 device run 2: decode at M = 12 / 16 on the long-K layers with 128-wide Stream-K tiles
# of K-tiles of 512 in 3 / 4 stages (the tuner's pick for 8B down in session 40), and 8B qkv's whole
# plan of K-tiles of 512 in 6 stages (the tuner's fp16 pick), against the planner's plans.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-110} MS=${MS:-12,16} BARGS="--act ${ACTS:-float16,bfloat16} --shapes ${SHAPES:-4096x6144,14336x4096,28672x8192,8192x8192,8192x10240}" \
  VS="${VS:-head= t8k32s3=JM_PROBE_TILE=8,32,3 t8k32s4=JM_PROBE_TILE=8,32,4 head2= qkv6=JM_PROBE_SET=WHOLE_DECODE_TK32_STAGES=6}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -26
rm -f $OUT/ab-*.log
