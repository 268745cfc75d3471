# A/B device session against a whole earlier tree (Python and templates: use it where the
# planner or a spec changed, which tools/probe/ab.sh's template-only head cannot follow):
#   rm -rf tools/probe/head_tree && mkdir -p tools/probe/head_tree &&
#   git archive HEAD jitmarlin templates tools/bench tools/benchlib.py | tar -x -C tools/probe/head_tree
# (git-ignored: name it in the device run's carry). TESTS=1 runs tests/test_gemv.py's GPU tests
# first; VS lists the runs: headN = that tree's tools/bench, newN = the working tree's, anything
# s-NAME[.N] = variant_bench.py with JM_PROBE_SUB=NAME, t-TN_TK_STAGES = with JM_PROBE_TILE, c-LOAD = with JM_PROBE_CLUSTER, w-TN_TK_STAGES[.N] = with JM_PROBE_WHOLE, h-off|split[.N] = with JM_PROBE_HYBRID, l-PCT[.N] = with JM_PROBE_WHOLE_LOAD, else = variant_bench.py with JM_PROBE_GEMV set
# to it (underscores for commas); MS the M values.
source tools/probe/env.sh 2>/dev/null
if [ "${TESTS:-1}" = 1 ]; then
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-330} python3 -m pytest tests/test_gemv.py -m gpu -q -p no:cacheprovider -o addopts="" -rfE -x > "$OUT/pytest-gemv.log" 2>&1
echo "pytest gemv rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest-gemv.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest-gemv.log" | head -10
fi
run() { local tag=$1; shift; t0=$(date +%s); env "$@" timeout ${RUN_TIMEOUT:-150} python3 $BENCH --json "$OUT/ab-$tag.json" --m ${MS:-1,8} --peers cublas ${BARGS:-} > "$OUT/ab-$tag.log" 2>&1; echo "$tag rc=$? $(( $(date +%s)-t0 )) s"; }
VS="${VS:-head1 new1 head2 new2}"
for v in $VS; do
  case $v in
    head*) BENCH=tools/probe/head_tree/tools/bench run $v PYTHONPATH=tools/probe/head_tree:/tmp/site ;;
    new*) BENCH=tools/bench run $v X=1 ;;
    s-*) v2=${v#s-}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_SUB=${v2%.*} ;;
    t-*) v2=${v#t-}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_TILE=${v2//_/,} ;;
    c-*) v2=${v#c-}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_CLUSTER=${v2%%_*} ;;
    h-*) v2=${v#h-}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_HYBRID=${v2%.*} ;;
    l-*) v2=${v#l-}; v2=${v2%.*}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_WHOLE_LOAD=$v2 ;;
    w-*) v2=${v#w-}; v2=${v2%.*}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_WHOLE=${v2//_/,} ;;
    f-*) v2=${v#f-}; v2=${v2%.*}; BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_WGMMA=${MS//,/+}:${v2//_/,} ;;
    *) BENCH="tools/probe/variant_bench.py bench" run $v JM_PROBE_GEMV=${v//_/,} ;;
  esac
done
python3 tools/probe/ab_table.py "$OUT" $VS
