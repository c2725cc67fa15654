"""Streaming OpenAI-compatible requests over one shared aiohttp session, timed as vLLM times them."""

from __future__ import annotations

import json
import time

import aiohttp

from llmbench.datasets import Request
from llmbench.records import RequestRecord

BACKENDS = {"openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}


def make_session(max_connections: int = 0, timeout: float = 600.0) -> aiohttp.ClientSession:
    """One session per process: a sized pool, long keep-alive, a large read buffer (vllm#39963)."""
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=60, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout),
                                 read_bufsize=2**20)


def payload(backend: str, model: str, req: Request, ignore_eos: bool, temperature: float | None,
            messages: list[dict] | None = None, extra: dict | None = None) -> dict:
    body: dict = {"model": model, "stream": True,
                  "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if backend == "openai-chat":
        body["messages"] = messages or req.messages or [{"role": "user", "content": req.prompt}]
        body["max_completion_tokens"] = req.output_len
    else:
        body["prompt"] = req.prompt if req.prompt is not None else \
            "\n".join(m["content"] for m in (messages or req.messages or []))
        body["max_tokens"] = req.output_len
    if ignore_eos:
        body["ignore_eos"] = True
    if temperature is not None:
        body["temperature"] = temperature
    if extra:
        body.update(extra)
    return body


class StreamParser:
    """Turns the lines of an OpenAI SSE stream into a record, whatever transport read them (aiohttp here,
    requests in the Locust transport): chunk times, tokens per chunk, usage, errors, the text."""

    def __init__(self, record: RequestRecord, chat: bool) -> None:
        self.record, self.chat = record, chat
        self.pieces: list[str] = []
        self.last_usage = 0

    def feed(self, line: bytes, now: float) -> bool:
        """Handle one line received at `now`; True once the stream is over."""
        line = line.strip()
        if not line.startswith(b"data:"):
            return False
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        chunk = json.loads(data)
        if "error" in chunk:
            self.record.error = error_text(json.dumps(chunk), self.record.status or 200)
            return True
        usage = chunk.get("usage")
        if chunk.get("choices"):
            self.record.chunk_times.append(now)
            choice = chunk["choices"][0]
            text = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
            if text:
                self.pieces.append(text)
            if usage:
                done = usage.get("completion_tokens") or 0
                self.record.chunk_tokens.append(done - self.last_usage)
                self.last_usage = done
            else:
                self.record.chunk_tokens.append(None)
        if usage:
            self.record.output_tokens = usage.get("completion_tokens")
            if usage.get("prompt_tokens"):
                self.record.prompt_len = usage["prompt_tokens"]
        return False

    def finish(self, now: float) -> str:
        record = self.record
        if record.chunk_times and not record.error:
            record.success = True
        elif not record.error:
            record.error = "Never received a valid chunk to calculate TTFT."
        record.end = now
        text = "".join(self.pieces)
        record.text_len = len(text)
        return text


async def send(session: aiohttp.ClientSession, url: str, body: dict, record: RequestRecord, t0: float,
               headers: dict | None = None) -> str:
    """POST and stream; fill `record` in place; return the generated text (for multi-turn)."""
    parser = StreamParser(record, "messages" in body)
    data = json.dumps(body).encode()  # encoded before the clock starts: TTFT is the server's, not json's
    headers = {"Content-Type": "application/json", **(headers or {})}
    record.start = time.perf_counter() - t0
    try:
        async with session.post(url, data=data, headers=headers) as resp:
            record.status = resp.status
            if resp.status != 200:
                record.error = error_text(await resp.text(), resp.status)
            else:
                async for raw in resp.content:
                    if parser.feed(raw, time.perf_counter() - t0):
                        break
    except (aiohttp.ClientError, TimeoutError, ConnectionError, json.JSONDecodeError) as err:
        record.error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return parser.finish(time.perf_counter() - t0)


def error_text(body: str, status: int) -> str:
    try:
        message = json.loads(body)["error"]["message"]
    except (json.JSONDecodeError, KeyError, TypeError):
        message = body.strip()[:300]
    return f"HTTP {status}: {message}"
