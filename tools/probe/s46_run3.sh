# Session 46 device run 3 (branch wip/sk-bulk): in run 2 the bulk kernels gained 1-5.6% on six fp16
# layers at M = 16 but 0-1% on most bf16 ones (70B qkv 5%), which would put bf16 over fp16 by 7-9%
# on 8B gate_up and 70B down ((f)). Is it bf16's raw codes (8 more MMAs a stage)? A/B/A/B in bf16:
# head, bulk, bulk with the plain decode (bf_noraw: 64 MMAs a stage, the fp16 kernel's count).
# The six layers whose bf16 kernel has raw codes.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="head= bulk=JM_PROBE_BULK=1 bnoraw=JM_PROBE_BULK=1+JM_PROBE_SUB=bf_noraw head2= bulk2=JM_PROBE_BULK=1 bnoraw2=JM_PROBE_BULK=1+JM_PROBE_SUB=bf_noraw" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-bulk-bf.txt; grep -v "^ *$" /tmp/a.txt | tail -7; rm -f $OUT/ab-*.log $OUT/ab-*.json
