# Session 45 device run 6 (H200): tools/probe/wgmma_gemv.py's new `v1` configs: the wgmma decode probe
# of entry 67 with the next row dequantised while the last row's wgmmas run (wait<1>, two fragment
# sets, 3 warpgroups at 168 registers) beside one wait a row and the dequantisation alone.
timeout 200 python3 tools/probe/wgmma_gemv.py --configs v1 --layers 8B_down,70B_qkv,8B_gate_up,8B_qkv,70B_o,8B_o \
  2>&1 | grep -v "^ptxas" | tee /tmp/o.txt | cut -c1-220; mkdir -p $OUT; cp /tmp/o.txt $OUT/wgmma-gemv-v1.txt
