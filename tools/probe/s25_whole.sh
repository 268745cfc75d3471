# Session 25: whole-tile plans (KernelSpec.whole) as autotuner candidates at decode: their GPU
# test, the tuner on 8B qkv at M = 16 (Stream-K and whole-tile plans of the 64- and 128-wide
# tiles), then tools/bench on that row with the stored choice (the table names the planner's kernel).
source tools/probe/env.sh
t0=$(date +%s)
timeout 150 python3 -m pytest tests/test_tune.py -m gpu -k whole -q -p no:cacheprovider -o addopts="" -rfE -x > "$OUT/pytest-whole.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -1 "$OUT/pytest-whole.log"; grep -E "^FAILED|^E " "$OUT/pytest-whole.log" | head -5
python3 tools/probe/tune_rows.py --m 16 --act float16,bfloat16 --shapes ${SHAPES:-4096x6144} --paths sm80 \
    --tiles ${TILES:-1x4x16,1x8x16,1x4x8} --stages ${STAGES:-4,8} --json "$OUT/tune-whole.json" --deadline-s 200 2>&1 | grep -v "cache hit" | tail -40
timeout 200 python3 tools/bench --m 16 --shapes ${SHAPES:-4096x6144} --act float16,bfloat16 --peers cublas,tinygemm --json "$OUT/bench-whole.json" 2>&1 | tail -12
