# Session 46 device run 8 (the branch's final library): main's M = 16 kernels (no TMA weight boxes, one
# offsets chain: JM_PROBE_NOBULK=1 + xo1) against the planner's (bulk where a stage holds 32 KB of
# weights, four chains), A/B/A/B, both dtypes side by side, the six layers the rule gives bulk.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="main=JM_PROBE_NOBULK=1+JM_PROBE_SUB=xo1 head= main2=JM_PROBE_NOBULK=1+JM_PROBE_SUB=xo1 head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-final.txt; grep -v "^ *$" /tmp/a.txt | tail -13; rm -f $OUT/ab-*.log $OUT/ab-*.json
