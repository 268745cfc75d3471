# Session 42 device run 2: the int4 dequantisation's right shifts as IMAD.HI on the FMA pipe
# (variant_bench.py bf_imad2 / bf_imad3 / f_imad, correct values) at M = 64 (the bf16 rows of (f))
# and, for fp16, at M = 1024 / 4096 (the rows of (d)); with the SASS opcode counts where the
# device has a disassembler.
source tools/probe/env.sh > /dev/null
for v in "" bf_imad2 bf_imad3; do JM_PROBE_SUB=$v python3 tools/probe/variant_bench.py probe/sass_count.py --m 64 2>&1 | tail -1; done
for v in "" f_imad; do JM_PROBE_SUB=$v python3 tools/probe/variant_bench.py probe/sass_count.py --m 64 --act float16 2>&1 | tail -1; done
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=64 BARGS="--act float16,bfloat16 --shapes ${SHAPES:-4096x28672,8192x57344,8192x10240}" \
  VS="${VS:-head= bi2=JM_PROBE_SUB=bf_imad2 bi3=JM_PROBE_SUB=bf_imad3 fim=JM_PROBE_SUB=f_imad head2= bi3b=JM_PROBE_SUB=bf_imad3 fim2=JM_PROBE_SUB=f_imad}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab64.txt; grep -v "^ *$" /tmp/a.txt | tail -8
rm -f $OUT/ab-*.log
if [ -n "${BIG:-1}" ]; then
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=1024,4096 BARGS="--act float16 --shapes ${BSHAPES:-4096x28672,8192x8192}" \
  VS="head= fim=JM_PROBE_SUB=f_imad head2= fim2=JM_PROBE_SUB=f_imad" bash tools/probe/env_ab.sh ) > /tmp/b.txt 2>&1
cp /tmp/b.txt $OUT/abbig.txt; grep -v "^ *$" /tmp/b.txt | tail -6
fi
