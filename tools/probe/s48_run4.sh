# Session 48 run 4 (branch s48-xbox, the weights' box before x's): the boxed GPU tests, then the run
# of record (both dtypes, no test suites: session 47's run 7 ran them all on main's kernels).
source tools/probe/env.sh > /dev/null
timeout 200 python3 -m pytest tests/test_api.py -m gpu -k "bulk or x_boxes" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -2
OUT=$OUT TESTS=0 BENCH_TIMEOUT=420 BENCH_ARGS="--act float16,bfloat16" bash tools/gpu_session.sh
