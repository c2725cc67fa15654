"""llmbench: load generator, metrics, planner and gates for OpenAI-compatible LLM servers."""

__version__ = "0.1.0"
