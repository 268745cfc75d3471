# Session 41 device run 3: planner.NARROW_DEEP_DECODE (128 x 512 Stream-K tiles where 256-wide
# tiles split over 8 blocks or more) on Llama-3-8B down and Qwen2.5-7B down (18944 x 3584), with a
# control the rule leaves (13824 x 5120, six sharers) forced to the same tile (t8k32s3), ABAB;
# then the GPU tests of K-tiles of 512 and of the whole decode plans (8B qkv: 6 stages now).
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-110} MS=${MS:-9,16} BARGS="--act ${ACTS:-float16,bfloat16} --shapes ${SHAPES:-14336x4096,18944x3584,13824x5120}" \
  VS="${VS:-new= off=JM_PROBE_SET=NARROW_DEEP_DECODE=False t8k32s3=JM_PROBE_TILE=8,32,3 new2= off2=JM_PROBE_SET=NARROW_DEEP_DECODE=False}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -13
rm -f $OUT/ab-*.log
timeout 200 python3 -m pytest tests/test_api.py -m gpu -k "k512 or whole_decode" -q -p no:cacheprovider -o addopts="" -rfE > $OUT/pytest.log 2>&1
echo "pytest rc=$?"; tail -3 $OUT/pytest.log; grep -E "^FAILED|^ERROR" $OUT/pytest.log | head
