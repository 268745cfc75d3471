# Session 28: hybrid wgmma plans. TESTK: a -k filter of tests/test_wgmma.py's GPU tests (empty: none);
# then tools/probe/ab_tree.sh with VS / MS / BARGS. The kernel cache persists in /tmp/jmc-s28 between
# the commands of one warm machine (env.sh rebuilds /tmp/jmcache from $CACHE each time).
export CACHE=/tmp/jmc-s28; mkdir -p $CACHE
source tools/probe/env.sh
probe_tests_and_ab test_wgmma.py
