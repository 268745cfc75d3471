"""The mixture-of-experts family: the routing module (alignment, combine) and the grouped expert
GEMMs, with their specs, plan rules and template glue. Importing it registers the family's spec
kinds and renderers."""

from jitmarlin.kernels.moe import source, tuned  # noqa: F401  (registrations: renderers, record kind)
from jitmarlin.kernels.moe.plan import MoEPlan, MoEProblem, plan_moe
from jitmarlin.kernels.moe.spec import MoEGemvSpec, MoERouteSpec, MoESpec
from jitmarlin.kernels.moe.wgmma import MoEWgmmaSpec

__all__ = ["MoEGemvSpec", "MoEPlan", "MoEProblem", "plan_moe", "MoERouteSpec", "MoESpec", "MoEWgmmaSpec"]
