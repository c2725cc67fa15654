"""Quantization: AWQ/GPTQ packing formats, quantizing at load, the offline `quantize` command, perplexity."""
