# Session 40 device run 2: what the whole-tile plan of 8B qkv at M = 16 spends its time on (timing
# only, wrong sums on purpose): x fetched for row 0 alone (x1), no dequantisation or scale ALU
# work (nodq_all), both, and no steps at all (probe_empty: launch, setup, epilogue). fp16.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=${MS:-16} BARGS="--act ${ACTS:-float16} --shapes ${SHAPES:-4096x6144}" \
  VS="${VS:-head= x1=JM_PROBE_SUB=x1 nodq=JM_PROBE_SUB=nodq_all x1nodq=JM_PROBE_SUB=x1,nodq_all empty=JM_PROBE_SUB=probe_empty head2= x1b=JM_PROBE_SUB=x1}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log
