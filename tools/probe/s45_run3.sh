# Session 45 device run 3 (H200): run 2 found the M = 16 Stream-K kernel bound by its own warps
# (no MMAs: 70B gate_up 81 -> 65 us; no MMAs and no dequantisation: 58.7, the floor), with 2 warps a
# scheduler at 194 registers. Two blocks an SM (16 warps, 128 registers) on the H200, where the H100
# (entry 45, M = 16) found them slower on every layer but 70B gate_up: A/B at M = 16, fp16.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=120 MS=16 BARGS="--act ${ACT:-float16} --shapes all" \
  VS="head= a=JM_PROBE_TILE=16,8,4,2 b=JM_PROBE_TILE=16,8,3,2 c=JM_PROBE_TILE=8,16,4,2 d=JM_PROBE_TILE=8,16,3,2 e=JM_PROBE_TILE=16,16,2,2 f=JM_PROBE_TILE=16,4,6,2 head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-occ2.txt; grep -v "^ *$" /tmp/a.txt | tail -11; rm -f $OUT/ab-*.log $OUT/ab-*.json
