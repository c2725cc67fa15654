"""A discrete-event simulator of one continuous-batching replica, mirroring a vLLM-class scheduler.

With chunked prefill (vLLM, the bundled engine, TensorRT-LLM when asked) each step takes the running requests
first (a decode costs one token) and then waiting ones FCFS into the leftover token budget, bounded by
`max_num_seqs`. Without it, SGLang's default and vLLM 0.6 make a step either a prefill of waiting requests
(they come first) or a decode of all running ones, and TensorRT-LLM's default puts only whole prompts beside the
decodes (`whole_prompts`). KV blocks are allocated as tokens are computed; the
newest request is preempted (recompute) when they run out. With multi-step scheduling (k decode steps per
schedule, vLLM 0.6) requests join and decode tokens reach the client every k decode steps; a first token
arrives after its prefill step. Tail term `burst ingest`: a closed loop's opening burst reaches an idle engine one
request at a time (the API server takes them in turn), so the engine's first step carries the first request alone
and the others wait it out, which sets the P99 TTFT of a loop of a few hundred requests. Tail term `loop
turnaround`: the request a client sends when its last one finished reaches the engine the same `burst_ingest`
later, after the engine has begun its next step, so it waits that step out. Tail term `loop overhead`
(loop_overhead.py; 0 unless measured): a closed loop's requests spend that many seconds more outside the server's own
clock than an open loop's, counted in their TTFT and E2E. Tail term `front-end ingest`
(ingest.py): an open loop's requests reach the engine when the API server has parsed and rendered them, their
latencies counted from the send. Time advances by a
step-time model, so P99s come out of the queueing itself rather than a formula.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from llmbench.plan.drift import SpeedTrace
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.ingest import ingest_wait
from llmbench.plan.scheduler import Scheduler, StepModel
from llmbench.plan.sequence import Request
from llmbench.plan.step_jitter import JitterDraws

PERCENTILES = (50, 90, 99)


@dataclass
class SimResult:
    ttft: np.ndarray  # seconds, per request
    tpot_all: np.ndarray  # seconds, per request; 0 where a single token was generated (no TPOT to miss)
    multi_token: np.ndarray  # per request: more than one output token
    e2el: np.ndarray
    itl: np.ndarray  # seconds between chunks reaching the client, every request
    output_tokens: int
    duration: float
    preemptions: int
    completed: int | None = None  # requests finished within `duration` (None: those listed)

    def without_first(self, k: int) -> SimResult:
        """The result without the first k requests (a closed loop's warm-up: they all start at once)."""
        return self.only(slice(k, None))

    def only(self, keep: slice | np.ndarray) -> SimResult:
        """The per-request figures of the requests kept; the run's tokens, time and ITLs stay whole."""
        return SimResult(self.ttft[keep], self.tpot_all[keep], self.multi_token[keep], self.e2el[keep], self.itl,
                         self.output_tokens, self.duration, self.preemptions, self.finished)

    @property
    def finished(self) -> int:
        """Requests finished within `duration`, the warm-up's too (the tokens and time are theirs as well)."""
        return len(self.ttft) if self.completed is None else self.completed

    @property
    def tpot(self) -> np.ndarray:
        """TPOT as vLLM reports it: only requests with more than one output token."""
        return self.tpot_all[self.multi_token]

    def summary(self) -> dict:
        out = {}
        for metric, values in (("ttft", self.ttft), ("tpot", self.tpot), ("itl", self.itl), ("e2el", self.e2el)):
            out[f"mean_{metric}_ms"] = float(np.mean(values) * 1000) if len(values) else 0.0
            for p in PERCENTILES:
                key = f"{'median' if p == 50 else f'p{p}'}_{metric}_ms"
                out[key] = float(np.percentile(values, p) * 1000) if len(values) else 0.0
        out["output_throughput"] = self.output_tokens / self.duration if self.duration else 0.0
        out["request_throughput"] = self.finished / self.duration if self.duration else 0.0
        out["preemptions"] = self.preemptions
        return out

    def attainment(self, slo_ttft_ms: float | None, slo_tpot_ms: float | None, slo_e2el_ms: float | None = None
                   ) -> float:
        ok = np.ones(len(self.ttft), dtype=bool)
        for limit, values in ((slo_ttft_ms, self.ttft), (slo_tpot_ms, self.tpot_all), (slo_e2el_ms, self.e2el)):
            if limit is not None:
                ok &= values * 1000 <= limit
        return float(ok.mean()) if len(ok) else 0.0


def simulate(arrivals: np.ndarray | None, prompts: np.ndarray, outputs: np.ndarray, model: StepModel,
             shape: EngineShape, concurrency: int | None = None, max_steps: int = 3_000_000,
             fast_forward: bool = True, drift: SpeedTrace | None = None, waited: np.ndarray | None = None) -> SimResult:
    """Open loop (`arrivals` in seconds) or closed loop (`concurrency` requests in flight, each next one
    sent when one finishes, like a fixed-concurrency benchmark). `fast_forward=False` steps every decode
    one by one: the same answer, slower (the reference the fast path is tested against). `drift` multiplies
    each step's time by its window's factor (tail term `speed drift`); `shape.step_jitter` adds one of its
    offsets to each (tail term `step jitter`). `waited`: seconds each request spent in a load harness before its
    arrival at the engine, counted in its TTFT and E2E (tail term `harness batcher`)."""
    if concurrency is not None:
        arrivals = np.zeros(len(prompts))
    start = float(np.min(arrivals)) if len(arrivals) else 0.0
    if concurrency is None and shape.ingest_cost > 0:  # tail term `front-end ingest`: counted from the send
        wait = ingest_wait(arrivals, shape.ingest_cost, shape.ingest_parse_share)
        arrivals = np.asarray(arrivals, dtype=float) + wait
        waited = wait if waited is None else waited + wait
    reqs = [Request(float(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs, strict=True)]
    pending = deque(sorted(reqs, key=lambda r: r.arrival))
    held: deque[Request] = deque()
    if concurrency is not None:
        held, pending = deque(list(pending)[concurrency:]), deque(list(pending)[:concurrency])
        for r in list(pending)[1:]:
            r.arrival = shape.burst_ingest
    rep = Scheduler(shape)
    jitter = JitterDraws(shape.step_jitter) if shape.step_jitter else None
    k = max(shape.scheduler_steps, 1)
    itl: list[float] = []
    bulk: list[np.ndarray] = []  # inter-token latencies of fast-forwarded decode steps
    now, decodes = 0.0, 0  # decode-only steps, counted for multi-step scheduling
    for _ in range(max_steps):
        while pending and pending[0].arrival <= now:
            rep.waiting.append(pending.popleft())
        if not rep.running and not rep.waiting:
            if not pending:
                break
            now = pending[0].arrival
            continue
        speed = drift.factor(now) if drift else 1.0
        if fast_forward and k == 1:
            until = min(pending[0].arrival if pending else math.inf, drift.window_end(now) if drift else math.inf)
            end = rep.fast_forward(model, now, until, bulk, speed, jitter)
            if end is not None:
                now = end
                continue
        batch = rep.schedule(admit_new=decodes % k == 0 or not rep.running)
        if not batch:
            if pending:
                now = max(now, pending[0].arrival)
                continue
            break
        prefill = decode = context = cached = prefill_seqs = pairs = 0
        for r, n in batch:
            if n == 1 and r.generated > 0 and r.prompt + r.generated - r.computed == 1:  # r.todo, inlined
                decode += 1
                context += r.computed + 1
            else:
                prefill += n
                prefill_seqs += 1
                cached += r.computed
                pairs += n * (r.computed + n / 2)  # causal attention within its own prompt only
        took = speed * model.step_time(prefill, decode, context, cached, prefill_seqs, pairs)
        now += jitter.one(took) if jitter else took
        decodes += prefill == 0
        deliver = decodes % k == 0 or prefill > 0
        for r, n in batch:
            r.computed += n
            if r.computed == r.prompt + r.generated:
                r.generated += 1
                if r.generated == 1:
                    _deliver(r, now, itl)
                if r.generated >= r.output:
                    rep.running.remove(r)
                    rep.release(r)
                    rep.reserved -= r.reserved
                    r.reserved = 0
                    _deliver(r, now, itl)
                    r.finish = now
                    if held:
                        nxt = held.popleft()
                        nxt.arrival = now + shape.burst_ingest
                        pending.append(nxt)
        if deliver:
            for r in rep.running:  # _deliver, inlined: this loop runs once per simulated token
                if r.generated > r.delivered:
                    if r.delivered:
                        itl.append(now - r.last_delivery)
                    else:
                        r.first = now
                    r.delivered, r.last_delivery = r.generated, now
    kept = [i for i, r in enumerate(reqs) if not math.isnan(r.finish)]
    done = [reqs[i] for i in kept]
    over = (shape.client_overhead + (waited[kept] if waited is not None else 0.0)
            + (shape.loop_overhead if concurrency is not None else 0.0))
    ttft = np.array([r.first - r.arrival for r in done]) + over
    e2el = np.array([r.finish - r.arrival for r in done]) + over
    tpot_all = np.array([(r.finish - r.first) / (r.output - 1) if r.output > 1 else 0.0 for r in done])
    multi = np.array([r.output > 1 for r in done], dtype=bool)
    itl_all = np.concatenate([np.array(itl), *bulk])
    return SimResult(ttft, tpot_all, multi, e2el, itl_all, sum(r.output for r in done), max(now - start, 1e-9),
                     rep.preemptions)


def _deliver(r: Request, now: float, itl: list[float]) -> None:
    """Tokens generated since the last delivery reach the client as one chunk."""
    if r.generated <= r.delivered:
        return
    if r.delivered == 0:
        r.first = now
    else:
        itl.append(now - r.last_delivery)
    r.delivered, r.last_delivery = r.generated, now
