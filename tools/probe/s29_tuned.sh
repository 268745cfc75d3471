# Session 29: the decode rows with the autotuner's choices. tools/probe/tune_rows.py tunes the
# bench's M = 16 rows over the mma.sync candidates (Stream-K, whole-tile and late-publish plans of
# TILES16 x STAGES16) and stores the winners in the kernel cache; tools/bench then runs M = 1 and
# 16 (all peers) on that cache, so a row that ran a tuned kernel names the planner's too.
export CACHE=/tmp/jmc-s29; mkdir -p $CACHE
source tools/probe/env.sh
t0=$(date +%s)
python3 tools/probe/tune_rows.py --m 16 --act float16,bfloat16 --paths sm80 \
    --tiles ${TILES16:-1x4x16,1x8x8,1x8x16,1x16x8,1x16x16} --stages ${STAGES16:-3,4,6,8} \
    --json "$OUT/tune-m16.json" --deadline-s ${TUNE_S:-300} 2>&1 | grep -v "cache hit" | tail -40
echo "tune: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-240} python3 tools/bench --m 1,16 --act float16,bfloat16 --json "$OUT/bench-tuned-m1-16.json" > "$OUT/bench-tuned.log" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^\(" "$OUT/bench-tuned.log"
cp -r /tmp/jmcache/. $CACHE/
