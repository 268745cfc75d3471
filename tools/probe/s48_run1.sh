# Session 48 run 1 (ran on branch wip/sk-xtma, whose variant_bench.py has xtma_off; session 47 wrote it as xtma_ab.sh).
# Branch wip/sk-xtma (session 47, built and checked on the CPU emulator only; ran on no GPU): the
# boxed decode Stream-K kernel (KernelSpec.bulk, sm_90) takes x as TMA boxes too (TK / 4 boxes of
# 16 rows x 64 halves with the 128-byte swizzle, on the stage's mbarrier; stages 1024-byte aligned).
# To run first on a GPU: (1) the bulk GPU tests and bulk_check.py; (2) A/B/A/B at M = 16, both
# dtypes, the six boxed layers: x by cp.async as on main (xtma_off) against head.
source tools/probe/env.sh > /dev/null
timeout 200 python3 -m pytest tests/test_api.py -m gpu -k "bulk or raw_codes or k512" -q -p no:cacheprovider -o addopts="" 2>&1 | tail -2
timeout 240 python3 tools/probe/bulk_check.py 2>&1 | tee $OUT/bulk-check.txt | tail -1
( RUN_TIMEOUT=150 MS=${MS:-16} BARGS="--act float16,bfloat16 --shapes 4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192" \
  VS="off=JM_PROBE_SUB=xtma_off head= off2=JM_PROBE_SUB=xtma_off head2=" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m16-xtma.txt; grep -v "^ *$" /tmp/a.txt | tail -14; rm -f $OUT/ab-*.log $OUT/ab-*.json
