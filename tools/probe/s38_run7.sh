# Session 38 device run 7: the M = 256 rows whose bf16 times ran 5-7% over fp16 in runs of record
# (8B o, 8B down, 8B gate_up), both dtypes side by side, the planner's kernels, three passes.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=120 MS=256 BARGS="--act float16,bfloat16 --shapes 4096x4096,14336x4096,4096x28672" \
  VS="a= b= c=" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -8; rm -f $OUT/ab-*.log
