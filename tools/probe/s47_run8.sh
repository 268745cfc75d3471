# Session 47 device run 8 (branch wip/xs-shared, fourth form of the shared offsets' sums): each step
# reads its four shares at its start, waits for its own copies of the next step's x there and loads
# its quarter's fragments, does the quarter's MMAs after the first k16 step and stores its share
# after the last. (1) A/B/A/B at M = 16, bf16, three layers: xs_own (main's kernels) against head;
# (2) the GPU tests of the raw-code, k512, bulk and whole-decode kernels.
# (Ran from branch wip/xs-shared; see tools/PERF.md entry 90.)
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=60 MS=${MS:-16} BARGS="--act bfloat16 --shapes 4096x28672,8192x8192,28672x8192" \
  VS="own=JM_PROBE_SUB=xs_own head= own2=JM_PROBE_SUB=xs_own head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-xs8.txt; grep -v "^ *$" /tmp/a.txt | tail -4; rm -f $OUT/ab-*.log $OUT/ab-*.json
timeout 100 python3 -m pytest tests/test_api.py -m gpu -k "raw_codes or k512 or bulk or whole_decode" -q -p no:cacheprovider -o addopts="" > $OUT/pytest.log 2>&1; tail -2 $OUT/pytest.log
