"""Questions put to the simulator: latencies at a rate or a concurrency, maximum throughput, and the highest
rate that meets the SLO (doubling, then bisection, as vLLM's serve_sla search does on a real server)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.harness_batcher import HarnessBatcher
from llmbench.plan.request_spread import RequestSpread
from llmbench.plan.scheduler import StepModel
from llmbench.plan.simulator import SimResult, simulate
from llmbench.plan.workload import Workload
from llmbench.slo import SLO


@dataclass(frozen=True)
class SimSetup:
    model: StepModel
    shape: EngineShape
    work: Workload
    seeds: tuple[int, ...] = (0, 1, 2)
    requests: int = 600
    exact: bool = False  # `requests` is the run asked about (--num-prompts): simulate that many, ramp and drain
    warm_up: int = 0  # requests sent before those measured at a rate, left out of its figures (tail term `steady state`)
    batcher: HarnessBatcher | None = None  # a load harness between the arrivals and `replicas` replicas
    replicas: int = 1
    spread: RequestSpread | None = None  # tail term `request spread` (a calibrated replica's, when asked for): open loops

    def count(self, rate: float | None = None, concurrency: int | None = None) -> int:
        """Requests to simulate: the number asked for, else enough for a steady state (a queue needs time to
        build before its P99 means anything)."""
        if self.exact:
            return self.requests
        if concurrency is not None:
            return max(self.requests, 4 * concurrency)
        if rate is not None:
            return int(min(max(self.requests, rate * MIN_SECONDS), MAX_REQUESTS))
        return max(self.requests, 1000)

    def with_shape(self, **changes) -> SimSetup:
        return replace(self, shape=replace(self.shape, **changes))


# arrivals span at least this long (a queue needs time to build before its P99 means anything), within a cap
MIN_SECONDS, MAX_REQUESTS = 30.0, 4000


def _merge(results: list[SimResult], slo: SLO | None, spread: RequestSpread | None = None) -> dict:
    """Each figure averaged over the draws of requests (seeds); `p99_draws` keeps the P99s' lowest and highest
    draw, because a short run's P99 rests on a few requests: a 150-request loop's P99 TPOT is set by the shortest
    outputs among the first requests sent at once; one calibrated model gave 134-345 ms on six draws of one
    vLLM-CPU sweep's requests, 90 ms on the measured loop's own (benchmarks/README.md, stop 80). A measured run is
    one draw."""
    if spread is not None:
        results = [spread.apply(r, seed) for seed, r in enumerate(results)]
    summaries = [r.summary() for r in results]
    merged = {k: float(np.mean([s[k] for s in summaries])) for k in summaries[0]}
    if len(summaries) > 1:
        merged["p99_draws"] = {"draws": len(summaries)} | {
            m: [min(s[f"p99_{m}_ms"] for s in summaries), max(s[f"p99_{m}_ms"] for s in summaries)]
            for m in ("ttft", "tpot")}
    if slo is not None:
        merged["attainment"] = float(np.mean([r.attainment(slo.ttft_ms, slo.tpot_ms, slo.e2el_ms) for r in results]))
    return merged


def at_rate(setup: SimSetup, rate: float, slo: SLO | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    """Poisson arrivals at `rate` req/s: percentiles averaged over seeds, attainment of `slo`; the first
    `setup.warm_up` requests are sent but not measured. With a `setup.batcher` the arrivals of all
    `setup.replicas` (`rate` each) pass it and the first replica's share is simulated."""
    results = []
    n = setup.count(rate=rate)
    sent = n + setup.warm_up
    for seed in seeds or setup.seeds:
        rng = np.random.default_rng(seed)
        waited = None
        if setup.batcher is None:
            prompts, outputs = setup.work.sample(sent, rng)
            arrivals = np.cumsum(rng.exponential(1.0 / rate, sent))
        else:
            issued = np.cumsum(rng.exponential(1.0 / (rate * setup.replicas), sent * setup.replicas))
            mine, arrivals = setup.batcher.to_replica(issued, setup.replicas)
            waited = arrivals - issued[mine]
            prompts, outputs = setup.work.sample(len(mine), rng)
        res = simulate(arrivals, prompts, outputs, setup.model, setup.shape, waited=waited)
        if len(res.ttft) < len(arrivals):
            raise ValueError(f"the simulation did not finish all requests at {rate:g} req/s")
        results.append(res.without_first(setup.warm_up) if setup.warm_up else res)
    return _merge(results, slo, setup.spread) | {"rate": rate, "simulated_requests": n}


