# Session 43 device run 8: the autotuner at M = 1 on the big layers the H200's gemv arithmetic holds
# back most (70B gate_up, 70B down, 8B gate_up; entry 84), both dtypes: a faster candidate here?
source tools/probe/env.sh > /dev/null
timeout ${TUNE_TIMEOUT:-300} python3 tools/probe/tune_rows.py --m 1 --shapes ${SHAPES:-8192x57344,28672x8192,4096x28672} \
  --act float16,bfloat16 --jobs 16 --deadline-s 240 --json $OUT/tune-m1.json 2>&1 | grep -v "^ *$" | tail -8
