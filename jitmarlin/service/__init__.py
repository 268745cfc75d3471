"""The service layer: fleet prewarm, the autotuner and its GPU measurements, the CLI. Importing
it registers the GPU autotuner with jitmarlin.kernels.tuned (JITMARLIN_AUTOTUNE=1)."""

from jitmarlin.service import autotune  # noqa: F401  (registers the autotuner)
