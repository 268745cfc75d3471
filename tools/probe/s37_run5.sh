# Session 37 device run 5: the short-row-block x boxes (KernelSpec.tail). GPU tests of tail
# kernels and of the 256 x 128 plans at M <= 256, then an A/B against kernels without them
# (JM_PROBE_TAIL=off) at M = 136..184 (run 4's slow rows) and 200 / 1000, fp16, two passes.
mkdir -p .jmcache
source tools/probe/env.sh
TESTF=test_wgmma.py TESTK="short_row_block or tall_unsplit" VS= probe_tests_and_ab test_wgmma.py > /tmp/t.txt 2>&1
( MS=136,144,152,168,184,1000 BARGS="--act float16 --shapes 4096x8192,4096x16384,8192x8192 --repeats 2" \
  VS="off=JM_PROBE_TAIL=off new= off2=JM_PROBE_TAIL=off new2=" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/t.txt /tmp/a.txt $OUT/
cat /tmp/t.txt; grep -v "^ *$" /tmp/a.txt | tail -24
