"""OpenAI-compatible HTTP server over the engine (started by `python -m engine.serve` or `llmbench serve`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from dataclasses import asdict

from aiohttp import web

import engine
from engine.llm import LLM, RequestOutput
from engine.serve import protocol
from engine.serve.async_llm import AsyncLLM, EngineError, EngineOverloaded
from engine.serve.connections import listen
from engine.serve.metrics import EngineMetrics
from engine.serve.middleware import MAX_BODY_BYTES, STATE, errors_and_auth
from engine.serve.protocol import APIError, ParsedRequest

log = logging.getLogger(__name__)
MAX_RESPONSE_ENTRIES = 200_000  # n x max_tokens x (1 + logprobs): what one response may have to carry


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _read_json(request: web.Request):
    try:
        raw = await asyncio.wait_for(request.read(), request.app[STATE]["body_timeout"])
    except web.HTTPRequestEntityTooLarge:
        raise APIError(413, f"request body larger than {MAX_BODY_BYTES} bytes") from None
    except TimeoutError:
        raise APIError(408, "the request body did not arrive in time (or is shorter than its Content-Length)",
                       type_="invalid_request_error") from None
    try:
        return await _off_loop(json.loads, raw)
    except RecursionError:
        raise APIError(400, "invalid JSON body: nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, bad UTF-8, an integer past Python's digit limit
        raise APIError(400, f"invalid JSON body: {str(err)[:200]}") from None


async def _off_loop(fn, *args):
    """Work that can take a while (tokenizing megabytes, templating, big JSON) runs on a worker thread, so
    /health and every other stream keep their latency."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _prompt_ids(state: dict, parsed: ParsedRequest, body: dict) -> list[list[int]]:
    llm: LLM = state["engine"].llm
    if parsed.chat:
        messages = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str) else
                     "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))}
                    for m in body["messages"]]
        text = llm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompts = [llm.tokenizer(text, add_special_tokens=False, verbose=False).input_ids]
    else:
        prompts = [llm.encode(p) if isinstance(p, str) else p for p in parsed.prompts]
    vocab = llm.model_config.vocab_size
    if any(t >= vocab for t in parsed.params.stop_token_ids):
        raise APIError(400, f"'stop_token_ids' must be in [0, {vocab})", "stop_token_ids")
    p = parsed.params
    if not parsed.stream:  # a streamed response is written as it goes; this one is built whole in memory
        entries = sum(p.n * (p.max_tokens or llm.max_model_len - len(ids)) * (1 + (p.logprobs or 0))
                      for ids in prompts)
        if entries > MAX_RESPONSE_ENTRIES:
            raise APIError(400, f"the response could hold {entries:,} token entries (prompts x n x max_tokens x "
                                f"(1 + logprobs)); the limit is {MAX_RESPONSE_ENTRIES:,}: stream it, or ask for "
                                "less", "max_tokens")
    for ids in prompts:
        if not ids:
            raise APIError(400, "the prompt is empty", "prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise APIError(400, f"prompt token ids must be in [0, {vocab})", "prompt")
        wanted = parsed.params.max_tokens if parsed.max_tokens_given else 0
        if len(ids) + (wanted or 0) > llm.max_model_len or len(ids) >= llm.max_model_len:
            raise APIError(400, f"This model's maximum context length is {llm.max_model_len} tokens. However, you "
                                f"requested {len(ids) + (wanted or 0)} tokens ({len(ids)} in the prompt, "
                                f"{wanted or 0} in the completion).", "max_tokens")
    return prompts


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE]
    if state["draining"]:
        raise APIError(503, "the server is shutting down")
    body = await _read_json(request)
    parsed = protocol.parse_request(body, chat)
    if parsed.model and parsed.model not in state["model_names"]:
        raise APIError(404, f"The model `{parsed.model}` does not exist.", "model", "not_found_error",
                       "model_not_found")
    prompts = await _off_loop(_prompt_ids, state, parsed, body)
    aengine: AsyncLLM = state["engine"]
    req_id = protocol.new_id("chatcmpl" if chat else "cmpl")
    queue: asyncio.Queue = asyncio.Queue()
    sub_ids = [f"{req_id}-{i}" for i in range(len(prompts))]
    try:
        for sub_id, ids in zip(sub_ids, prompts, strict=True):
            aengine.add(sub_id, ids, parsed.params, queue, stream=parsed.stream)
    except EngineOverloaded as err:
        for sub_id in sub_ids:
            aengine.abort(sub_id)
        raise APIError(503, f"server overloaded: {err}") from None
    finished: set[str] = set()
    try:
        if parsed.stream:
            return await _stream(request, state, parsed, req_id, sub_ids, prompts, queue, finished)
        return await _collect(request, state, parsed, req_id, sub_ids, prompts, queue, finished)
    finally:
        for sub_id in sub_ids:
            if sub_id not in finished:
                aengine.abort(sub_id)
                state["metrics"].forget(sub_id)


