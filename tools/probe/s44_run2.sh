# Runs from branch wip/f16-subnormal (its GemvSpec.raw, variant_bench knobs and tools/probe/raw_acc.py).
# Session 44 device run 2: fp16 raw codes that are exact for every x (each nibble masked into bits
# 4..7 of its half: the subnormal 16 v 2^-24; three shifts and four ANDs a word, no scaling of x)
# against run 1's form (f16_sub16: bits 0..3 and 4..7 as they lie, x / 16 at the high nibbles' k,
# which loses precision for |x| < 2^-10). SASS counts, the GPU tests, errors against x's mean and
# scale for both forms, then A/B at M = 1, 8 (gemv) and 16 (Stream-K), fp16.
source tools/probe/env.sh > /dev/null
nvidia-smi --query-gpu=name,temperature.gpu,clocks.sm --format=csv,noheader
for v in "JM_PROBE_GEMV_RAW=0" "JM_PROBE_GEMV_RAW=1" "JM_PROBE_GEMV_RAW=1 JM_PROBE_SUB=f16_sub16"; do
  echo "sass gemv f16 $v: $(env $v python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 10240 --act float16 --ops SHF,LOP3,HFMA2,HMUL2,HADD2,HMMA,IMAD 2>&1 | tail -1)"
done
echo "sass streamk f16 raw: $(JM_PROBE_RAW_F16=1 python3 tools/probe/variant_bench.py probe/sass_count.py --m 16 --k 8192 --n 57344 --act float16 --ops SHF,LOP3,HFMA2,HMUL2,HADD2,HMMA,IMAD 2>&1 | tail -1)"
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_gemv.py tests/test_api.py -m gpu -k "raw_code" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
echo "errors, library form:"; python3 tools/probe/variant_bench.py probe/raw_acc.py 2>&1 | tail -7
echo "errors, f16_sub16:"; JM_PROBE_SUB=f16_sub16 python3 tools/probe/variant_bench.py probe/raw_acc.py 2>&1 | tail -7
for ms in ${MSS:-1 8 16}; do
  if [ $ms = 16 ]; then
    VS="head= sub=JM_PROBE_RAW_F16=1 head2= sub2=JM_PROBE_RAW_F16=1"
  else
    VS="head= sub=JM_PROBE_GEMV_RAW=1 s16=JM_PROBE_GEMV_RAW=1+JM_PROBE_SUB=f16_sub16 head2= sub2=JM_PROBE_GEMV_RAW=1 s16b=JM_PROBE_GEMV_RAW=1+JM_PROBE_SUB=f16_sub16"
  fi
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=$ms BARGS="--act float16 --shapes ${SHAPES:-all}" VS="$VS" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m$ms.txt; grep -v "^ *$" /tmp/a.txt | tail -11
rm -f $OUT/ab-*.log $OUT/ab-*.json
done
