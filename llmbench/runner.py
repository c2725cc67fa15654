"""One benchmark run: requests + send schedule -> streaming client -> records (JSONL) -> metrics."""

from __future__ import annotations

import asyncio
import gc
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import uvloop

from llmbench import client, metrics
from llmbench.datasets import Request
from llmbench.records import RecordWriter, RequestRecord
from llmbench.scrape import Scraper, spec_decode_summary

DEAD_TARGET_FAILURES = 10  # consecutive connection failures that end a run early
WARM_CONNECTIONS = 32


@dataclass
class RunConfig:
    base_url: str
    model: str
    backend: str = "openai"
    rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: int = 0
    seed: int = 0
    ignore_eos: bool = False
    temperature: float | None = None
    request_timeout: float = 600.0
    percentiles: tuple[float, ...] = (50, 90, 95, 99)
    goodput: dict[str, float] = field(default_factory=dict)
    think_time: float = 0.0  # multi-turn: seconds between a reply and the next user turn
    api_key: str | None = None
    scrape: bool = True
    progress: bool = True
    label: str = ""


@dataclass
class RunResult:
    records: list[RequestRecord]
    metrics: dict
    notes: list[str]
    server_series: list[dict]


class Run:
    def __init__(self, cfg: RunConfig, requests: list[Request], offsets: np.ndarray, out_prefix: Path | None) -> None:
        if cfg.backend not in client.BACKENDS:
            raise ValueError(f"unknown backend {cfg.backend!r}; choose one of {', '.join(client.BACKENDS)}")
        self.cfg, self.requests, self.offsets = cfg, requests, offsets
        self.url = cfg.base_url.rstrip("/") + client.BACKENDS[cfg.backend]
        self.headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
        self.out_prefix = out_prefix
        self.records: list[RequestRecord] = []
        self.notes: list[str] = []
        self.writer = RecordWriter(Path(f"{out_prefix}.records.jsonl")) if out_prefix else None
        self.consecutive_conn_failures = 0
        self.target_down = asyncio.Event()
        self.semaphore = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        self.t0 = 0.0
        self.next_index = 0
        self.num_dispatched = 0

    async def execute(self) -> RunResult:
        cfg = self.cfg
        async with client.make_session(cfg.max_concurrency or 0, cfg.request_timeout) as session:
            self.session = session
            await self._open_connections()
            if cfg.warmup:
                await self._warmup()
            self.t0 = time.perf_counter()
            scraper = None
            if cfg.scrape:
                out = Path(f"{self.out_prefix}.server_metrics.jsonl") if self.out_prefix else None
                steps = Path(f"{self.out_prefix}.engine_steps.jsonl") if self.out_prefix else None
                scraper = Scraper(session, cfg.base_url.rstrip("/"), out, self.t0, steps_out=steps)
                scraper.start()
            progress = asyncio.create_task(self._progress()) if cfg.progress else None
            tasks = []
            try:
                for req, offset in zip(self.requests, self.offsets, strict=False):
                    delay = self.t0 + offset - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if self.target_down.is_set():
                        break
                    tasks.append(asyncio.create_task(self._conversation(req, float(offset))))
                    self.num_dispatched += 1
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                duration = time.perf_counter() - self.t0
                if scraper:
                    await scraper.stop()
                if progress:
                    progress.cancel()
                if self.writer:
                    self.writer.close()
        if self.target_down.is_set():
            sent = sum(1 for r in self.records if not r.warmup)
            self.notes.append(f"the target stopped answering ({DEAD_TARGET_FAILURES} connection failures in a row); "
                              f"the run ended early after {sent} of {len(self.requests)} requests")
        result = metrics.compute(self.records, duration, cfg.percentiles, cfg.goodput, cfg.rate)
        if scraper:
            result |= spec_decode_summary(scraper.points)
        if result["client_overloaded"]:
            self.notes.append(f"client overloaded: achieved {result['achieved_rate']:.2f} req/s of "
                              f"{cfg.rate} requested, P99 send lag {result['p99_send_lag_ms']:.1f} ms — figures "
                              "may reflect the client's limit, not the server's")
        return RunResult(self.records, result, self.notes, scraper.points if scraper else [])

    async def _open_connections(self) -> None:
        """Fill the keep-alive pool before the clock starts, so early requests do not pay TCP set-up."""
        count = min(self.cfg.max_concurrency or WARM_CONNECTIONS, WARM_CONNECTIONS, len(self.requests))

        async def touch() -> None:
            try:
                async with self.session.get(self.cfg.base_url.rstrip("/") + "/v1/models", headers=self.headers) as r:
                    await r.read()
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass

        await asyncio.gather(*(touch() for _ in range(count)))

    async def _warmup(self) -> None:
        self.t0 = time.perf_counter()
        warm = [self._turn(self.requests[i % len(self.requests)], 0.0, None, warmup=True)
                for i in range(self.cfg.warmup)]
        await asyncio.gather(*warm)

    async def _conversation(self, req: Request, scheduled: float) -> None:
        """One request, or a multi-turn conversation whose later turns carry the actual replies."""
        dispatched = time.perf_counter() - self.t0
        messages = list(req.messages) if req.messages else None
        text = await self._turn(req, scheduled, messages, dispatched=dispatched)
        for turn, (user, out_len) in enumerate(zip(req.follow_ups, req.follow_up_output_lens, strict=False), 1):
            if self.target_down.is_set() or text is None:
                return
            messages = (messages or []) + [{"role": "assistant", "content": text}, {"role": "user", "content": user}]
            if self.cfg.think_time:
                await asyncio.sleep(self.cfg.think_time)
            now = time.perf_counter() - self.t0
            follow = Request(None, 0, out_len, messages=messages, conversation_id=req.conversation_id, turn=turn)
            text = await self._turn(follow, now, messages, dispatched=now)

    async def _turn(self, req: Request, scheduled: float, messages: list[dict] | None, dispatched: float = 0.0,
                    warmup: bool = False) -> str | None:
        record = RequestRecord(index=self.next_index, scheduled=scheduled, dispatched=dispatched,
                               prompt_len=req.prompt_len, expected_output_len=req.output_len, warmup=warmup,
                               conversation_id=req.conversation_id, turn=req.turn)
        self.next_index += 1
        body = client.payload(self.cfg.backend, self.cfg.model, req, self.cfg.ignore_eos, self.cfg.temperature,
                              messages)
        if self.semaphore:
            async with self.semaphore:
                text = await client.send(self.session, self.url, body, record, self.t0, self.headers)
        else:
            text = await client.send(self.session, self.url, body, record, self.t0, self.headers)
        self._finish(record)
        return text if record.success else None

    def _finish(self, record: RequestRecord) -> None:
        self.records.append(record)
        if self.writer:
            self.writer.write(record)
        if record.success:
            self.consecutive_conn_failures = 0
        elif record.status is None:  # no HTTP answer at all
            self.consecutive_conn_failures += 1
            if self.consecutive_conn_failures >= DEAD_TARGET_FAILURES:
                self.target_down.set()

    async def _progress(self) -> None:
        from rich.live import Live

        total = len(self.requests)
        with Live(self._render(total), refresh_per_second=2, transient=False) as live:
            while True:
                await asyncio.sleep(0.5)
                live.update(self._render(total))

    def _render(self, total: int):
        from rich.table import Table

        done = [r for r in self.records if not r.warmup]
        ok = [r for r in done if r.success]
        ttft = [r.ttft * 1000 for r in ok]
        tpots = [t * 1000 for r in ok if (t := metrics.tpot(r)) is not None]
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        table = Table(box=None, show_header=True, title=f"{self.cfg.label or 'run'}")
        for col in ("done", "failed", "achieved req/s", "TTFT P50/P99 ms", "TPOT P50/P99 ms"):
            table.add_column(col, justify="right")

        def p(values, q):
            return f"{np.percentile(values, q):.0f}" if values else "-"

        table.add_row(f"{len(done)}/{total}", str(len(done) - len(ok)), f"{self.num_dispatched / elapsed:.2f}",
                      f"{p(ttft, 50)}/{p(ttft, 99)}", f"{p(tpots, 50)}/{p(tpots, 99)}")
        return table


def execute(cfg: RunConfig, requests: list[Request], offsets: np.ndarray, out_prefix: Path | None) -> RunResult:
    """One run on a fresh event loop (uvloop: timer and socket wake-ups several times cheaper than asyncio's),
    with the garbage collector's existing objects frozen as vLLM does, so collections stay short."""
    gc.collect()
    gc.freeze()
    try:
        return uvloop.run(Run(cfg, requests, offsets, out_prefix).execute())
    finally:
        gc.unfreeze()
