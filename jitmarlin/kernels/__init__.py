"""Kernel families: each holds its spec, its plan rules and the glue to its template; planner.py
chooses among them (pure). Importing this package registers the families' KernelSource with the
store (jitmarlin.jit.sources) and the tuned choices' record kind (jitmarlin.jit.records)."""

from jitmarlin.kernels import moe, source, tuned  # noqa: F401  (registrations)
from jitmarlin.kernels.dequant import source as _dequant_source  # noqa: F401  (its renderer)
from jitmarlin.kernels.gemv import source as _gemv_source  # noqa: F401  (its renderer)
