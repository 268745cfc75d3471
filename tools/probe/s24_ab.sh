# Session 24 A/B: head (tools/probe/head_tree) against the working tree at M = 16 on the H100,
# then (A100=1) the mma.sync kernel at M = 64 / 256 planned as an A100 (JITMARLIN_EMULATE=a100).
TESTS=0 MS=${MS:-16} BARGS="--act ${ACT:-float16}" VS="${VS:-head1 new1 head2 new2}" bash tools/probe/ab_tree.sh
if [ "${A100:-1}" = 1 ]; then
  echo "== JITMARLIN_EMULATE=a100"
  JITMARLIN_EMULATE=a100 TESTS=0 MS=${MS100:-64,256} BARGS="--act float16 --shapes ${SHAPES100:-8b}" VS="${VS100:-head1 new1}" bash tools/probe/ab_tree.sh
fi
