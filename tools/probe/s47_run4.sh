# Session 47 device run 4: the raw-code kernels with TMA weight boxes on 256 x 256 tiles share the
# offsets' sums (KernelSpec.shared_offsets, third form): a warp fetches the x chunks of its quarter
# of the k16 steps, does the next step's quarter in the middle of a step once its own copies have
# landed, and its share reaches the other warps over the step's block barrier. (1) GPU tests of the
# raw-code, k512, bulk and whole-decode kernels; (2) A/B/A/B at M = 16, both dtypes, the six boxed
# layers: xs_own (main's kernels) against head.
# (Ran from branch wip/xs-shared, or an earlier form of it; see tools/PERF.md entry 90.)
source tools/probe/env.sh > /dev/null
timeout 220 python3 -m pytest tests/test_api.py -m gpu -k "raw_codes or k512 or bulk or whole_decode" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -3
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="own=JM_PROBE_SUB=xs_own head= own2=JM_PROBE_SUB=xs_own head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-xs4.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log $OUT/ab-*.json
