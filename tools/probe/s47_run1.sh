# Session 47 device run 1. (1) The bulk GPU tests on main (the 128-byte alignment of session 46 ran on
# no GPU). (2) A/B/A/B at M = 16, both dtypes, the six layers with boxes: head; the raw-code bf16
# kernels without their offsets MMAs (bf_offnone, timing only) and with each warp's quarter of them
# on its own ldmatrix (bf_offld, timing only): is a shared x-sum worth its exchange?
source tools/probe/env.sh > /dev/null
timeout 200 python3 -m pytest tests/test_api.py -m gpu -k "bulk" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -2
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="head= offnone=JM_PROBE_SUB=bf_offnone offld=JM_PROBE_SUB=bf_offld head2= offld2=JM_PROBE_SUB=bf_offld" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-off.txt; grep -v "^ *$" /tmp/a.txt | tail -20; rm -f $OUT/ab-*.log $OUT/ab-*.json
