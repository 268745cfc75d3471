# Session 50 device run 1 (H200): x by TMA boxes (KernelSpec.xbox) is planned for bf16 only: at
# M = 12 / 16 with the planner's 3 stages fp16 lost up to 2.6% with it (entry 93), its shorter step
# waiting on one barrier for x and the weights. Left open: fp16 with x's boxes at other depths. The
# autotuner over the planner's decode tiles at M = 16, both dtypes, every depth, with and without
# weight / x boxes: does any boxed fp16 kernel beat the planner's by more than the tuner's margin?
source tools/probe/env.sh > /dev/null
timeout ${TUNE_TIMEOUT:-420} python3 tools/probe/tune_rows.py --m 16 --shapes all --act float16,bfloat16 --jobs 16 \
  --paths sm80 --tiles 1x16x16,1x8x32,1x4x32,1x8x16 \
  --deadline-s ${DEADLINE:-380} --json $OUT/tune-m16.json 2>&1 | grep -v "^ *$" | tail -20
