# Session 40 device run 5: K-tiles of 512 (tk 32) in the mma.sync kernel at M = 16: a correctness
# check (tools/probe/tk32_check.py), then 8B qkv's whole 64-wide tiles with tk 32 and 3-5 stages
# against the planner's tk 16 x 8 stages, then 8B down and 70B qkv with 128- and 256-wide tiles.
source tools/probe/env.sh > /dev/null
timeout 200 python3 tools/probe/tk32_check.py > $OUT/tk32-check.log 2>&1; echo "check rc=$?"; tail -15 $OUT/tk32-check.log
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=16 BARGS="--act float16,bfloat16 --shapes 4096x6144" \
  VS="head= w32s4=JM_PROBE_WHOLE=4,32,4 w32s3=JM_PROBE_WHOLE=4,32,3 w32s5=JM_PROBE_WHOLE=4,32,5 head2= w32s4b=JM_PROBE_WHOLE=4,32,4" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -3
mkdir -p $OUT/big; ( OUT=$OUT/big RUN_TIMEOUT=150 MS=16 BARGS="--act float16 --shapes 14336x4096,8192x10240,4096x28672" \
  VS="head= t16=JM_PROBE_TILE=16,32,2 t8s3=JM_PROBE_TILE=8,32,3 t8s4=JM_PROBE_TILE=8,32,4 head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/b.txt 2>&1
cp /tmp/b.txt $OUT/ab-big.txt; grep -v "^ *$" /tmp/b.txt | tail -4; rm -f $OUT/ab-*.log $OUT/big/ab-*.log
