# Session 43 device run 1: the bf16 int4 decode with the nibbles of bits 4..7 moved by one fp16 fma
# (bf_hf) against the two shifts (head); SASS counts, then A/B/A/B at M = 1 (the
# H200's integer-bound gemv), M = 16 and M = 64 (the rows of (f)); fp16 rows run the same kernel in
# every variant, so each variant is read by its own process's bf16 / fp16.
source tools/probe/env.sh > /dev/null
for v in "" bf_hf; do for m in 64 1 16; do
  echo "sass m=$m sub=$v: $(JM_PROBE_SUB=$v python3 tools/probe/variant_bench.py probe/sass_count.py --m $m 2>&1 | tail -1)"
done; done
for ms in ${MSS:-1 16 64}; do
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=$ms BARGS="--act float16,bfloat16 --shapes ${SHAPES:-8192x10240,8192x57344,28672x8192,4096x28672}" \
  VS="${VS:-hf=JM_PROBE_SUB=bf_hf head= hf2=JM_PROBE_SUB=bf_hf head2=}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m$ms.txt; grep -v "^ *$" /tmp/a.txt | tail -9
rm -f $OUT/ab-*.log $OUT/ab-*.json
done
