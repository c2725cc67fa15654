"""A discrete-event simulator of one continuous-batching replica, mirroring the bundled engine's scheduler.

Each step: running requests first (a decode costs one token), then waiting ones FCFS into the leftover
token budget (chunked), bounded by `max_num_seqs`; KV blocks are allocated as tokens are computed and the
newest request is preempted (recompute) when they run out. Time advances by a step-time model, so P99s
come out of the queueing itself rather than a formula.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class StepModel(Protocol):
    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float,
                  cached_context: float = 0.0, prefill_seqs: float = 0.0) -> float: ...


@dataclass(frozen=True)
class EngineShape:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    kv_capacity_tokens: int = 10**7
    block_size: int = 16
    prefix_hit_rate: float = 0.0  # fraction of each prompt found in the prefix cache
    client_overhead: float = 0.0  # seconds added to TTFT and E2E (HTTP, tokenization), fitted


@dataclass
class SimResult:
    ttft: np.ndarray  # seconds, per request
    tpot_all: np.ndarray  # seconds, per request; 0 where a single token was generated (no TPOT to miss)
    multi_token: np.ndarray  # per request: more than one output token
    e2el: np.ndarray
    output_tokens: int
    duration: float
    preemptions: int

    @property
    def tpot(self) -> np.ndarray:
        """TPOT as vLLM reports it: only requests with more than one output token."""
        return self.tpot_all[self.multi_token]

    def summary(self) -> dict:
        def pct(values, p):
            return float(np.percentile(values, p) * 1000) if len(values) else 0.0

        return {"median_ttft_ms": pct(self.ttft, 50), "p99_ttft_ms": pct(self.ttft, 99),
                "median_tpot_ms": pct(self.tpot, 50), "p99_tpot_ms": pct(self.tpot, 99),
                "output_throughput": self.output_tokens / self.duration if self.duration else 0.0,
                "preemptions": self.preemptions}

    def attainment(self, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> float:
        ok = np.ones(len(self.ttft), dtype=bool)
        if slo_ttft_ms is not None:
            ok &= self.ttft * 1000 <= slo_ttft_ms
        if slo_tpot_ms is not None:
            ok &= self.tpot_all * 1000 <= slo_tpot_ms
        return float(ok.mean()) if len(ok) else 0.0


class _Req:
    __slots__ = ("arrival", "prompt", "output", "computed", "generated", "blocks", "first", "finish", "hit_done")

    def __init__(self, arrival: float, prompt: int, output: int) -> None:
        self.arrival, self.prompt, self.output = arrival, prompt, max(output, 1)
        self.computed = self.generated = self.blocks = 0
        self.first = self.finish = math.nan
        self.hit_done = False


def simulate(arrivals: np.ndarray | None, prompts: np.ndarray, outputs: np.ndarray, model: StepModel,
             shape: EngineShape, concurrency: int | None = None, max_steps: int = 2_000_000) -> SimResult:
    """Open loop (`arrivals` in seconds) or closed loop (`concurrency` requests in flight, each next one
    sent when one finishes, like a fixed-concurrency benchmark)."""
    if concurrency is not None:
        arrivals = np.zeros(len(prompts))
    reqs = [_Req(float(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs, strict=True)]
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival)
    pending = deque(reqs[i] for i in order)
    held: deque[_Req] = deque()
    if concurrency is not None:
        held = deque(list(pending)[concurrency:])
        pending = deque(list(pending)[:concurrency])
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    bs = shape.block_size
    free_blocks = shape.kv_capacity_tokens // bs
    now = 0.0
    preemptions = 0
    for _ in range(max_steps):
        while pending and pending[0].arrival <= now:
            waiting.append(pending.popleft())
        if not running and not waiting:
            if not pending:
                break
            now = pending[0].arrival
            continue
        budget = shape.max_num_batched_tokens
        batch: list[tuple[_Req, int]] = []
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt + r.generated - r.computed, budget)
            need = math.ceil((r.computed + n) / bs) - r.blocks
            while need > free_blocks:
                victim = running.pop()
                free_blocks += victim.blocks
                victim.blocks = victim.computed = 0
                waiting.appendleft(victim)
                preemptions += 1
                preempted = True
                if victim is r:
                    break
            if r.blocks == 0 and r.computed == 0 and r not in running:
                continue
            free_blocks -= need
            r.blocks += need
            batch.append((r, n))
            budget -= n
            i += 1
        while not preempted and waiting and budget > 0 and len(running) < shape.max_num_seqs:
            r = waiting[0]
            if not r.hit_done and shape.prefix_hit_rate > 0:
                r.computed = min(int(r.prompt * shape.prefix_hit_rate) // bs * bs, r.prompt - 1)
                r.hit_done = True
            n = min(r.prompt + r.generated - r.computed, budget)
            need = math.ceil((r.computed + n) / bs) - r.blocks
            if need > free_blocks:
                break
            waiting.popleft()
            free_blocks -= need
            r.blocks += need
            running.append(r)
            batch.append((r, n))
            budget -= n
        if not batch:
            if pending:
                now = max(now, pending[0].arrival)
                continue
            break
        prefill = decode = context = cached = prefill_seqs = 0
        for r, n in batch:
            if r.computed >= r.prompt + r.generated - 1 and n == 1 and r.generated > 0:
                decode += 1
                context += r.computed + 1
            else:
                prefill += n
                prefill_seqs += 1
                cached += r.computed
        now += model.step_time(prefill, decode, context, cached, prefill_seqs)
        for r, n in batch:
            r.computed += n
            if r.computed == r.prompt + r.generated:
                r.generated += 1
                if r.generated == 1:
                    r.first = now
                if r.generated >= r.output:
                    r.finish = now
                    running.remove(r)
                    free_blocks += r.blocks
                    r.blocks = 0
                    if held:
                        nxt = held.popleft()
                        nxt.arrival = now
                        pending.append(nxt)
    done = [r for r in reqs if not math.isnan(r.finish)]
    ttft = np.array([r.first - r.arrival + shape.client_overhead for r in done])
    e2el = np.array([r.finish - r.arrival + shape.client_overhead for r in done])
    tpot_all = np.array([(r.finish - r.first) / (r.output - 1) if r.output > 1 else 0.0 for r in done])
    multi = np.array([r.output > 1 for r in done], dtype=bool)
    start = min((r.arrival for r in reqs), default=0.0)
    return SimResult(ttft, tpot_all, multi, e2el, sum(r.output for r in done), max(now - start, 1e-9), preemptions)
