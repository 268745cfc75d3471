# Session 46 device run 1 (branch wip/sk-bulk): the sm80-path kernel with its weights by one TMA box a
# stage (KernelSpec.bulk; JM_PROBE_BULK=1 gives the planner's sm80-path plans the flag on sm_90).
# Why: a step's fetch was ~150 of the M = 16 kernel's ~620 instructions a warp (SASS, entry 86), all
# issued by every warp right after the block barrier, before any MMA of the step.
# (1) tools/probe/bulk_check.py: bulk kernels against the float64 reference (poisoned output).
# (2) A/B/A/B at M = 16, both dtypes, the eight layers: head against bulk.
source tools/probe/env.sh > /dev/null
timeout 240 python3 tools/probe/bulk_check.py 2>&1 | tee $OUT/bulk-check.txt | tail -22
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes all" \
  VS="head= bulk=JM_PROBE_BULK=1 head2= bulk2=JM_PROBE_BULK=1" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-bulk.txt; grep -v "^ *$" /tmp/a.txt | tail -20; rm -f $OUT/ab-*.log $OUT/ab-*.json
