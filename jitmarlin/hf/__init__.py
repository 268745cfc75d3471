"""Load quantized Hugging Face checkpoints (GPTQ, AWQ, compressed-tensors pack-quantized and NVFP4,
ModelOpt NVFP4, gpt-oss MXFP4; dense and mixture-of-experts models).

    model = jitmarlin.hf.load("path/to/Llama-3-8B-GPTQ")          # transformers model, MarlinLinear layers
    scheme = jitmarlin.hf.read_quant_config(json.load(open("config.json")))
    for name, item in jitmarlin.hf.read_checkpoint(path, scheme): ...   # QuantizedWeight, MoEExperts or ndarray
    model = jitmarlin.hf.load_gguf("model-Q4_K_M.gguf")             # llama.cpp GGUF (Llama, Qwen2/3)

`read_quant_config` and `read_checkpoint` need NumPy only; the GGUF readers (`open_gguf`,
`read_gguf`) need NumPy and the gguf package; `load` and `load_gguf` need the `hf` extra
(torch, transformers, safetensors; and gguf for load_gguf), imported when they are called.
"""

from jitmarlin.hf.checkpoint import MoEExperts, RawBits, read_checkpoint, read_scheme
from jitmarlin.hf.config import QuantScheme, read_quant_config
from jitmarlin.hf.gguf_load import load_gguf, open_gguf, read_gguf
from jitmarlin.hf.load import load

__all__ = [
    "load",
    "load_gguf",
    "open_gguf",
    "read_gguf",
    "read_quant_config",
    "read_scheme",
    "read_checkpoint",
    "QuantScheme",
    "RawBits",
    "MoEExperts",
]
