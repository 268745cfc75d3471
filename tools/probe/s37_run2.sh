# Session 37 device run 2: GPU tests of the planner's 256 x 128 tiles at M <= 256 where no tile
# is chained (planner._tall_unsplit), then an A/B of that rule (off: 128 x 128 tiles as before)
# on layers whose plans it changes: halves in clusters at 32 / 48 / 64 K-steps a block
# (K = 4096 / 6144 / 8192, N = 8192) and whole tiles (N = 16384), M = 160 and 256.
mkdir -p .jmcache
source tools/probe/env.sh
TESTF=test_wgmma.py TESTK="tall_unsplit or half_tile" VS= probe_tests_and_ab test_wgmma.py > /tmp/t.txt 2>&1
( MS=160,256 BARGS="--act float16,bfloat16 --shapes 4096x8192,6144x8192,8192x8192,4096x16384" \
  VS="off=JM_PROBE_TALL=off new= off2=JM_PROBE_TALL=off new2=" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/t.txt /tmp/a.txt $OUT/
cat /tmp/t.txt; grep -v "^ *$" /tmp/a.txt | tail -40
