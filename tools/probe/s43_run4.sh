# Session 43 device run 4: what the H200's SMs stream at M = 1 (entry 83's open question on 70B
# qkv, 42 MB as 160 column blocks): the plain read kernel of read_floor.py over grids of 80 (the
# gemv plan's SM count), 132, 160 and 264 blocks, then the gemv access pattern of 160 column blocks
# with one and two 16-warp blocks a column block.
source tools/probe/env.sh > /dev/null
python3 tools/probe/read_floor.py --mb 41.9,235 --grids 80,132,160,264
python3 -c "
import sys; sys.path.insert(0, 'tools/probe')
import read_floor as r
r.pattern([('70B qkv', 160, 512, 1), ('70B qkv', 160, 512, 2), ('70B gate_up', 896, 512, 1)])"
# (second call) the gemv kernel at M = 1 without its loop's arithmetic (gv_nocomp, timing only) on
# 70B qkv and two other layers: what the arithmetic costs on the H200 beside the partition's read.
if [ -n "${NOCOMP:-}" ]; then
( RUN_TIMEOUT=120 MS=1 BARGS="--act float16,bfloat16 --shapes 8192x10240,28672x8192,8192x57344" \
  VS="head= nc=JM_PROBE_SUB=gv_nocomp head2= nc2=JM_PROBE_SUB=gv_nocomp" bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab-nocomp.txt; grep -v "^ *$" /tmp/a.txt | tail -8; rm -f $OUT/ab-*.log $OUT/ab-*.json
fi
