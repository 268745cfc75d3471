"""Exception types. Every user-facing failure is one of these, raised before any launch."""


class JitMarlinError(Exception):
    """Base class for jitmarlin errors."""


class InputError(JitMarlinError, ValueError):
    """An argument violates a constraint (dtype, shape, stride, alignment, device)."""


class UnsupportedError(JitMarlinError, NotImplementedError):
    """The combination of GPU architecture, quant type, group size or dtype is not supported."""


class CompileError(JitMarlinError, RuntimeError):
    """NVRTC rejected a generated kernel. Carries the spec, the target arch and the NVRTC log."""

    def __init__(self, message: str, *, spec=None, arch: str | None = None, log: str = ""):
        self.spec = spec
        self.arch = arch
        self.log = log
        detail = f"{message} (kernel {spec.name if spec is not None else '?'}, arch {arch})"
        if log:
            tail = "\n".join(log.strip().splitlines()[-20:])
            detail += f"\nNVRTC log (last lines):\n{tail}"
        super().__init__(detail)


class CaptureError(JitMarlinError, RuntimeError):
    """A call inside CUDA-graph capture would need a compile or an allocation."""


class TuneError(JitMarlinError, RuntimeError):
    """Autotuning could not measure the planner's own choice (jitmarlin.service.tune)."""
