"""The bundled reference engine: paged KV cache, continuous batching, an OpenAI-compatible server.

    from engine import LLM, SamplingParams
    outputs = LLM("path/to/checkpoint").generate(["Hello"], SamplingParams(temperature=0, max_tokens=16))
"""

__version__ = "0.1.0"
PROG_NAME_ENV = "ENGINE_PROG_NAME"  # how `python -m engine.serve/quant` name themselves (`llmbench serve` sets it)

from engine.config import EngineConfig, SamplingParams  # noqa: E402
from engine.llm import LLM, CompletionOutput, RequestOutput  # noqa: E402

__all__ = ["LLM", "CompletionOutput", "EngineConfig", "RequestOutput", "SamplingParams", "__version__"]
