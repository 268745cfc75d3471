# Session 29: decode plans through thread-block clusters. The capacities of every cluster size
# (tools/probe/clusters.py), the GPU test of the cluster kernels (TESTK, test_api.py), then
# tools/probe/ab_tree.sh with VS / MS / BARGS (c-LOAD[_N]: planner.CLUSTER_DECODE with that
# CLUSTER_MAX_LOAD). Kernel cache kept in /tmp/jmc-s29 on a warm machine.
export CACHE=/tmp/jmc-s29; mkdir -p $CACHE
source tools/probe/env.sh
[ "${CAPS:-1}" = 1 ] && python3 tools/probe/clusters.py
probe_tests_and_ab test_api.py
