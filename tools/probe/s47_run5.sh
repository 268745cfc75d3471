# Session 47 device run 5: why run 4's shared offsets are slower. A/B/A/B at M = 16, bf16, the five
# 256-wide layers: main's kernels (xs_own), head, head without the mid-step wait (xs_nowait, timing
# only), main's kernels with x fetched by quarters (xs_remap_own).
# (Ran from branch wip/xs-shared, or an earlier form of it; see tools/PERF.md entry 90.)
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act bfloat16 --shapes 4096x28672,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="own=JM_PROBE_SUB=xs_own head= nowait=JM_PROBE_SUB=xs_nowait remap=JM_PROBE_SUB=xs_remap_own own2=JM_PROBE_SUB=xs_own head2= nowait2=JM_PROBE_SUB=xs_nowait remap2=JM_PROBE_SUB=xs_remap_own" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-xs5.txt; grep -v "^ *$" /tmp/a.txt | tail -8; rm -f $OUT/ab-*.log $OUT/ab-*.json
