# Session 45 device run 2 (H200): what the M = 16 Stream-K kernel's time is made of (run 1: 52%
# issue-active, ~20 instructions a warp and word, stalls wait / math-pipe throttle / dispatch).
# (1) A/B at M = 16, fp16, the eight layers: head, no dequantisation (nodq: the codes as they lie,
# timing only), no MMAs (sk_nomma: one xor a tile instead, timing only), neither, head again.
# (2) tools/probe/wgmma_gemv.py (entry 67's probe: wgmma m64n16k16 fed from the weight stream), whose
# H100 outcome was a tie with Stream-K, on the H200.
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=120 MS=16 BARGS="--act float16 --shapes all" \
  VS="head= nodq=JM_PROBE_SUB=nodq nomma=JM_PROBE_SUB=sk_nomma neither=JM_PROBE_SUB=nodq,sk_nomma head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-parts.txt; grep -v "^ *$" /tmp/a.txt | tail -11; rm -f $OUT/ab-*.log $OUT/ab-*.json
timeout 200 python3 tools/probe/wgmma_gemv.py --configs g3 --layers 8B_down,70B_qkv,8B_gate_up,8B_qkv,70B_o,8B_o,70B_down \
  2>&1 | tee $OUT/wgmma-gemv.txt | cut -c1-250
