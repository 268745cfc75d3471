# Session 40 device run 3: the mma.sync kernel's weight range prefetched into L2 at the block's
# start (variant_bench.py pf_all / pf_late; results stay correct) at M = 16 on the layers that run
# that kernel, then on 8B qkv's Stream-K plan of 128 blocks (JM_PROBE_TILE=4,16,8). fp16.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-200} MS=${MS:-16} BARGS="--act ${ACTS:-float16} --shapes ${SHAPES:-4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192}" \
  VS="${VS:-head= pfa=JM_PROBE_SUB=pf_all pfl=JM_PROBE_SUB=pf_late head2= pfa2=JM_PROBE_SUB=pf_all}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -10
mkdir -p $OUT/sk; ( OUT=$OUT/sk RUN_TIMEOUT=100 MS=16 BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="head= skpfa=JM_PROBE_TILE=4,16,8+JM_PROBE_SUB=pf_all skpfl=JM_PROBE_TILE=4,16,8+JM_PROBE_SUB=pf_late" \
  bash tools/probe/env_ab.sh ) > /tmp/b.txt 2>&1
cp /tmp/b.txt $OUT/ab-sk.txt; grep -v "^ *$" /tmp/b.txt | tail -5; rm -f $OUT/ab-*.log $OUT/sk/ab-*.log
