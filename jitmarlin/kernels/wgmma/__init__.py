"""The Hopper warpgroup-MMA family (KernelSpec.wgmma, templates/wgmma.cu.j2): plan rules in plan.py."""