async def _collect(request, state, parsed, req_id, sub_ids, prompts, queue, finished) -> web.Response:
    final: dict[str, RequestOutput] = {}
    while len(final) < len(sub_ids):
        item = await queue.get()
        if isinstance(item, EngineError):
            finished.update(sub_ids)
            raise APIError(500, item.message, type_="server_error")
        if item.finished:
            final[item.request_id] = item
            finished.add(item.request_id)
    tok = state["engine"].llm.tokenizer
    choices, completion_tokens = [], 0
    for p_index, sub_id in enumerate(sub_ids):
        for out in final[sub_id].outputs:
            index = p_index * parsed.params.n + out.index
            completion_tokens += len(out.token_ids)
            choice = {"index": index, "finish_reason": out.finish_reason, "stop_reason": out.stop_reason}
            if parsed.chat:
                choice["message"] = {"role": "assistant", "content": out.text}
                choice["logprobs"] = protocol.chat_logprobs(tok, out.token_ids, out.logprobs)
            else:
                choice["text"] = out.text
                choice["logprobs"] = protocol.completion_logprobs(tok, out.token_ids, out.logprobs)
            choices.append(choice)
    usage = protocol.usage(sum(len(p) for p in prompts), completion_tokens)
    text = await _off_loop(json.dumps, protocol.envelope(req_id, state["served_name"], parsed.chat, False, choices,
                                                         usage))
    return web.Response(text=text, content_type="application/json")


async def _stream(request, state, parsed, req_id, sub_ids, prompts, queue, finished) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    tok = state["engine"].llm.tokenizer
    model, chat, n = state["served_name"], parsed.chat, parsed.params.n
    completion_tokens, prompt_tokens = 0, sum(len(p) for p in prompts)
    # every chunk of a response shares id, object, created and model: framed once, choices appended per step
    head = json.dumps(protocol.envelope(req_id, model, chat, True, []), separators=(",", ":"))[:-len(',"choices":[]}')]

    async def send(choices: list[dict], usage: dict | None = None) -> None:
        tail = "" if usage is None else ',"usage":' + json.dumps(usage, separators=(",", ":"))
        await resp.write(f'data: {head},"choices":{json.dumps(choices, separators=(",", ":"))}{tail}}}\n\n'.encode())

    if chat:
        for index in range(len(sub_ids) * n):
            await send([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}])
    while len(finished) < len(sub_ids):
        item = await queue.get()
        if isinstance(item, EngineError):
            finished.update(sub_ids)
            error = APIError(500, item.message, type_="server_error").body()
            await resp.write(f"data: {json.dumps(error, separators=(',', ':'))}\n\n".encode())
            break
        p_index = sub_ids.index(item.request_id)
        choices = []
        for out in item.outputs:
            index = p_index * n + out.index
            if not out.new_token_ids and out.finish_reason is None:
                continue
            done = len(out.token_ids) - len(out.new_token_ids)
            new_lp = out.logprobs[done:] if out.logprobs is not None else None
            completion_tokens += len(out.new_token_ids)
            choice = {"index": index, "finish_reason": out.finish_reason}
            if chat:
                choice["delta"] = {"content": out.new_text} if out.new_text or not out.finish_reason else {}
                choice["logprobs"] = protocol.chat_logprobs(tok, out.new_token_ids, new_lp)
            else:
                choice["text"] = out.new_text
                choice["logprobs"] = protocol.completion_logprobs(tok, out.new_token_ids, new_lp)
                choice["stop_reason"] = out.stop_reason
            choices.append(choice)
        if item.finished:
            finished.add(item.request_id)
        if choices:
            await send(choices, protocol.usage(prompt_tokens, completion_tokens) if parsed.continuous_usage else None)
    if parsed.include_usage:
        await send([], protocol.usage(prompt_tokens, completion_tokens))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    llm: LLM = state["engine"].llm
    data = [{"id": state["served_name"], "object": "model", "created": state["created"], "owned_by": "llmbench",
             "root": str(llm.model_path), "max_model_len": llm.max_model_len}]
    return web.json_response({"object": "list", "data": data})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.Response(status=503 if state["draining"] else 200)


