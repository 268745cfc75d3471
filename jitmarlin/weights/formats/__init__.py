"""Converters from real checkpoint tensors to QuantizedWeight, one module per format.

Each takes the tensors as stored (NumPy, CuPy or torch), unpacks them to one code per weight
and ends in jitmarlin.weights.quant.from_codes; jitmarlin.dequantize of the result reproduces the
format's own dequantisation (see each docstring for the layout and the formula). moe.py's
moe_from_* stack a MoE layer's experts, converted one by one, into the (w13, w2) MoEWeight pair.
"""

from .awq import from_awq
from .compressed_tensors import from_compressed_tensors
from .gguf import from_gguf
from .gptq import from_gptq
from .hqq import from_hqq
from .moe import moe_from_experts, moe_from_gguf, moe_from_gpt_oss, moe_from_nvfp4
from .mxfp4 import from_mxfp4
from .nvfp4 import from_nvfp4

__all__ = [
    "from_gptq",
    "from_awq",
    "from_compressed_tensors",
    "from_hqq",
    "from_gguf",
    "from_nvfp4",
    "from_mxfp4",
    "moe_from_experts",
    "moe_from_gpt_oss",
    "moe_from_gguf",
    "moe_from_nvfp4",
]
