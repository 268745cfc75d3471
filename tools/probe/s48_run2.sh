# Session 48 run 2 (branch wip/sk-xtma): x by TMA boxes (head) against x by cp.async (xtma_off),
# A/B x3 at M = 12 and 16, both dtypes, the six boxed layers: run 1's fp16 rows were split (three
# layers 0.5-1.8% slower, one 1.5% faster); is it noise?
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=150 MS=12,16 BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="off=JM_PROBE_SUB=xtma_off head= off2=JM_PROBE_SUB=xtma_off head2= off3=JM_PROBE_SUB=xtma_off head3=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m12-16-xtma.txt; grep -v "^ *$" /tmp/a.txt | tail -26; rm -f $OUT/ab-*.log $OUT/ab-*.json
