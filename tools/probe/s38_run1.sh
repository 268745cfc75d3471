# Session 38 device run 1: the GPU tests session 37's run 7 did not reach, and the 256 x 128
# plans at M <= 256 and short-row-block tests (their name check was fixed after its last GPU run),
# in one pytest call.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout ${T:-300} python3 -m pytest -q -p no:cacheprovider -o addopts="" -rfE \
  "tests/test_wgmma.py::test_planners_m64_plans_match_reference[8192-8192-m4n8k4s4o2]" \
  tests/test_wgmma.py::test_large_problem_split_over_all_sms \
  "tests/test_gemv.py::test_pair_plans_match_reference[float8_e4m3fn]" \
  "tests/test_gemv.py::test_pair_plans_match_reference[nvfp4]" \
  "tests/test_gemv.py::test_pair_plans_match_reference[mxfp4]" \
  tests/test_gemv.py::test_pair_plan_through_linear_and_a_cuda_graph \
  tests/test_gemv.py::test_hybrid_plan_replays_in_a_cuda_graph \
  tests/test_tune.py::test_gpu_tune_then_linear_uses_the_choice \
  tests/test_tune.py::test_gpu_autotune_env_tunes_on_first_call \
  tests/test_tune.py::test_gpu_tuner_checks_a_winner_against_the_planners_kernel \
  tests/test_tune.py::test_gpu_whole_tile_candidates_match_reference > $OUT/pytest-rest.log 2>&1
echo "rest rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "^FAILED|^ERROR" $OUT/pytest-rest.log | head; tail -2 $OUT/pytest-rest.log
t0=$(date +%s)
timeout ${T2:-200} python3 -m pytest tests/test_wgmma.py -m gpu -k "tall_unsplit or short_row_block" -q -p no:cacheprovider \
  -o addopts="" -rfE > $OUT/pytest-tall-tail.log 2>&1
echo "tall/tail rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "^FAILED|^ERROR" $OUT/pytest-tall-tail.log | head; tail -2 $OUT/pytest-tall-tail.log
