# Session 43 device run 6: the Stream-K kernel's bf16 raw codes (KernelSpec.raw_codes, on main since
# entry 60) with x of mean 3 (the cancellation that failed the fp16 gemv form in run 5), and its
# other GPU tests; the errors of each case printed.
source tools/probe/env.sh > /dev/null
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/test_api.py -m gpu -k "raw_codes" -q -p no:cacheprovider -o addopts="" -rfE > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR|^E " "$OUT/pytest.log" | head -10
python3 - <<'PY'
import sys; sys.path.insert(0, "tests")
import numpy as np, jitmarlin
from jitmarlin.spec import KernelSpec
from gpu_cases import rel, run_forced
rng = np.random.default_rng()
qw = jitmarlin.quantize(rng.standard_normal((4096, 14336)) * 0.02, "uint4b8", 128, scale_dtype="bfloat16")
for x_mean in (0.0, 1.0, 3.0, 10.0):
    seed = int(rng.integers(1, 1 << 30))
    e = [rel(*run_forced(qw, 16, "bfloat16", KernelSpec("sm80", "uint4b8", "bfloat16", 8, 1, tn, 16, st),
                         np.random.default_rng(seed), bias=False, x_mean=x_mean)) for tn, st in ((16, 3), (8, 4))]
    print(f"x mean {x_mean:5.1f}: raw codes {e[0]:.3e}, dequantised weights {e[1]:.3e}")
PY
