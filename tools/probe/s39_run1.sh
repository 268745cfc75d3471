# Session 39 device runs 1 and 2 (run 2: NOCHECK=1, after the A/B lists took "/" for "+"):
# 192-feature wgmma tiles (tn 12, three warpgroups). Their kernels against
# the float64 reference (tools/probe/t12_check.py), then an A/B on 8B qkv (4096 x 6144, the one
# bench layer whose N is a multiple of 192) against the planner's kernels, both dtypes.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
[ -n "${NOCHECK:-}" ] || timeout ${CHECK_TIMEOUT:-200} python3 tools/probe/t12_check.py > $OUT/t12-check.log 2>&1
echo "check rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "^check|t12_check|Error|error" $OUT/t12-check.log | tail -20
( RUN_TIMEOUT=${RUN_TIMEOUT:-150} MS=${MS:-256,1024,4096} BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="p= t6=JM_PROBE_WGMMA=${TM:-256/1024/4096}:8,12,6,1 t4=JM_PROBE_WGMMA=${TM:-256/1024/4096}:8,12,4,1 p2= t6b=JM_PROBE_WGMMA=${TM:-256/1024/4096}:8,12,6,1" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log
