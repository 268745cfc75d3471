# Session 46 device run 4 (branch wip/sk-bulk): Nsight Compute stall reasons of the M = 16 kernel on
# 70B gate_up and 8B gate_up, fp16 and bf16, head and bulk: why the bulk kernels gain 3.5-5.6% in
# fp16 there and ~0 in bf16 (runs 2-3).
for act in float16 bfloat16; do
  for shape in 8192x57344 4096x28672; do
    echo "#### $act $shape"
    CACHE=/tmp/jmc-ncu NCU_M=16 NCU_SHAPES=$shape NCU_ARGS="--act $act" \
      VS="head=JM_NONE=0 bulk=JM_PROBE_BULK=1" bash tools/probe/ncu_env.sh
  done
done 2>&1 | grep -v "^cp: cannot stat" | tee $OUT/ncu-m16-bulk.txt
