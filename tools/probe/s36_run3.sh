# Session 36 device run 3: GPU tests of the wgmma kernel (half-tile plans through the workspace
# and in clusters of two), then A/B of the half-tile plans: none (off), sums through L2 (l2),
# sums through distributed shared memory (dsm, the working tree's default).
mkdir -p .jmcache
source tools/probe/env.sh
[ "${TESTS:-1}" = 1 ] && TESTF=test_wgmma.py TESTK="${TESTK:-gpu}" VS= probe_tests_and_ab test_wgmma.py
MS=${MS:-256,1024} BARGS="${BARGS:---act float16,bfloat16 --shapes 4096x4096,14336x4096,28672x8192,4096x6144}" \
VS="${VS:-off=JM_PROBE_HALVES=off l2=JM_PROBE_HALVES=l2 dsm= off2=JM_PROBE_HALVES=off l22=JM_PROBE_HALVES=l2 dsm2=}" \
  bash tools/probe/env_ab.sh