def at_concurrency(setup: SimSetup, concurrency: int, slo: SLO | None = None) -> dict:
    """Closed loop: `concurrency` requests in flight; the first `concurrency` (started together) are warm-up,
    unless the run asked about is a given number of requests, all of them measured (as a benchmark counts)."""
    results = []
    n = setup.count(concurrency=concurrency)
    warm = 0 if setup.exact else concurrency
    for seed in setup.seeds:
        prompts, outputs = setup.work.sample(n + warm, np.random.default_rng(seed))
        res = simulate(None, prompts, outputs, setup.model, setup.shape, concurrency=concurrency)
        results.append(res.without_first(warm))
    return _merge(results, slo) | {"concurrency": concurrency, "simulated_requests": n, "opening_left_out": warm}


def max_throughput(setup: SimSetup, requests: int | None = None) -> dict:
    """Every request sent at once (vLLM's rate=inf, trtllm-bench): includes the drain tail."""
    n = requests or setup.count()
    prompts, outputs = setup.work.sample(n, np.random.default_rng(setup.seeds[0]))
    return _merge([simulate(np.zeros(n), prompts, outputs, setup.model, setup.shape)], None) | {
        "simulated_requests": n}


def saturation(setup: SimSetup) -> float:
    """Tail term `saturation`: the request rate a replica sustains with its batch full, a closed loop at
    max_num_seqs as a benchmark runs it, drain included (chosen on the tuning rows over Little's law on the
    loop's steady middle, which put MLPerf v4.1's capacities further off). A Poisson rate at or above it builds
    a queue without bound: over a run as long as a real benchmark's (MLPerf's ten minutes) the P99s grow with
    the run, however good a simulation of a few thousand requests looks while the batch is still filling."""
    steady = replace(setup, seeds=setup.seeds[:1], exact=False)
    return at_concurrency(steady, setup.shape.max_num_seqs)["request_throughput"]


def meets(setup: SimSetup, rate: float, slo: SLO, seeds: tuple[int, ...] | None = None) -> tuple[bool, dict]:
    point = at_rate(setup, rate, slo, seeds)
    return point["attainment"] >= slo.attainment, point


def capacity(setup: SimSetup, slo: SLO, start: float, tolerance: float = 0.05,
             seeds: tuple[int, ...] | None = None, limit: float | None = None) -> float:
    """The highest Poisson rate whose requests meet the SLO at the required attainment (0 if none), below the
    replica's saturation rate (`limit`, when the caller has it already)."""
    limit = limit or saturation(setup)
    low, high = 0.0, min(max(start, 1e-3), limit)
    while high < limit and meets(setup, high, slo, seeds)[0]:
        low, high = high, min(high * 2, limit)
    if high >= limit and meets(setup, high, slo, seeds)[0]:
        return limit
    while high - low > tolerance * max(low, 1e-3):
        mid = (low + high) / 2
        if meets(setup, mid, slo, seeds)[0]:
            low = mid
        else:
            high = mid
    return low


def max_concurrency(setup: SimSetup, slo: SLO, limit: int = 4096) -> tuple[int, dict | None]:
    """The highest closed-loop concurrency whose requests meet `slo` at its attainment (how capacity claims are
    usually phrased: "up to N users with P99 E2E under 10 s"): doubling, then bisection to 5 %."""
    def meets_at(c: int) -> tuple[bool, dict]:
        point = at_concurrency(setup, c, slo)
        return point["attainment"] >= slo.attainment, point

    good, best, c = 0, None, 1
    while c <= limit:
        passed, point = meets_at(c)
        if not passed:
            break
        good, best, c = c, point, c * 2
    if not good:
        return 0, None
    low, high = good, min(c, limit + 1)
    while high - low > max(1, int(low * 0.05)):
        mid = (low + high) // 2
        passed, point = meets_at(mid)
        if passed:
            low, best = mid, point
        else:
            high = mid
    return low, best


GRID = {"max_num_seqs": (128, 256, 512), "max_num_batched_tokens": (2048, 8192)}


def knob_grid(setup: SimSetup, slo: SLO, start: float,
              kv_tokens: Callable[[int, int], int] | None = None) -> list[dict]:
    """Capacity under the SLO for each engine setting in GRID (one seed, 10 % tolerance): only what was
    simulated is recommended. `kv_tokens(max_num_seqs, budget)` is the KV pool an engine that profiles its
    activation peak with those settings keeps (None: the pool does not depend on them)."""
    rows = []
    for seqs in GRID["max_num_seqs"]:
        for budget in GRID["max_num_batched_tokens"]:
            kv = kv_tokens(seqs, budget) if kv_tokens else setup.shape.kv_capacity_tokens
            trial = setup.with_shape(max_num_seqs=seqs, max_num_batched_tokens=budget, kv_capacity_tokens=kv)
            rate = capacity(trial, slo, start, 0.1, setup.seeds[:1])
            rows.append({"--max-num-seqs": seqs, "--max-num-batched-tokens": budget, "kv_tokens": kv, "rate": rate})
    return rows
