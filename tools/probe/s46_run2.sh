# Session 46 device run 2 (branch wip/sk-bulk): run 1's bulk kernels were 2.5-4% faster on fp16 70B
# gate_up / down and 8B gate_up at M = 16 but ~0.4 us slower on the small layers (a fixed cost). Now
# with the tensor map prefetched at the start (prefetch.tensormap), no block barrier after the
# mbarriers' set-up, and thread 0 issuing the next box before it waits on the current one.
# (1) bulk_check.py; (2) A/B/A/B at M = 16, both dtypes, the eight layers.
source tools/probe/env.sh > /dev/null
timeout 240 python3 tools/probe/bulk_check.py 2>&1 | tee $OUT/bulk-check.txt | tail -1
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes all" \
  VS="head= bulk=JM_PROBE_BULK=1 head2= bulk2=JM_PROBE_BULK=1" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-bulk.txt; grep -v "^ *$" /tmp/a.txt | tail -17; rm -f $OUT/ab-*.log $OUT/ab-*.json
