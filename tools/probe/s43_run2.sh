# Session 43 device run 2: the autotuner on the H200's (d) misses (8B qkv and 8B o at M = 256, both
# dtypes; the planner has no H200 rules of its own) and on 70B qkv at M = 1 (1.55x its floor there):
# is there a faster candidate on this GPU? Every candidate's time goes to $OUT/tune.json.
source tools/probe/env.sh > /dev/null
timeout ${TUNE_TIMEOUT:-500} python3 tools/probe/tune_rows.py --m ${MS:-256} --shapes ${SHAPES:-4096x6144,4096x4096} \
  --act float16,bfloat16 --jobs 16 --deadline-s ${DEADLINE:-380} --json $OUT/tune.json 2>&1 | grep -v "^ *$" | tail -12
timeout 150 python3 tools/probe/tune_rows.py --m 1 --shapes 8192x10240 --act float16,bfloat16 --jobs 16 \
  --json $OUT/tune-m1.json 2>&1 | grep -v "^ *$" | tail -6
