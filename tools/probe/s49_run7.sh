# Session 49 device run 7 (two H200s): the launchers make their device current (moved from linear()'s torch path);
# the two-GPU tests, then the torch-facing GPU tests of test_api.py and test_torch.py.
source tools/probe/env.sh > /dev/null
bash tools/probe/s49_run3.sh 2>&1 | grep -v "^GPU\|cannot stat"
