"""One engine loop in a background thread, feeding per-request asyncio queues.

The HTTP handlers never touch the engine: they post commands (add, abort) to the loop thread and
read RequestOutputs from their own queue. The thread steps the engine while any work exists and
delivers each step's tokens at once, so streaming adds no delay beyond the step itself: one wake-up of
the event loop per step carries every request's output (not one per request, which at a few hundred
streams costs more than the step).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.config import SamplingParams
from engine.llm import LLM, RequestOutput

log = logging.getLogger(__name__)


class EngineOverloaded(Exception):
    """The waiting queue is full (--max-waiting)."""


@dataclass
class EngineError:
    """Delivered instead of an output when a step failed for this request."""

    request_id: str
    message: str


class AsyncLLM:
    def __init__(self, llm: LLM, max_waiting: int | None = None,
                 on_step: Callable[[LLM, list[RequestOutput]], None] | None = None) -> None:
        self.llm = llm
        self.max_waiting = max_waiting
        self.on_step = on_step
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue, bool]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self.fault_injector: Callable[[], None] | None = None  # tests: raise inside a step
        self.num_aborted = 0  # live requests aborted (client gone, shutdown)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    @property
    def num_in_flight(self) -> int:
        with self._lock:
            return len(self._streams)

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
            out: asyncio.Queue | None = None, stream: bool = True) -> asyncio.Queue:
        """Queue a request; its outputs (or an EngineError) arrive on `out`, tagged by request id; with
        `stream` off, only the final one."""
        if self.max_waiting is not None and self.num_waiting() >= self.max_waiting:
            raise EngineOverloaded(f"{self.num_waiting()} requests are waiting (limit {self.max_waiting})")
        out = out if out is not None else asyncio.Queue()
        with self._lock:
            self._streams[request_id] = (asyncio.get_running_loop(), out, stream)
        self._commands.put(("add", request_id, prompt_ids, params, time.time()))
        self._wake.set()
        return out

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._streams.pop(request_id, None)
        self._commands.put(("abort", request_id))
        self._wake.set()

    def reset_prefix_cache(self) -> concurrent.futures.Future:
        """Ask the loop thread to drop the prefix cache; the future holds whether it did."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("reset_prefix_cache", done))
        self._wake.set()
        return done

    def num_waiting(self) -> int:
        return len(self.llm.scheduler.waiting) + self._commands.qsize()

    # -- the loop thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._drain_commands()
            if not self.llm.has_unfinished():
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                self.llm.last_batch = None
                if self.fault_injector is not None:
                    self.fault_injector()
                outputs = self.llm.step()
            except Exception:  # a failed step fails the request that caused it, never the batch or the server
                log.exception("engine step failed; stepping its requests one at a time to find the cause")
                self._isolate()
                continue
            self._deliver_all([(out.request_id, out, out.finished) for out in outputs])
            if self.on_step is not None:
                self.on_step(self.llm, outputs)

    def _drain_commands(self) -> None:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            if cmd[0] == "add":
                _, rid, ids, params, arrival = cmd
                with self._lock:
                    if rid not in self._streams:
                        continue  # aborted before it reached the engine
                try:
                    self.llm.add_request(rid, ids, params, arrival_time=arrival)
                except ValueError as err:
                    self._deliver(rid, EngineError(rid, str(err)), final=True)
            elif cmd[0] == "reset_prefix_cache":
                cmd[1].set_result(self.llm.reset_prefix_cache())
            elif self.llm.abort(cmd[1]):
                self.num_aborted += 1

    def _isolate(self) -> None:
        """The failed step's requests are recomputed, each stepped alone until it shows a token: the ones
        whose step raises again are failed alone, with the error; the others carry on, only a little later."""
        for rid in self.llm.preempt_failed_batch():
            if rid not in self.llm.requests:
                continue
            try:
                if self.fault_injector is not None:
                    self.fault_injector()
                outputs = self.llm.step_alone(rid)
            except Exception as err:
                log.warning("request %s failed its own step: %s: %s", rid, type(err).__name__, err)
                self.llm.preempt_failed_batch()
                self.llm.abort(rid)
                self._deliver(rid, EngineError(rid, f"this request failed in the engine: {type(err).__name__}: "
                                                    f"{err}"), final=True)
                continue
            self._deliver_all([(out.request_id, out, out.finished) for out in outputs])
            if self.on_step is not None:
                self.on_step(self.llm, outputs)

    def _deliver(self, request_id: str, item: RequestOutput | EngineError, final: bool) -> None:
        self._deliver_all([(request_id, item, final)])

    def _deliver_all(self, items: list[tuple[str, RequestOutput | EngineError, bool]]) -> None:
        """Hand each item to its request's queue, with one call into each event loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        with self._lock:
            for request_id, item, final in items:
                target = self._streams.pop(request_id, None) if final else self._streams.get(request_id)
                if target is not None and (final or target[2]):
                    by_loop.setdefault(target[0], []).append((target[1], item))
        for loop, batch in by_loop.items():
            loop.call_soon_threadsafe(_put_all, batch)


def _put_all(batch: list[tuple[asyncio.Queue, object]]) -> None:
    for out, item in batch:
        out.put_nowait(item)
