# Session 45 device run 8 (H200): bf16 raw codes (KernelSpec.raw_codes: 128 + q multiplied as it lies,
# one offsets MMA a k16 step) at M = 16. Entry 60 took them on the H100 for 1-3.5%; on the H200 the
# M = 16 kernel pays for each MMA (entry 86), and (f)'s M = 16 misses there are bf16 rows (70B qkv
# 1.058, 8B down 1.052). A/B/A/B, both dtypes side by side (the fp16 rows run the same kernel in
# every variant), the six layers whose bf16 kernel has raw codes; bf_noraw: the plain decode.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="head= noraw=JM_PROBE_SUB=bf_noraw head2= noraw2=JM_PROBE_SUB=bf_noraw" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-bf-noraw.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log $OUT/ab-*.json
