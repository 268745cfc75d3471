# Runs from branch wip/f16-subnormal (its GemvSpec.raw, variant_bench knobs and tools/probe/raw_acc.py).
# Session 44 device run 1: fp16 subnormal codes (branch wip/f16-subnormal). A nibble masked into a
# half with a zero exponent is the exact v 2^-24 (16 v 2^-24 in bits 4..7, x's k 8..15 scaled by
# 1/16 once a k16 row); the offset 8 sum(x) comes out of each group's sums (one MMA a k16 row).
# 5 integer instructions a word instead of 9, without entry 84's large offset. The gemv
# (JM_PROBE_GEMV_RAW=1) and the Stream-K kernel at M = 9..16 (JM_PROBE_RAW_F16=1), fp16 only:
# SASS counts, the GPU tests (the tensor cores' handling of subnormal inputs), errors against x's
# mean, then A/B at M = 1, 8 and 16 on the eight bench layers.
source tools/probe/env.sh > /dev/null
nvidia-smi --query-gpu=name,temperature.gpu,clocks.sm --format=csv,noheader
for v in 0 1; do
  echo "sass gemv f16 raw=$v: $(JM_PROBE_GEMV_RAW=$v python3 tools/probe/variant_bench.py probe/sass_count.py --m 1 --k 8192 --n 10240 --act float16 2>&1 | tail -1)"
  echo "sass streamk f16 raw=$v: $(JM_PROBE_RAW_F16=$v python3 tools/probe/variant_bench.py probe/sass_count.py --m 16 --k 8192 --n 57344 --act float16 --ops SHF,LOP3,HFMA2,HMUL2,HADD2,HMMA,LDSM,IMAD 2>&1 | tail -1)"
done
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/test_gemv.py tests/test_api.py -m gpu -k "raw_code" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
python3 - <<'PY'
import sys, dataclasses; sys.path.insert(0, "tests")
import numpy as np, jitmarlin
import jitmarlin.spec as S
from jitmarlin.spec import KernelSpec, GemvSpec
from gpu_cases import rel, run_forced
from test_gemv import _spec
rng = np.random.default_rng()
qw = jitmarlin.quantize(rng.standard_normal((4096, 14336)) * 0.02, "uint4b8", 128, scale_dtype="float16")
plain_g = _spec("uint4b8", "float16", 1, group=128, m=1)
for x_mean in (0.0, 1.0, 3.0, 10.0):
    seed = int(rng.integers(1, 1 << 30))
    S.RAW_CODES_ACTS = ("bfloat16", "float16")
    e = [rel(*run_forced(qw, 16, "float16", KernelSpec("sm80", "uint4b8", "float16", 8, 1, tn, 16, st),
                         np.random.default_rng(seed), bias=False, x_mean=x_mean)) for tn, st in ((16, 3), (8, 4))]
    S.RAW_CODES_ACTS = ("bfloat16",)
    e0 = rel(*run_forced(qw, 16, "float16", KernelSpec("sm80", "uint4b8", "float16", 8, 1, 16, 16, 3),
                         np.random.default_rng(seed), bias=False, x_mean=x_mean))
    eg = [rel(*run_forced(qw, 1, "float16", s, np.random.default_rng(seed), bias=False, x_mean=x_mean))
          for s in (dataclasses.replace(plain_g, raw=True), plain_g)]
    print(f"f16 x mean {x_mean:5.1f}: M=16 streamk subnormal {e[0]:.3e}, 256-wide plain {e0:.3e}, 128-wide {e[1]:.3e}; "
          f"M=1 gemv subnormal {eg[0]:.3e}, plain {eg[1]:.3e}")
PY
for ms in ${MSS:-1 16 8}; do
  if [ $ms = 16 ]; then k=JM_PROBE_RAW_F16=1; else k=JM_PROBE_GEMV_RAW=1; fi
( RUN_TIMEOUT=${RUN_TIMEOUT:-120} MS=$ms BARGS="--act float16 --shapes ${SHAPES:-all}" \
  VS="head= sub=$k head2= sub2=$k" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-m$ms.txt; grep -v "^ *$" /tmp/a.txt | tail -13
rm -f $OUT/ab-*.log $OUT/ab-*.json
done
