# Session 37 device run 3: rows short of a row block. Runs 1-2 found M = 160 slower than M = 256 on
# the same plan (4096 x 8192: 33.5 against 28.1 us). The planner's kernels at M = 160..256, with
# x's TMA boxes inside or past the x tensor map (JM_PROBE_XPAD), fp16, two passes.
mkdir -p .jmcache
( MS=160,192,224,256 BARGS="--act float16 --shapes 4096x8192,4096x16384,8192x8192" \
  VS="head= xpad=JM_PROBE_XPAD=1 head2= xpad2=JM_PROBE_XPAD=1" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/
grep -v "^ *$" /tmp/a.txt | tail -30
