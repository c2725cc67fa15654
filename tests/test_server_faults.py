"""Bad input and faults: each answered with an OpenAI-style error, and the server keeps serving."""

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time

import aiohttp
import pytest
import requests
from conftest import free_port

from engine.llm import LLM


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(tiny_model, kv_cache_memory=32 * 2**20, max_model_len=512)


@pytest.fixture
def server(llm, serve_engine):
    return serve_engine(llm, served_model_name="tiny")


def ok(server) -> None:
    r = requests.post(server.url + "/v1/completions", json={"prompt": "still alive?", "max_tokens": 2}, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


BAD = [
    ("not json", 400, None, "invalid JSON"),
    ({"prompt": 5}, 400, "prompt", "'prompt' must be"),
    ({}, 400, "prompt", "'prompt' must be"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "at least 1"),
    ({"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens", "must be of type int"),
    ({"prompt": "x", "max_tokens": 600}, 400, "max_tokens", "maximum context length is 512"),
    ({"prompt": "x", "temperature": -0.5}, 400, "temperature", "non-negative"),
    ({"prompt": "x", "top_p": 0}, 400, "top_p", "(0, 1]"),
    ({"prompt": "x", "top_p": 1.5}, 400, "top_p", "(0, 1]"),
    ({"prompt": "x", "n": 100}, 400, "n", "between 1 and 16"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream", "must be of type bool"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "model", "does not exist"),
    ({"prompt": [1, 2, 99999]}, 400, "prompt", "token ids must be in"),
]


@pytest.mark.parametrize("body, status, param, message", BAD)
def test_bad_requests(server, body, status, param, message):
    kwargs = {"data": body} if isinstance(body, str) else {"json": body}
    r = requests.post(server.url + "/v1/completions", timeout=30, **kwargs)
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and message in err["message"]
    ok(server)


def test_chat_bad_messages(server):
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": "hi"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_body_too_large(server):
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x" * (5 * 2**20)}, timeout=30)
    assert r.status_code == 413 and "larger than" in r.json()["error"]["message"]
    ok(server)


def test_disconnects_free_kv(server, llm):
    rng = random.Random(0)

    async def cut(session, i):
        body = {"prompt": f"stream {i} " * rng.randrange(1, 40), "max_tokens": 400, "ignore_eos": True,
                "stream": True}
        async with session.post(server.url + "/v1/completions", json=body) as resp:
            for _ in range(rng.randrange(0, 6)):
                await resp.content.readline()
            resp.close()  # drop the connection mid-stream

    async def main():
        async with aiohttp.ClientSession() as session:
            for start in range(0, 200, 50):
                await asyncio.gather(*(cut(session, i) for i in range(start, start + 50)))

    asyncio.run(main())
    deadline = time.time() + 30
    while (llm.block_manager.usage().used or llm.requests) and time.time() < deadline:
        time.sleep(0.1)
    assert llm.block_manager.usage().used == 0 and not llm.requests
    # the cut streams were aborted, not run to the end (those cut while being tokenized never reach the engine)
    assert server.state["engine"].num_aborted >= 120
    ok(server)


def test_overload_gives_503_with_retry_after(tiny_model, serve_engine):
    slow = LLM(tiny_model, kv_cache_memory=8 * 2**20, max_num_seqs=1)
    server = serve_engine(slow, max_waiting=2)

    async def main():
        async with aiohttp.ClientSession() as session:
            async def one():
                async with session.post(server.url + "/v1/completions",
                                        json={"prompt": "x", "max_tokens": 40, "ignore_eos": True}) as r:
                    return r.status, r.headers.get("Retry-After"), await r.json()
            return await asyncio.gather(*(one() for _ in range(12)))

    results = asyncio.run(main())
    rejected = [r for r in results if r[0] == 503]
    assert rejected and all(r[1] == "1" and "overloaded" in r[2]["error"]["message"] for r in rejected)
    assert any(r[0] == 200 for r in results)
    ok(server)


def test_step_exception_fails_requests_not_server(server):
    calls = {"n": 0}

    def boom():
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("injected fault")

    server.state["engine"].fault_injector = boom  # the step fails, then the request's own step alone fails too
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3}, timeout=30)
    assert r.status_code == 500 and "injected fault" in r.json()["error"]["message"]
    calls["n"] = 0
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3, "stream": True},
                      timeout=30)
    assert r.status_code == 200 and "injected fault" in r.text and r.text.endswith("data: [DONE]\n\n")
    calls["n"] = 1  # one failed step, then the request alone goes through: it is recomputed and answered
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3}, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    ok(server)


def test_api_key(llm, serve_engine):
    server = serve_engine(llm, api_key="s3cret")
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30,
                      headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30,
                      headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_sigterm_drains_and_exits_zero(tiny_model):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "engine.serve", "--model", str(tiny_model), "--port", str(port),
                             "--kv-cache-memory", "16MiB", "--shutdown-grace", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    try:
        for line in proc.stdout:
            if line.startswith("READY"):
                break
        url = f"http://127.0.0.1:{port}"
        result = {}

        def long_request():
            r = requests.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 300, "ignore_eos": True},
                              timeout=60)
            result["status"], result["body"] = r.status_code, r.json()

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        with pytest.raises(requests.RequestException):
            r = requests.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=10)
            if r.status_code == 503:
                raise requests.ConnectionError("draining")
        t.join(60)
        assert result["status"] == 200 and result["body"]["usage"]["completion_tokens"] == 300
        assert proc.wait(30) == 0
    finally:
        proc.kill()
