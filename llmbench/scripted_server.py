"""A scripted OpenAI-compatible server: known TTFT and token gaps, no model. For testing clients.

    python -m llmbench.scripted_server --port 8100 --ttft-ms 50 --itl-ms 10 [--tokens-per-chunk 1]

Each streamed request gets its first chunk `ttft` after the request arrived and one chunk every `itl`
after that (absolute deadlines), each carrying `tokens-per-chunk` tokens, until `max_tokens`. The final
usage chunk carries `llmbench_truth`: when each chunk was actually written, in seconds after receipt, so
a test can compare what a client measured with what the server did. With zero latencies it is the
fastest possible target, for measuring the client's own capacity.
"""

from __future__ import annotations

import asyncio
import json
import time

import click
from aiohttp import web

WORD = " tok"


async def _stream(request: web.Request, body: dict, chat: bool) -> web.StreamResponse:
    cfg = request.app["cfg"]
    received = time.perf_counter()
    n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    loop = asyncio.get_running_loop()
    start = loop.time()
    written: list[float] = []
    sent = 0
    kind = "chat.completion.chunk" if chat else "text_completion"
    k = 0
    while sent < n:
        deadline = start + cfg["ttft"] + k * cfg["itl"]
        delay = deadline - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        take = min(cfg["per_chunk"], n - sent)
        sent += take
        choice = {"index": 0, "finish_reason": "length" if sent >= n else None}
        if chat:
            choice["delta"] = {"content": WORD * take}
        else:
            choice["text"] = WORD * take
        chunk = {"id": "scripted", "object": kind, "model": "scripted", "choices": [choice]}
        if cfg["usage_every_chunk"]:
            chunk["usage"] = {"prompt_tokens": 1, "completion_tokens": sent, "total_tokens": sent + 1}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        written.append(time.perf_counter() - received)
        k += 1
    final = {"id": "scripted", "object": kind, "model": "scripted", "choices": [],
             "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
             "llmbench_truth": {"chunk_offsets": written}}
    await resp.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
    if request.app["truth"] is not None:
        prompt = body.get("prompt") if not chat else body["messages"][-1]["content"]
        entry = {"prompt": prompt, "chunk_offsets": written, "messages": body.get("messages")}
        request.app["truth"].write(json.dumps(entry) + "\n")
        request.app["truth"].flush()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, chat=True)


async def _handle(request: web.Request, chat: bool) -> web.StreamResponse:
    app = request.app
    app["count"] += 1
    body = await request.json()
    fail_every = app["cfg"]["fail_every"]
    if fail_every and app["count"] % fail_every == 0:
        return web.json_response({"error": {"message": "scripted failure", "type": "server_error", "param": None,
                                            "code": 500}}, status=500)
    app["running"] += 1
    try:
        if body.get("stream"):
            return await _stream(request, body, chat)
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        await asyncio.sleep(app["cfg"]["ttft"] + (n - 1) * app["cfg"]["itl"])
        choice = {"index": 0, "finish_reason": "length"}
        choice |= {"message": {"role": "assistant", "content": WORD * n}} if chat else {"text": WORD * n}
        return web.json_response({"id": "scripted", "object": "chat.completion" if chat else "text_completion",
                                  "model": "scripted", "choices": [choice],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})
    finally:
        app["running"] -= 1


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model", "root": None}]})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    text = (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"scripted\"}} "
            f"{request.app['running']}\n")
    return web.Response(text=text, content_type="text/plain")


def build_app(ttft_ms: float = 0.0, itl_ms: float = 0.0, tokens_per_chunk: int = 1, fail_every: int = 0,
              usage_every_chunk: bool = True, truth_file: str | None = None) -> web.Application:
    app = web.Application()
    app["truth"] = open(truth_file, "a") if truth_file else None  # noqa: SIM115 - lives as long as the app
    app["cfg"] = {"ttft": ttft_ms / 1000, "itl": itl_ms / 1000, "per_chunk": tokens_per_chunk,
                  "fail_every": fail_every, "usage_every_chunk": usage_every_chunk}
    app["count"] = 0
    app["running"] = 0
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8100, show_default=True)
@click.option("--ttft-ms", default=0.0, show_default=True)
@click.option("--itl-ms", default=0.0, show_default=True)
@click.option("--tokens-per-chunk", default=1, show_default=True)
@click.option("--fail-every", default=0, show_default=True, help="Answer every Nth request with HTTP 500.")
@click.option("--truth-file", help="Append each streamed request's actual chunk times here (JSONL).")
def main(host: str, port: int, ttft_ms: float, itl_ms: float, tokens_per_chunk: int, fail_every: int,
         truth_file: str | None) -> None:
    web.run_app(build_app(ttft_ms, itl_ms, tokens_per_chunk, fail_every, truth_file=truth_file), host=host,
                port=port, print=lambda _: print(f"READY http://{host}:{port}", flush=True), access_log=None)


if __name__ == "__main__":
    main()
