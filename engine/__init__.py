"""The bundled reference engine: paged KV cache, continuous batching, an OpenAI-compatible server."""

__version__ = "0.1.0"
