"""The decode GEMV family (GemvSpec, templates/gemv.cu.j2): plan rules in plan.py."""
