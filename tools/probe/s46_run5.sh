# Session 46 device run 5 (branch wip/sk-bulk). Run 4 (Nsight Compute) found the bf16 M = 16 kernels
# stalled on fixed-latency dependencies 1.3 times an instruction against fp16's 0.73: the raw codes'
# offsets MMAs form one chain of 8 dependent HMMAs a stage, which ptxas hoists to the stage's start.
# The branch now sums them in 4 independent chains (XO = 4; xo1: the single chain of main).
# (1) the raw-code GPU tests and bulk_check.py; (2) A/B/A/B at M = 16, both dtypes, the eight layers:
# main's single chain (xo1), four chains (head), four chains with bulk weights.
source tools/probe/env.sh > /dev/null
timeout 200 python3 -m pytest tests/test_api.py -m gpu -k "raw_codes" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -2
timeout 240 python3 tools/probe/bulk_check.py 2>&1 | tee $OUT/bulk-check.txt | tail -1
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes all" \
  VS="xo1=JM_PROBE_SUB=xo1 xo4= bulk=JM_PROBE_BULK=1 xo1b=JM_PROBE_SUB=xo1 xo4b= bulkb=JM_PROBE_BULK=1" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-xo.txt; grep -v "^ *$" /tmp/a.txt | tail -17; rm -f $OUT/ab-*.log $OUT/ab-*.json
