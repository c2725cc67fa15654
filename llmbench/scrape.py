"""Poll the target's Prometheus /metrics during a run and keep a time series of the serving gauges."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# vLLM / our engine, and SGLang's names for the same quantities
SERIES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions": "preemptions",
    "vllm:prefix_cache_hits": "prefix_hits",
    "vllm:prefix_cache_queries": "prefix_queries",
    "vllm:generation_tokens": "generation_tokens",
    "vllm:spec_decode_num_draft_tokens": "spec_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "spec_accepted_tokens",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_usage",
}
# latency histograms whose running sum and count are kept (server_timings.py sets them beside the client's)
TIMINGS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:e2e_request_latency_seconds": "e2el",
    "sglang:time_to_first_token_seconds": "ttft",
    "sglang:e2e_request_latency_seconds": "e2el",
}


def parse(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        timing = TIMINGS.get(family.name)
        if timing is not None:  # a latency histogram: its running sum and count (server_timings.py)
            for part in ("sum", "count"):
                got = [s.value for s in family.samples if s.name == f"{family.name}_{part}"]
                if got:
                    values[f"server_{timing}_{part}"] = values.get(f"server_{timing}_{part}", 0.0) + sum(got)
            continue
        key = SERIES.get(family.name)
        if key is None:
            continue
        total = sum(s.value for s in family.samples if not s.name.endswith("_created"))
        values[key] = values.get(key, 0.0) + total
    return values


def vllm_kv_pool(text: str) -> dict | None:
    """vLLM's KV pool as its /metrics states it (`vllm:cache_config_info`: `num_gpu_blocks` blocks of
    `block_size` tokens, V1's null block among them); None for a server that does not say."""
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:cache_config_info":
            labels = family.samples[0].labels if family.samples else {}
            try:
                return {"blocks": int(labels["num_gpu_blocks"]), "block_size": int(labels["block_size"]),
                        "source": "vllm:cache_config_info"}
            except (KeyError, ValueError):
                return None
    return None


async def last_step(session: aiohttp.ClientSession, base_url: str, headers: dict | None = None) -> int:
    """The index of the bundled engine's latest step (-1: none, or not the bundled engine). Asked before a run's
    clock starts, so the run records only its own steps: from -1, a sweep's second rate fetched the ring buffer's
    4,096 steps of the first in one answer (each rate's steps file held the rates before it, a fit on some rates saw
    the others' steps) and decoding them stopped the client's loop ~120 ms into every window after the first."""
    try:
        async with session.get(base_url + "/v1/engine/steps", params={"since": str(2**62)}, headers=headers,
                               timeout=aiohttp.ClientTimeout(total=5)) as resp:
            totals = (await resp.json()).get("totals") if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
        return -1
    steps = totals.get("steps") if isinstance(totals, dict) else None
    return int(steps) - 1 if isinstance(steps, int | float) else -1


class Scraper:
    """Every `interval` seconds: GET /metrics, parse, append {t, ...} to a JSONL file and to `points`.

    The bundled engine also serves its per-step statistics (/v1/engine/steps); those are appended to
    `steps_out` as they appear, for step-time calibration by `llmbench plan`."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, out: Path | None, t0: float,
                 interval: float = 1.0, steps_out: Path | None = None, headers: dict | None = None,
                 last_step: int = -1) -> None:
        self.session, self.url, self.out, self.t0, self.interval = session, base_url + "/metrics", out, t0, interval
        self.steps_url, self.steps_out = base_url + "/v1/engine/steps", steps_out
        self.headers = headers  # the run's API key: a keyed server guards /metrics too
        self.points: list[dict] = []
        self.notes: list[str] = []
        self.available = True
        self.steps_available = steps_out is not None
        self.write_error: str | None = None
        self.last_step = last_step  # steps up to this index were the engine's before this run
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        file = self.out.open("a", encoding="utf-8") if self.out else None
        try:
            while True:
                await self.scrape_once(file)
                await self.fetch_steps()
                await asyncio.sleep(self.interval)
        finally:
            if file:
                with contextlib.suppress(OSError):  # a full disk's buffered tail; the points are in memory
                    file.close()

    async def fetch_steps(self) -> None:
        if not self.steps_available:
            return
        try:
            async with self.session.get(self.steps_url, params={"since": str(self.last_step)}, headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    self.steps_available = False
                    return
                steps = (await resp.json()).get("steps") or []
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
            return
        if not isinstance(steps, list) or not all(isinstance(s, dict) and isinstance(s.get("index"), int)
                                                  for s in steps):
            self.steps_available = False
            self.notes.append("the target's /v1/engine/steps answered steps of an unknown shape: not recorded")
            return
        if steps:
            self.last_step = steps[-1]["index"]
            try:
                with self.steps_out.open("a", encoding="utf-8") as f:
                    f.writelines(json.dumps(step) + "\n" for step in steps)
            except OSError as err:
                self._cannot_write(self.steps_out, err)

    async def scrape_once(self, file=None) -> None:
        try:
            async with self.session.get(self.url, headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status != 200:
                    self.available = False
                    return
                values = parse(await resp.text())
        except Exception:  # an unparsable /metrics costs a point of the series, never the run
            return
        point = {"t": time.perf_counter() - self.t0, **values}
        self.points.append(point)
        if file and not self.write_error:
            try:
                file.write(json.dumps(point) + "\n")
                file.flush()
            except OSError as err:
                self._cannot_write(self.out, err)

    def _cannot_write(self, path, err: OSError) -> None:
        """A full disk costs the series' file, never the run: the points stay in memory for the result."""
        self.steps_available = self.steps_available and path != self.steps_out
        if not self.write_error:
            self.write_error = f"could not write {path} ({err.strerror or err})"
            self.notes.append(self.write_error)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        await self.fetch_steps()
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.available:  # the last point, after every request: written too, not only kept
            file = self.out.open("a", encoding="utf-8") if self.out else None
            try:
                await self.scrape_once(file)
            finally:
                if file:
                    with contextlib.suppress(OSError):
                        file.close()


def run_deltas(points: list[dict], *keys: str) -> list[float] | None:
    """Each counter's increase over the run: its last scrape's value less its first, among the scrapes that carry
    every key; None where fewer than two do (the server does not export them, or a scrape was missed)."""
    seen = [p for p in points if all(k in p for k in keys)]
    if len(seen) < 2:
        return None
    return [seen[-1][k] - seen[0][k] for k in keys]


def spec_decode_summary(points: list[dict]) -> dict[str, float]:
    """Draft and accepted tokens over the run (counter deltas) and the acceptance rate α."""
    deltas = run_deltas(points, "spec_draft_tokens", "spec_accepted_tokens")
    if not deltas or not deltas[0]:
        return {}  # no speculation on this target (or none during the run)
    drafted, accepted = deltas
    return {"spec_draft_tokens": drafted, "spec_accepted_tokens": accepted,
            "spec_acceptance_rate": accepted / drafted}
