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
    result["steady_completion_rate"] = steady_completion_rate(measured, ok, latencies)
    result |= growth(measured)
    result["errors"] = dict(Counter(r.error.split(":")[0] if r.error else "" for r in measured if not r.success))
    return result


def steady_completion_rate(measured: list[RequestRecord], ok: list[RequestRecord], latencies: list[float]
                           ) -> float | None:
    """Completions per second while requests were still arriving, after the first median latency: under
    capacity it equals the arrival rate, in saturation it is capped. (Completed ÷ duration also counts the
    drain after the last arrival, which reads as "saturated" for any long-output run.)"""
    if len(ok) < 4:
        return None
    first, last = min(r.start for r in measured), max(r.start for r in measured)
    begin = first + float(np.median(latencies))
    if last - begin < 0.25 * (last - first) or last <= begin:
        return None
    return sum(1 for r in ok if begin <= r.end <= last) / (last - begin)


def growth(measured: list[RequestRecord]) -> dict[str, float | None]:
    """How much the load built up while requests arrived: E2E latency and requests in flight over the last
    third of the arrival window, relative to the middle third (the first third is the ramp-up). A server
    under capacity holds both steady; one past it lets both climb for as long as arrivals continue."""
    out: dict[str, float | None] = {"latency_growth": None, "in_flight_growth": None}
    done = [r for r in measured if r.end > r.start]
    if len(done) < 30:
        return out
    starts = np.array([r.start for r in done])
    ends = np.array([r.end for r in done])
    first, last = starts.min(), starts.max()
    if last <= first:
        return out
    cut1, cut2 = first + (last - first) / 3, first + 2 * (last - first) / 3
    lat = ends - starts
    middle, late = lat[(starts >= cut1) & (starts < cut2)], lat[starts >= cut2]
    if len(middle) >= 10 and len(late) >= 10:
        out["latency_growth"] = float(np.median(late) / max(np.median(middle), 1e-9))
    grid_mid, grid_late = np.linspace(cut1, cut2, 20), np.linspace(cut2, last, 20)

    def in_flight(times: np.ndarray) -> float:
        return float(np.mean([np.sum((starts <= t) & (ends > t)) for t in times]))

    out["in_flight_growth"] = in_flight(grid_late) / max(in_flight(grid_mid), 1.0)
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
