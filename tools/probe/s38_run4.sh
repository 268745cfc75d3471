# Session 38 device run 4: what the SS probe's proxy fence and warpgroup barrier cost (timing only).
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=120 MS=1024,4096 BARGS="--act float16 --shapes 4096x4096,14336x4096" \
  VS="rs= ss=JM_PROBE_SS=1 nofence=JM_PROBE_SS=nofence nosync=JM_PROBE_SS=nosync" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -8; rm -f $OUT/ab-*.log
