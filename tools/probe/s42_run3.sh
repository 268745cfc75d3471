# Session 42 device run 3: the M = 64 bf16 rows of (f) with the byte shift as a PRMT (bf_prmt,
# correct values) and on the one-block 64 x 256 kernel with the split step (JM_PROBE_WGMMA
# 64:4,16,6,1: its dequantisation overlaps its own wgmmas), against the planner's two-block kernel.
source tools/probe/env.sh > /dev/null
JM_PROBE_SUB=bf_prmt python3 tools/probe/variant_bench.py probe/sass_count.py --m 64 2>&1 | tail -1
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=64 BARGS="--act float16,bfloat16 --shapes ${SHAPES:-4096x28672,8192x57344,28672x8192}" \
  VS="${VS:-head= prmt=JM_PROBE_SUB=bf_prmt o1s=JM_PROBE_WGMMA=64:4,16,6,1 head2= prmt2=JM_PROBE_SUB=bf_prmt o1s2=JM_PROBE_WGMMA=64:4,16,6,1}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab64.txt; grep -v "^ *$" /tmp/a.txt | tail -8
rm -f $OUT/ab-*.log
