# Session 43 device run 7: the SASS of the M = 1 gemv kernels of 70B gate_up (fp16, bf16) and 70B
# qkv (fp16), whose loops' arithmetic sets their time on the H200 (entry 84), to $OUT.
source tools/probe/env.sh > /dev/null
python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 57344 --act float16 --dump $OUT/gemv-70b-gate-up-f16.sass | tail -1
python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 57344 --act bfloat16 --dump $OUT/gemv-70b-gate-up-bf16.sass | tail -1
python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 10240 --act float16 --dump $OUT/gemv-70b-qkv-f16.sass | tail -1
