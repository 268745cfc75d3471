# Runs from branch wip/f16-subnormal (its GemvSpec.raw, variant_bench knobs and tools/probe/raw_acc.py).
# Session 44 device run 3: fp16 raw codes in the gemv, exact for every x with the integer pipe's
# load of head (four ANDs and one shift a word): the nibbles of bits 0..3 multiplied by 16 as halves
# (HMUL2, FMA pipe) to 16 v 2^-24 like those of bits 4..7 (the library's form now, "mul"); the same
# with the byte shift as IMAD.HI ("mulim", f_imad); run 1's x / 16 form ("s16", f16_sub16, inexact
# for |x| < 2^-10). A/B at M = 1 and 8 on the eight layers, SASS counts, errors, the gemv GPU tests.
source tools/probe/env.sh > /dev/null
nvidia-smi --query-gpu=name,temperature.gpu,clocks.sm --format=csv,noheader
R=JM_PROBE_GEMV_RAW=1
for ms in ${MSS:-1 8}; do
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=$ms BARGS="--act float16 --shapes ${SHAPES:-all}" \
  VS="head= mul=$R mulim=$R+JM_PROBE_SUB=f_imad s16=$R+JM_PROBE_SUB=f16_sub16 head2= mul2=$R mulim2=$R+JM_PROBE_SUB=f_imad s16b=$R+JM_PROBE_SUB=f16_sub16" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m$ms.txt; grep -v "^ *$" /tmp/a.txt | tail -9
rm -f $OUT/ab-*.log $OUT/ab-*.json
done
for v in "JM_PROBE_GEMV_RAW=0" "$R" "$R JM_PROBE_SUB=f_imad" "$R JM_PROBE_SUB=f16_sub16"; do
  echo "sass gemv f16 $v: $(env $v python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 10240 --act float16 --ops SHF,LOP3,HFMA2,HMUL2,HADD2,HMMA,IMAD 2>&1 | tail -1)"
done
ACTS=float16,bfloat16 python3 tools/probe/variant_bench.py probe/raw_acc.py 2>&1 | tail -12
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_gemv.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest test_gemv.py rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
