# Session 45 device run 4 (H200): what one mma.sync m16n8k16 costs a sub-partition, alone and beside
# ALU work, with 2 and 4 warps a sub-partition (tools/probe/hmma_rate.py; no jitmarlin kernel).
python3 tools/probe/hmma_rate.py 2>&1 | tail -5
