"""Connections are bounded: beyond the cap a new one gets a 503 OpenAI body at once, a socket left idle or with
its headers half sent is closed after the idle timeout (freeing its place), a body that never arrives is
answered 408, and a long stream is never cut for being slow."""

import json
import socket
import time

import pytest
import requests

from engine.llm import LLM


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(tiny_model, kv_cache_memory=32 * 2**20, max_model_len=512)


def _connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if data:
        sock.sendall(data)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    sock.settimeout(seconds)
    try:
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return True, received
    except TimeoutError:
        return False, b""


def test_cap_refuses_with_a_503_body_and_idle_sockets_are_reaped(llm, serve_engine):
    server = serve_engine(llm, max_connections=6, idle_timeout=1.5)
    idle = [_connect(server.port) for _ in range(6)]
    time.sleep(0.2)
    refused = requests.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=10)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert "too many open connections" in refused.json()["error"]["message"]
    assert all(_closed_within(sock, 10)[0] for sock in idle)
    ok = requests.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert ok.status_code == 200
    assert server.state["guard"].refused >= 1


def test_half_sent_headers_are_closed_and_a_lying_content_length_gets_408(llm, serve_engine):
    server = serve_engine(llm, idle_timeout=1.0, body_timeout=1.0)
    slowloris = _connect(server.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-a: 1\r\n")
    t0 = time.monotonic()
    closed, _ = _closed_within(slowloris, 10)
    assert closed and time.monotonic() - t0 < 9
    body = b'{"prompt": "hi"}'
    liar = _connect(server.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 400\r\n\r\n" + body)
    closed, answer = _closed_within(liar, 15)
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert "error" in json.loads(payload)


def test_a_stream_longer_than_the_idle_timeout_is_not_cut(llm, serve_engine):
    server = serve_engine(llm, idle_timeout=0.2)
    body = {"prompt": "a long answer", "max_tokens": 480, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    arrivals, usage = [], None
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as resp:
        for line in resp.iter_lines():
            if line.startswith(b"data: {"):
                arrivals.append(time.monotonic())
                usage = json.loads(line[6:]).get("usage") or usage
    assert usage["completion_tokens"] == 480
    assert arrivals[-1] - arrivals[0] > 0.2  # 480 engine steps outlast the timeout on any machine
