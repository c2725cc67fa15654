"""The OpenAI-compatible server: the official client, streaming, usage, /metrics."""

import asyncio
import json

import aiohttp
import pytest
import requests

from engine.config import SamplingParams
from engine.llm import LLM


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(tiny_model, kv_cache_memory=32 * 2**20, max_model_len=1024)


@pytest.fixture
def server(llm, serve_engine):
    return serve_engine(llm, served_model_name="tiny")


def test_openai_client_both_endpoints(server):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    out = client.completions.create(model="tiny", prompt="The weather today", max_tokens=6, temperature=0)
    assert out.usage.completion_tokens == 6 and out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens > 0 and isinstance(out.choices[0].text, str)
    pieces = list(client.completions.create(model="tiny", prompt="The weather today", max_tokens=6, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in pieces if c.choices) == out.choices[0].text
    assert pieces[-1].usage.completion_tokens == 6
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello!"}],
                                          max_tokens=5, temperature=0)
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 5
    stream = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello!"}],
                                                 max_tokens=5, temperature=0, stream=True))
    assert stream[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in stream) == chat.choices[0].message.content
    assert stream[-1].choices[0].finish_reason == "length"
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_same_seed_same_text_as_offline(server, tiny_model):
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.8, "top_p": 0.9,
            "seed": 42}
    first = requests.post(server.url + "/v1/completions", json=body, timeout=60).json()
    offline = LLM(tiny_model, kv_cache_memory=8 * 2**20).generate(["Once upon a time"], SamplingParams(temperature=0.8, top_p=0.9, seed=42,
                                                                max_tokens=12))[0]
    assert first["choices"][0]["text"] == offline.outputs[0].text


def test_n_and_list_prompts_and_token_ids(server):
    ids = requests.post(server.url + "/v1/completions", json={"prompt": [5, 6, 7, 8], "max_tokens": 2},
                        timeout=60).json()
    assert ids["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    body = {"model": "tiny", "prompt": ["a b c", "d e f g"], "n": 2, "max_tokens": 3, "temperature": 1.0,
            "seed": 1, "logprobs": 2}
    out = requests.post(server.url + "/v1/completions", json=body, timeout=60).json()
    assert sorted(c["index"] for c in out["choices"]) == [0, 1, 2, 3]
    assert out["usage"]["completion_tokens"] == 12
    assert len(out["choices"][0]["logprobs"]["token_logprobs"]) == 3


async def _stream_one(session, url, i):
    body = {"model": "tiny", "prompt": f"request number {i} " * (1 + i % 7), "max_tokens": 8 + i % 5,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    usage, text_tokens = None, 0
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        async for line in resp.content:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"]:
                text_tokens += 1
    return usage, body["max_tokens"]


def test_64_concurrent_streams_and_metrics(server):
    samples = []

    async def scrape(session, stop):
        while not stop.is_set():
            async with session.get(server.url + "/metrics") as resp:
                samples.append(await resp.text())
            await asyncio.sleep(0.02)

    async def main():
        async with aiohttp.ClientSession() as session:
            stop = asyncio.Event()
            scraper = asyncio.create_task(scrape(session, stop))
            results = await asyncio.gather(*(_stream_one(session, server.url, i) for i in range(64)))
            stop.set()
            await scraper
            async with session.get(server.url + "/metrics") as resp:
                return results, await resp.text()

    results, final = asyncio.run(main())
    for usage, wanted in results:
        assert usage["completion_tokens"] == wanted and usage["prompt_tokens"] > 0

    def value(text, name):
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(name)

    assert max(value(s, "vllm:num_requests_running") for s in samples) > 1
    assert max(value(s, "vllm:kv_cache_usage_perc") for s in samples) > 0
    assert value(final, "vllm:num_requests_running") == 0 and value(final, "vllm:kv_cache_usage_perc") == 0
    assert value(final, "vllm:generation_tokens_total") >= sum(w for _, w in results)
    assert value(final, "vllm:time_to_first_token_seconds_count") >= 64
    for name in ("vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total", "vllm:e2e_request_latency_seconds_count",
                 "vllm:inter_token_latency_seconds_count", "vllm:request_queue_time_seconds_count",
                 "vllm:iteration_tokens_total_count"):
        value(final, name)


def test_version_and_health(server):
    version = requests.get(server.url + "/version", timeout=10).json()
    assert version["engine"] == "llmbench-engine" and version["config"]["block_size"] == 16
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_reset_prefix_cache_makes_the_next_request_cold(server):
    """POST /reset_prefix_cache (vLLM's endpoint): a repeated prompt hits the cache, after the reset it does not."""
    def hits() -> int:
        return requests.get(server.url + "/v1/engine/steps", timeout=10).json()["totals"]["prefix_hit_tokens"]

    prompt = {"prompt": list(range(100, 180)), "max_tokens": 2}
    for _ in range(2):
        requests.post(server.url + "/v1/completions", json=prompt, timeout=60).raise_for_status()
    warm = hits()
    assert warm >= 64
    reset = requests.post(server.url + "/reset_prefix_cache", timeout=30)
    assert reset.status_code == 200 and reset.json() == {"reset": True}
    requests.post(server.url + "/v1/completions", json=prompt, timeout=60).raise_for_status()
    assert hits() == warm

