"""Weights: quant types, packing, QuantizedWeight / quantize / dequantize and the checkpoint
converters (formats/)."""
