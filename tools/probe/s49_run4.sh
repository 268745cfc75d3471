# Session 49 device run 4 (two H200s, warm from run 3): run 3's torch-facing selection again with the
# second-GPU test's capture stream made on GPU 1 (run 3's failure: torch.cuda.graph's default
# capture stream had been made on GPU 0 by an earlier test, so the capture ran on GPU 0's stream).
source tools/probe/env.sh >/dev/null
timeout 300 python3 -m pytest tests/test_api.py tests/test_torch.py -m gpu -k "torch or graph or stream or pdl or capture or second_gpu" \
    -q -p no:cacheprovider -o addopts="" -rfE 2>&1 | tail -5
