# Session 37 device run 4: which short last row blocks are slow (run 3: M = 160 on K = 4096 layers,
# 96 rows of the last x box past the map, 16-19% slower than with the box inside it). The
# planner's kernels at M = 96..248, x's boxes past the map (head) or inside it (xpad), fp16.
mkdir -p .jmcache
( MS=96,112,136,144,152,160,168,176,184,200,232,248 BARGS="--act float16 --shapes 4096x8192,4096x16384,8192x8192 --repeats 2" \
  VS="head= xpad=JM_PROBE_XPAD=1" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/
grep -v "^ *$" /tmp/a.txt | tail -40
