"""Serving: the OpenAI-compatible HTTP server, its request protocol, the engine loop thread and /metrics."""
