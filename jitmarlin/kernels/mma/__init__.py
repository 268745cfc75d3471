"""The mma.sync Stream-K GEMM family (KernelSpec, templates/gemm.cu.j2): plan rules and the Stream-K
plan geometry every fused family uses, in plan.py."""
