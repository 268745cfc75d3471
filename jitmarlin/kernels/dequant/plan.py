"""The dequant + cuBLAS family's plan rule: its dequantisation kernel (DequantSpec). When the
route is taken is the chooser's decision (planner.dequant_route). Pure."""

from __future__ import annotations

from jitmarlin.jit.profiles import DeviceProfile
from jitmarlin.kernels.plan_base import check_problem, group_blocks
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.spec import DequantSpec


def dequant_spec(profile: DeviceProfile, p: Problem) -> DequantSpec:
    """The dequantisation kernel of the large-M route for problem `p` on `profile`."""
    check_problem(profile, p)
    return DequantSpec(profile.path, p.qtype, p.act, group_blocks(p))
