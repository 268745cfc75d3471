"""The dequant + cuBLAS family (DequantSpec, templates/dequant.cu.j2): plan.py (its kernel's
spec), dequant_gemm.py (the dense workspace and the launcher), cublas.py (the GEMM)."""
