"""Serving metrics exactly as `vllm bench serve` computes them, plus what it lacks (achieved rate, send lag).

TTFT: first chunk with choices - start. ITL: gaps between chunks, pooled over requests (chunk-weighted).
E2EL: last token-carrying chunk - start. TPOT: (E2EL - TTFT) / (n - 1) for n > 1, request-weighted.
Throughputs divide by the run's duration (first dispatch to all done). Percentiles: numpy linear.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from llmbench.records import RequestRecord

SEND_LAG_LIMIT_MS = 10.0  # P99 send lag above this: the client, not the server, set the pace
ACHIEVED_RATE_FLOOR = 0.95


def output_tokens(r: RequestRecord) -> int:
    """usage.completion_tokens; without usage, one token per chunk (each chunk carries at least one)."""
    return r.output_tokens if r.output_tokens else len(r.chunk_times)


def tpot(r: RequestRecord) -> float | None:
    n = output_tokens(r)
    return (r.latency - r.ttft) / (n - 1) if n > 1 else None


def stats_ms(values: list[float], name: str, percentiles: tuple[float, ...]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float) * 1000.0
    out = {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"std_{name}_ms": 0.0}
    out |= {f"p{_pct(p)}_{name}_ms": 0.0 for p in percentiles}
    if arr.size:
        out[f"mean_{name}_ms"] = float(arr.mean())
        out[f"median_{name}_ms"] = float(np.median(arr))
        out[f"std_{name}_ms"] = float(arr.std())
        for p in percentiles:
            out[f"p{_pct(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def _pct(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def max_output_tokens_per_s(records: list[RequestRecord]) -> float:
    """vLLM: every token timestamp (start + TTFT + cumsum ITL = each chunk's time) into 1-s buckets."""
    times = [t for r in records if r.success for t in r.chunk_times]
    if not times:
        return 0.0
    origin = min(r.start for r in records)
    return float(max(Counter(int(t - origin) for t in times).values()))


def max_concurrent_requests(records: list[RequestRecord]) -> int:
    """Exact sweep line over [start, start + latency) of the successful requests."""
    events = []
    for r in records:
        if r.success:
            events += [(r.start, 1), (r.start + r.latency, -1)]
    peak = current = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        current += delta
        peak = max(peak, current)
    return peak


def compute(records: list[RequestRecord], duration: float | None = None,
            percentiles: tuple[float, ...] = (50, 90, 95, 99), goodput: dict[str, float] | None = None,
            requested_rate: float | None = None) -> dict:
    """The result dict: vLLM `--save-result` keys plus llmbench extras. `goodput`: SLO bounds in ms by key
    (ttft, tpot, e2el), as `SLO.bounds` gives them; `slo_attainment` is the fraction of requests within all."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.success]
    if duration is None:
        duration = (max((r.end for r in measured), default=0) - min((r.start for r in measured), default=0)) or 1e-9
    ttfts = [r.ttft for r in ok]
    latencies = [r.latency for r in ok]
    itls = [gap for r in ok for gap in r.itl]
    tpots = [t for r in ok if (t := tpot(r)) is not None]
    n_out = [output_tokens(r) for r in ok]
    total_input = sum(r.prompt_len for r in ok)
    total_output = sum(n_out)
    result = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "num_prompts": len(measured),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration,
        "request_goodput": None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_output_tokens_per_s": max_output_tokens_per_s(ok),
        "max_concurrent_requests": max_concurrent_requests(ok),
    }
    if goodput:
        good = sum(1 for r in ok if _meets(r, goodput))
        result["request_goodput"] = good / duration
        result["goodput_slos_ms"] = goodput
        result["slo_attainment"] = good / len(measured) if measured else None
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", latencies)):
        result |= stats_ms(values, name, percentiles)
    result |= client_health(measured, percentiles, requested_rate)
    result |= backlog(measured)
    result["errors"] = dict(Counter(r.error.split(":")[0] if r.error else "" for r in measured if not r.success))
    return result


def backlog(measured: list[RequestRecord]) -> dict[str, float | None]:
    """Whether the server kept up while requests arrived, from what the client saw.

    After the ramp-up (the first third of the arrival window) a server under capacity completes requests as
    fast as they arrive, so the number in flight stays level; one past it lets them pile up. A straight line
    fitted to the number in flight over the rest of the window gives both figures: `kept_up`, completions per
    arrival (1 - the line's slope / the arrival rate), and `in_flight_growth`, the line's end over its start.
    `latency_growth`: latency per output token (E2E / tokens, so lengths add no noise) of the last third's
    arrivals over the middle third's. `window_note`: set when requests take so long that the window cannot
    tell (a longer --duration can)."""
    out: dict[str, float | None] = {"kept_up": None, "latency_growth": None, "in_flight_growth": None}
    done = [r for r in measured if r.success and r.end > r.start and output_tokens(r)]
    if len(done) < 30:
        return out
    starts = np.array([r.start for r in done])
    ends = np.array([r.end for r in done])
    first, last = float(starts.min()), float(starts.max())
    span = last - first
    if span <= 0:
        return out
    cut1, cut2 = first + span / 3, first + 2 * span / 3
    grid = np.linspace(cut1, last, 40)
    flying = np.array([np.sum((starts <= t) & (ends > t)) for t in grid], dtype=float)
    slope, intercept = np.polyfit(grid, flying, 1)
    arrival_rate = len(done) / span
    out["kept_up"] = float(1.0 - slope / arrival_rate)
    at_start, at_end = intercept + slope * cut1, intercept + slope * last
    out["in_flight_growth"] = float(at_end / max(at_start, 1.0))
    per_token = (ends - starts) / np.array([output_tokens(r) for r in done], dtype=float)
    middle, late = per_token[(starts >= cut1) & (starts < cut2)], per_token[starts >= cut2]
    if len(middle) >= 10 and len(late) >= 10:
        out["latency_growth"] = float(np.median(late) / max(np.median(middle), 1e-9))
    median = float(np.median(ends - starts))
    if median > 2 * span / 3:
        out["window_note"] = (f"the median request took {median:.1f} s, more than two thirds of the {span:.1f} s "
                              "arrival window: too short to tell whether the server kept up (raise --duration)")
    return out


def _meets(r: RequestRecord, slos: dict[str, float]) -> bool:
    values = {"ttft": r.ttft, "tpot": tpot(r) or 0.0, "e2el": r.latency}
    return all(slo / 1000.0 >= values[key] for key, slo in slos.items())


def client_health(records: list[RequestRecord], percentiles: tuple[float, ...],
                  requested_rate: float | None) -> dict:
    """Achieved vs requested rate and send lag: flags a client that could not keep the schedule."""
    if not records:
        return {"requested_rate": requested_rate, "achieved_rate": 0.0, "client_overloaded": False}
    lags = [r.dispatched - r.scheduled for r in records]
    queue = [r.start - r.scheduled for r in records]
    last = max(r.dispatched for r in records)
    achieved = len(records) / last if last > 0 else math.inf
    out = {"requested_rate": requested_rate, "achieved_rate": achieved}
    out |= stats_ms(lags, "send_lag", percentiles)
    out |= stats_ms(queue, "client_queue_time", percentiles)
    p99_lag = float(np.percentile(np.asarray(lags) * 1000, 99))
    scheduled = requested_rate is not None and math.isfinite(requested_rate)  # at rate inf everything is "late"
    behind = scheduled and len(records) > 10 and achieved < ACHIEVED_RATE_FLOOR * requested_rate
    out["client_overloaded"] = bool(scheduled and (p99_lag > SEND_LAG_LIMIT_MS or behind))
    return out
