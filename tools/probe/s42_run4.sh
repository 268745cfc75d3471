# Session 42 device run 4: are the two blocks an SM of the M = 64 kernel in step? The second half
# of the grid starts 300 / 600 / 1200 ns late (variant_bench.py lateN; late2, 2 ns, the control); if out-of-phase blocks
# stayed apart, one's dequantisation would run under the other's wgmmas and the time would drop.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=64 BARGS="--act float16,bfloat16 --shapes ${SHAPES:-4096x28672,8192x57344,28672x8192}" \
  VS="${VS:-head= l2=JM_PROBE_SUB=late2 l300=JM_PROBE_SUB=late300 l600=JM_PROBE_SUB=late600 l1200=JM_PROBE_SUB=late1200 l2b=JM_PROBE_SUB=late2 l600b=JM_PROBE_SUB=late600}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab64.txt; grep -v "^ *$" /tmp/a.txt | tail -8
rm -f $OUT/ab-*.log
