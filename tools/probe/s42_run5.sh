# Session 42 device run 5 (device call 8): decode at M = 1 on the H200, where bf16 runs 1.04-1.05x
# fp16 on the big layers (the run of record): what the bf16 decode's two extra shifts cost the gemv
# kernel (bf_1sh, timing only) and the byte shift as PRMT (bf_prmt, correct); fp16 rows run as head.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=1 BARGS="--act float16,bfloat16 --shapes ${SHAPES:-8192x10240,8192x57344,28672x8192,14336x4096}" \
  VS="${VS:-head= bf1=JM_PROBE_SUB=bf_1sh prmt=JM_PROBE_SUB=bf_prmt head2= bf1b=JM_PROBE_SUB=bf_1sh prmt2=JM_PROBE_SUB=bf_prmt}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab1.txt; grep -v "^ *$" /tmp/a.txt | tail -10
rm -f $OUT/ab-*.log
