# Session 37 device run 1: half-tile plans of 64-token wgmma tiles at M = 256 (JM_PROBE_HALF_TM:
# 8B qkv as 192 tiles of 64 x 128 on 128 blocks, 1 whole + a half each; 70B qkv 2 whole + a
# half), and 70B o as 64 tiles of 256 x 128 in halves (JM_PROBE_WGMMA), against the planner.
mkdir -p .jmcache
H4="JM_PROBE_WGMMA=256:4,8,6,1+JM_PROBE_HALF_TM=4+JM_PROBE_HALVES=1.035:256"
H8="JM_PROBE_WGMMA=256:4,8,8,1+JM_PROBE_HALF_TM=4+JM_PROBE_HALVES=1.035:256"
( MS=256 BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="head= h4=$H4 h4s8=$H8 sk4=JM_PROBE_WGMMA=256:4,8,6,1 head2= h42=$H4" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
( MS=256 BARGS="--act float16,bfloat16 --shapes 8192x8192,8192x10240" \
  VS="head= w16=JM_PROBE_WGMMA=256:16,8,4,1 h4=$H4 head2= w162=JM_PROBE_WGMMA=256:16,8,4,1" bash tools/probe/env_ab.sh ) > /tmp/b.txt 2>&1
cp /tmp/a.txt $OUT/a.txt; cp /tmp/b.txt $OUT/b.txt
cat /tmp/a.txt /tmp/b.txt | grep -v "^ *$" | tail -60
