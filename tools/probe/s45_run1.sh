# Session 45 device run 1 (H200): at M = 16 every row runs as long on the H200 as on the H100
# (session 41 / 42 runs of record: 70B gate_up 85.5 / 84.3 us, 8B down 14.9 / 14.5, 70B qkv 20.2 /
# 19.2), so the Stream-K kernel there is held by the SMs, not by HBM. (1) The autotuner over every
# candidate at M = 16 (fp16, all eight layers): is another kernel (the 16-row gemv with its 16
# warps an SM, more stages, other tiles) faster on this GPU? (2) Nsight Compute stall reasons of the
# planner's M = 16 kernel on 70B gate_up and 8B down.
source tools/probe/env.sh > /dev/null
timeout ${TUNE_TIMEOUT:-380} python3 tools/probe/tune_rows.py --m 16 --shapes all --act ${ACT:-float16} --jobs 16 \
  --deadline-s ${DEADLINE:-330} --json $OUT/tune-m16.json 2>&1 | grep -v "^ *$" | tail -12
if [ "${NCU:-1}" = 1 ]; then
  for s in 8192x57344 14336x4096; do
    CACHE=/tmp/jmc-ncu NCU_M=16 NCU_SHAPES=$s VS="head=JM_NONE=0" bash tools/probe/ncu_env.sh 2>&1 | sed "s/^== head/== $s M=16/"
  done > $OUT/ncu-m16.txt
  cat $OUT/ncu-m16.txt | cut -c1-150
fi
