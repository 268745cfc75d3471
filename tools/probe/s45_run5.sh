# Runs from branch wip/sk-16warps (gemm.cu.j2 with 512-thread blocks: KernelSpec.threads 512, four or
# more K-warps, their sums in two rounds where one does not fit a stage).
# Session 45 device run 5 (H200): tools/probe/hmma_rate.py (run 4) put an mma.sync m16n8k16 at
# 6.6 cycles a sub-partition alone, and its cost and the ALU work's adding up with 2 warps a
# sub-partition (8 ALU instructions a HMMA: 14.6 cycles) but overlapping better with 4 (11.0). The
# M = 16 Stream-K kernel runs 2 (194 registers); two blocks an SM lost (run 3). Here one block of 16
# warps (128 registers): the GPU tests of the 16-warp kernels, then A/B at M = 16, fp16.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout 150 python3 -m pytest tests/test_api.py -m gpu -k "16warp" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
( RUN_TIMEOUT=120 MS=16 BARGS="--act ${ACT:-float16} --shapes all" \
  VS="head= a=JM_PROBE_TILE=16,16,3,1,512 b=JM_PROBE_TILE=16,16,4,1,512 c=JM_PROBE_TILE=16,16,5,1,512 d=JM_PROBE_TILE=16,32,2,1,512 e=JM_PROBE_TILE=8,32,3,1,512 f=JM_PROBE_TILE=8,16,6,1,512 head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-16warps.txt; grep -v "^ *$" /tmp/a.txt | tail -11; rm -f $OUT/ab-*.log $OUT/ab-*.json
