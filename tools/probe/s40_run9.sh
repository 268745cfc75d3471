# Session 40 device run 9: the autotuner at M = 16 with K-tiles of 512 among its candidates, on
# 8B qkv, 8B down and 70B qkv, both dtypes (does it keep the planner's kernels, and does any
# candidate fail its output check).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$PWD:/tmp/site" JITMARLIN_CACHE_DIR=/tmp/jmcache
t0=$(date +%s)
timeout ${TUNE_TIMEOUT:-330} python3 -m jitmarlin tune --shapes ${SHAPES:-4096x6144,14336x4096,8192x10240} --quant uint4b8 --group 128 \
  --act float16,bfloat16 --m 16 --jobs 16 > $OUT/tune.log 2>&1
echo "tune rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "default|tuning" $OUT/tune.log | cut -c1-260 | tail -8
