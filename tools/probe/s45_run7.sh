# Runs from branch wip/sk-16warps. Session 45 device run 7 (H200): run 5's 16-warp Stream-K kernels
# paid each stage's fetch addressing in all 16 warps (about 100 instructions a warp and stage that do
# not shrink with fewer copies a thread); now only the first 256 threads fetch (gemm.cu.j2's
# FETCHERS) and the other 8 warps only compute. The GPU tests of the 16-warp kernels, then A/B at
# M = 16, fp16 (head: the planner's 8-warp kernels).
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout 150 python3 -m pytest tests/test_api.py -m gpu -k "16warp or k512" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
( RUN_TIMEOUT=120 MS=16 BARGS="--act ${ACT:-float16} --shapes all" \
  VS="head= a=JM_PROBE_TILE=16,16,3,1,512 b=JM_PROBE_TILE=16,16,4,1,512 c=JM_PROBE_TILE=16,32,2,1,512 d=JM_PROBE_TILE=8,32,3,1,512 e=JM_PROBE_TILE=16,16,5,1,512 head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-16warps-fetch8.txt; grep -v "^ *$" /tmp/a.txt | tail -11; rm -f $OUT/ab-*.log $OUT/ab-*.json