async def version(request: web.Request) -> web.Response:
    llm: LLM = request.app[STATE]["engine"].llm
    config = asdict(llm.config) | {"dtype": str(llm.runner.dtype).removeprefix("torch."),
                                   "dtype_choice": llm.runner.dtype_choice,
                                   "max_model_len": llm.max_model_len, "num_kv_blocks": llm.runner.num_blocks,
                                   "attention_backend": llm.runner.backend,
                                   "kv_cache_torch_dtype": str(llm.runner.kv_dtype).removeprefix("torch."),
                                   "quantization_info": asdict(llm.runner.quant) if llm.runner.quant else None,
                                   "weight_bytes": llm.runner.weight_bytes(),
                                   "linear_path": llm.runner.linear_path,
                                   "decode_attention": llm.runner.decode_attention,
                                   "prefill_attention": llm.runner.prefill_attention,
                                   "layer_kernels": llm.runner.layer_kernels}
    return web.json_response({"version": engine.__version__, "engine": "llmbench-engine",
                              "model": str(llm.model_path), "config": config})


async def engine_steps(request: web.Request) -> web.Response:
    """Per-step statistics (prefill/decode tokens, batch, step seconds) for planners; `?since=INDEX`."""
    try:
        since = int(request.query.get("since", "-1"))
    except ValueError:
        raise APIError(400, "'since' must be an integer", "since") from None
    llm: LLM = request.app[STATE]["engine"].llm
    return web.json_response({"steps": llm.stats.as_records(since), "totals": llm.stats.totals})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's POST /reset_prefix_cache: drop every cached prefix so the next measurement starts cold."""
    if not await asyncio.wrap_future(request.app[STATE]["engine"].reset_prefix_cache()):
        raise APIError(409, "requests are in flight and hold cached blocks; reset the prefix cache when idle",
                       type_="invalid_request_error")
    return web.json_response({"reset": True})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not state["engine"].llm.has_unfinished():
        state["metrics"].idle(state["engine"].llm)
    return web.Response(body=state["metrics"].exposition(), content_type="text/plain", charset="utf-8")


def build_app(llm: LLM, served_model_name: str | None = None, api_key: str | None = None,
              max_waiting: int | None = None, public_metrics: bool = False,
              body_timeout: float = 30.0) -> web.Application:
    import time

    name = served_model_name or llm.model_path.name
    metrics_ = EngineMetrics(name)
    aengine = AsyncLLM(llm, max_waiting=max_waiting, on_step=metrics_.on_step)
    app = web.Application(middlewares=[errors_and_auth], client_max_size=MAX_BODY_BYTES)
    app[STATE] = {"engine": aengine, "metrics": metrics_, "served_name": name, "api_key": api_key,
                  "public_metrics": public_metrics, "body_timeout": body_timeout,
                  "model_names": {name, str(llm.model_path)}, "draining": False, "created": int(time.time())}
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/engine/steps", engine_steps)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)

    async def on_startup(app: web.Application) -> None:
        aengine.start()

    async def on_cleanup(app: web.Application) -> None:
        aengine.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def app_runner(app: web.Application, idle_timeout: float = 60.0) -> web.AppRunner:
    """A runner that cancels a request's handler when its client disconnects, so the request is aborted and
    its KV blocks freed at once (aiohttp leaves handlers running by default)."""
    return web.AppRunner(app, handle_signals=False, handler_cancellation=True, keepalive_timeout=idle_timeout)


async def serve(app: web.Application, host: str, port: int, grace_period: float = 30.0,
                max_connections: int = 1024, idle_timeout: float = 60.0) -> None:
    """Run until SIGTERM/SIGINT, then stop admitting, let in-flight requests finish, abort the rest."""
    runner = app_runner(app, idle_timeout)
    await runner.setup()
    listener, app[STATE]["guard"] = await listen(runner, host, port, max_connections, idle_timeout)
    log.info("serving on http://%s:%d", host, port)
    print(f"READY http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    state = app[STATE]
    state["draining"] = True
    aengine: AsyncLLM = state["engine"]
    deadline = loop.time() + grace_period
    while aengine.num_in_flight and loop.time() < deadline:
        await asyncio.sleep(0.05)
    for rid in list(aengine.llm.requests):
        aengine.abort(rid)
    listener.close()
    app[STATE]["guard"].stop()
    with contextlib.suppress(Exception):
        await runner.cleanup()
