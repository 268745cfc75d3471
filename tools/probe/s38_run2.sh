# Session 38 device run 2: the SS wgmma probe (tools/probe/ss_templates.py). Its kernels against
# the float64 reference first, then an A/B against main's RS kernels at M = 1024 / 4096 on four
# layers, fp16, two passes each, cuBLAS beside.
source tools/probe/env.sh
t0=$(date +%s)
JM_PROBE_SS=1 timeout ${CHECK_TIMEOUT:-150} python3 tools/probe/variant_bench.py probe/ss_check.py --gpu > $OUT/ss-check.log 2>&1
echo "check rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "^check|ss_check|Error|error" $OUT/ss-check.log | tail -14
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=${MS:-1024,4096} BARGS="--act float16 --shapes ${SHAPES:-4096x4096,14336x4096,8192x8192}" \
  VS="rs= ss=JM_PROBE_SS=1 rs2= ss2=JM_PROBE_SS=1" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt
grep -v "^ *$" /tmp/a.txt | tail -22
rm -f $OUT/ab-*.log
