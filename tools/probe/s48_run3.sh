# Session 48 run 3 (branch s48-xbox: x by TMA boxes as KernelSpec.xbox, the planner's rule bf16 only):
# (1) the boxed GPU tests (weights only and with x's boxes) and bulk_check.py; (2) A/B x2 at M = 12
# and 16, both dtypes, the six boxed layers: the rule (head) against no xbox and xbox in both
# dtypes, and xbox in both with the weights' box issued first (xw_first).
source tools/probe/env.sh > /dev/null
timeout 200 python3 -m pytest tests/test_api.py -m gpu -k "bulk or x_boxes or raw_codes or k512" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -2
timeout 240 python3 tools/probe/bulk_check.py 2>&1 | tee $OUT/bulk-check.txt | tail -1
( RUN_TIMEOUT=150 MS=12,16 BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="head= none=JM_PROBE_XBOX=none both=JM_PROBE_XBOX=both wf=JM_PROBE_XBOX=both+JM_PROBE_SUB=xw_first head2= none2=JM_PROBE_XBOX=none both2=JM_PROBE_XBOX=both wf2=JM_PROBE_XBOX=both+JM_PROBE_SUB=xw_first" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m12-16-xbox.txt; grep -v "^ *$" /tmp/a.txt | tail -26; rm -f $OUT/ab-*.log $OUT/ab-*.json
