# Session 47 device run 2: the raw-code kernels on 256-wide tiles share the offsets' sums among the
# four warps of a K range (KernelSpec.shared_offsets). (1) GPU tests of the raw-code, k512, bulk and
# whole-decode kernels; (2) A/B/A/B at M = 16, both dtypes, the six boxed layers: without the
# sharing (xs_own, as main) against head.
# (Ran from branch wip/xs-shared, or an earlier form of it; see tools/PERF.md entry 90.)
source tools/probe/env.sh > /dev/null
timeout 220 python3 -m pytest tests/test_api.py -m gpu -k "raw_codes or k512 or bulk or whole_decode" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -3
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="own=JM_PROBE_SUB=xs_own head= own2=JM_PROBE_SUB=xs_own head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-xs.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log $OUT/ab-*.json
