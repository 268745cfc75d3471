# Session 42 device run 6 (device call 9): on the H200, where the bf16 gemv is bound by its
# integer-pipe work (run 8), batches of 8 k16 rows instead of 4 (JM_PROBE_GEMV=u=8: half the loop's
# per-batch address and counter work a word) at M = 1, both dtypes.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-100} MS=1 BARGS="--act float16,bfloat16 --shapes ${SHAPES:-8192x10240,8192x57344}" \
  VS="${VS:-head= u8=JM_PROBE_GEMV=u=8 head2= u8b=JM_PROBE_GEMV=u=8}" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab1.txt; grep -v "^ *$" /tmp/a.txt | tail -6
rm -f $OUT/ab-*.log
