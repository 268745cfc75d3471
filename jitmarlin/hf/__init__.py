"""Load quantized Hugging Face checkpoints (GPTQ, AWQ, compressed-tensors pack-quantized).

    model = jitmarlin.hf.load("path/to/Llama-3-8B-GPTQ")          # transformers model, MarlinLinear layers
    scheme = jitmarlin.hf.read_quant_config(json.load(open("config.json")))
    for name, item in jitmarlin.hf.read_checkpoint(path, scheme): ...   # QuantizedWeight or ndarray

`read_quant_config` and `read_checkpoint` need NumPy only; `load` needs the `hf` extra
(torch, transformers, safetensors), imported when it is called.
"""
from jitmarlin.hf.checkpoint import RawBits, read_checkpoint
from jitmarlin.hf.config import QuantScheme, read_quant_config
from jitmarlin.hf.load import load

__all__ = ["load", "read_quant_config", "read_checkpoint", "QuantScheme", "RawBits"]
