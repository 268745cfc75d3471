"""jitmarlin: runtime-JIT Marlin-class mixed-precision GEMMs.

    qw = jitmarlin.quantize(w, "uint4b8", group_size=128)   # w: (out_features, in_features)
    y = jitmarlin.linear(x, qw)                              # x: (..., in_features) fp16/bf16 on GPU
    y = jitmarlin.moe(x, w13, w2, topk_weights, topk_ids)    # a MoE layer's routed experts

Kernels are specialised per GPU, quant type, group size and tile shape at first call, compiled
with NVRTC, cached on disk and launched from CuPy on the caller's stream. Large batches instead
expand the weight into a dense workspace (a generated kernel too) and multiply with cuBLAS.
"""

from jitmarlin._version import __version__
from jitmarlin.errors import CaptureError, CompileError, InputError, JitMarlinError, UnsupportedError
from jitmarlin.jit.profiles import PROFILES as profiles
from jitmarlin.jit.profiles import DeviceProfile, get_profile
from jitmarlin.kernels.spec import DequantSpec, KernelSpec, spec_from_canonical
from jitmarlin.ops.linear import PrewarmResult, linear, plan_for
from jitmarlin.ops.moe import moe
from jitmarlin.service.fleet import prewarm
from jitmarlin.weights.formats import (
    from_awq,
    from_compressed_tensors,
    from_gguf,
    from_gptq,
    from_hqq,
    from_mxfp4,
    from_nvfp4,
    moe_from_experts,
    moe_from_gguf,
    moe_from_gpt_oss,
    moe_from_nvfp4,
)
from jitmarlin.weights.moe import MoEWeight, dequantize_moe, quantize_moe
from jitmarlin.weights.qtypes import QTYPES
from jitmarlin.weights.quant import QuantizedWeight, dequantize, quantize

__all__ = [
    "__version__",
    "linear",
    "moe",
    "prewarm",
    "plan_for",
    "PrewarmResult",
    "quantize",
    "dequantize",
    "QuantizedWeight",
    "KernelSpec",
    "DequantSpec",
    "spec_from_canonical",
    "DeviceProfile",
    "get_profile",
    "profiles",
    "QTYPES",
    "JitMarlinError",
    "InputError",
    "UnsupportedError",
    "CompileError",
    "CaptureError",
    "from_gptq",
    "from_awq",
    "from_compressed_tensors",
    "from_hqq",
    "from_gguf",
    "from_nvfp4",
    "from_mxfp4",
    "MoEWeight",
    "quantize_moe",
    "dequantize_moe",
    "moe_from_experts",
    "moe_from_gpt_oss",
    "moe_from_gguf",
    "moe_from_nvfp4",
]
