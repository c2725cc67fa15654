"""Serving metrics exactly as `vllm bench serve` computes them, plus what it lacks (achieved rate, send lag).

TTFT: first chunk with choices - start (reasoning or answer, vLLM's definition); TTFO: first chunk of answer
text - start, measured beside it for reasoning streams (guidellm's time to first output token). ITL: gaps between chunks, pooled over requests (chunk-weighted).
E2EL: last token-carrying chunk - start. TPOT: (E2EL - TTFT) / (n - 1) for n > 1, request-weighted.
Throughputs divide by the run's duration (first dispatch to all done). Percentiles: numpy linear.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from llmbench.records import RequestRecord

SEND_LAG_LIMIT_MS = 10.0  # P90 send lag under this never shapes a result
SEND_LAG_TTFT_SHARE = 0.25  # ... above it, it does once it is this share of the P50 TTFT measured
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
    out |= {f"p{pct_name(p)}_{name}_ms": 0.0 for p in percentiles}
    if arr.size:
        out[f"mean_{name}_ms"] = float(arr.mean())
        out[f"median_{name}_ms"] = float(np.median(arr))
        out[f"std_{name}_ms"] = float(arr.std())
        for p in percentiles:
            out[f"p{pct_name(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def pct_name(p: float) -> str:
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
    cut = [r for r in records if not r.warmup and r.interrupted]
    measured = [r for r in records if not r.warmup and not r.interrupted]
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
        "interrupted_requests": len(cut),
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
        good = sum(1 for r in ok if meets(r, goodput))
        result["request_goodput"] = good / duration
        result["goodput_slos_ms"] = goodput
        result["slo_attainment"] = good / len(measured) if measured else None
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", latencies)):
        result |= stats_ms(values, name, percentiles)
    thinkers = [r for r in ok if r.reasoning_tokens]
    if thinkers or "ttfo" in (goodput or {}):
        result |= stats_ms([r.ttfo for r in ok if r.ttfo is not None], "ttfo", percentiles)
        reasoning = sum(r.reasoning_tokens for r in thinkers)
        result |= {"reasoning_requests": len(thinkers), "total_reasoning_tokens": reasoning,
                   "total_answer_tokens": total_output - reasoning,
                   "answered_requests": sum(r.first_output is not None for r in ok)}
    if (per_session := sessions(measured)) is not None:
        result["sessions"] = per_session
    result |= client_health(measured, percentiles, requested_rate)
    result |= backlog(measured)
    failed = [r for r in measured if not r.success]
    result["errors"] = dict(Counter(r.error.split(":")[0] if r.error else "" for r in failed))
    result["failure_summary"] = failure_summary(failed) if failed else None
    return result


def sessions(measured: list[RequestRecord]) -> dict | None:
    """Per-session figures of a multi-turn run (a conversation dataset, or a trace's sessions): how many,
    their turns and durations (first send to last token), and TTFT by turn index (a later turn carries more
    history, or finds its prefix cached)."""
    by: dict[str, list[RequestRecord]] = {}
    for r in measured:
        if r.conversation_id is not None:
            by.setdefault(r.conversation_id, []).append(r)
    multi = [turns for turns in by.values() if len(turns) > 1]
    if not multi:
        return None
    durations = np.array([max(r.end for r in t) - min(r.start for r in t) for t in multi])
    ttfts: dict[int, list[float]] = {}
    for r in (r for turns in by.values() for r in turns if r.success and r.ttft is not None):
        ttfts.setdefault(r.turn, []).append(r.ttft * 1000.0)
    return {"sessions": len(multi), "mean_turns": float(np.mean([len(t) for t in multi])),
            "max_turns": max(len(t) for t in multi),
            "sessions_with_a_failed_turn": sum(any(not r.success for r in t) for t in multi),
            "median_session_duration_s": float(np.median(durations)),
            "p99_session_duration_s": float(np.percentile(durations, 99)),
            "median_ttft_ms_by_turn": {turn: float(np.median(v)) for turn, v in sorted(ttfts.items())},
            "p99_ttft_ms_by_turn": {turn: float(np.percentile(v, 99)) for turn, v in sorted(ttfts.items())}}


def failure_cause(error: str) -> str:
    """A failed request's cause in words: 'HTTP 500' is the server's status, 'HTTP 200' an error sent inside
    a stream that had started well, the rest what the connection did."""
    head = error.split(":")[0].strip()
    if head == "HTTP 200":
        return "an error inside the stream"
    if head.startswith("HTTP "):
        return f"HTTP {head[5:]} from the server"
    words = {"ClientConnectorError": "could not connect", "ServerDisconnectedError": "the server closed the connection",
             "TimeoutError": "timed out", "timed out": "timed out (--request-timeout)",
             "ClientPayloadError": "a broken response body",
             "Never received a valid chunk to calculate TTFT.": "no token in the response",
             "bad chunk": "a malformed stream chunk", "stalled": "a stream that stalled (--read-timeout)",
             "interrupted": "interrupted"}
    return words.get(head, head or "unknown")


def failure_summary(failed: list[RequestRecord], quotes: int = 2) -> str:
    """`3 HTTP 500 from the server, 10 could not connect; the server said: "..."` — causes with counts,
    most frequent first, then the first distinct messages the server sent."""
    causes = Counter(failure_cause(r.error) for r in failed)
    text = ", ".join(f"{n} {cause}" for cause, n in causes.most_common())
    said: list[str] = []
    for r in failed:
        head, _, message = r.error.partition(":")
        message = message.strip()
        if head.startswith("HTTP ") and message and message not in said:
            said.append(message[:200])
        if len(said) == quotes:
            break
    return text + ("; the server said: " + " | ".join(f'"{m}"' for m in said) if said else "")


RAMP_QUANTILE = 90  # the ramp lasts about as long as the early arrivals' P90 E2E
WINDOW_E2E_MULTIPLE = 10  # a window this many P50 E2Es long leaves the ramp a tenth of it


def in_flight(starts: np.ndarray, ends: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Requests in flight at each time of `grid` (started, not yet ended)."""
    return (np.searchsorted(np.sort(starts), grid, "right") - np.searchsorted(np.sort(ends), grid, "right")).astype(float)


SHUFFLES = 100


def shuffled_rises(starts: np.ndarray, e2e: np.ndarray, grid: np.ndarray, seed: int = 0) -> np.ndarray:
    """The rise over `grid` of a straight line fitted to the number in flight, with the latencies shuffled over
    the arrivals, SHUFFLES times: what a server that keeps up shows, where a request's latency has nothing to do
    with when it arrived. Its spread is the noise of the count (wider than a Poisson count's when latencies are
    long-tailed, as ShareGPT's are), its mean the ramp still under way when the longest requests outlast it
    (measured against vLLM-CPU: a 60 s window at 2 req/s whose P99 E2E was 31 s rose 15 requests; shuffled, 6 ± 3.7)."""
    rng = np.random.default_rng(seed)
    counts = np.array([in_flight(starts, starts + rng.permutation(e2e), grid) for _ in range(SHUFFLES)])
    centred = grid - grid.mean()
    slopes = (counts - counts.mean(axis=1, keepdims=True)) @ centred / (centred @ centred)
    return slopes * (grid[-1] - grid[0])


def arrivals(measured: list[RequestRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Send times, end times and output tokens of what arrives, and its name: each successful request, or in a
    multi-turn run each conversation whose turns all succeeded (its opener's send to its last token, its turns'
    tokens): only the openers follow the schedule, a later turn goes once the reply before it is in (or at a
    trace's own time, if later), so a conversation is the unit that arrives."""
    done = [r for r in measured if r.success and r.end > r.start and output_tokens(r)]
    by: dict[str, list[RequestRecord]] = {}
    for r in measured:
        if r.conversation_id is not None:
            by.setdefault(r.conversation_id, []).append(r)
    if not any(len(turns) > 1 for turns in by.values()):
        return (np.array([r.start for r in done]), np.array([r.end for r in done]),
                np.array([output_tokens(r) for r in done], dtype=float), "requests")
    whole = [t for t in by.values() if all(r.success for r in t) and any(r.turn == 0 for r in t)]
    return (np.array([min(r.start for r in t) for t in whole]), np.array([max(r.end for r in t) for t in whole]),
            np.array([sum(output_tokens(r) for r in t) for t in whole], dtype=float), "conversations")


def backlog(measured: list[RequestRecord]) -> dict[str, float | bool | None]:
    """Whether the server kept up while requests (or conversations: `arrivals`) arrived, from what the client saw.

    A server that keeps up holds about rate x latency requests in flight (Little's law), a level it reaches
    once its first arrivals start finishing: the ramp, taken as the P90 E2E of the first third's arrivals.
    One past capacity keeps piling them up. A straight line fitted to the number in flight after the ramp
    (and never over less than the window's last half) gives `kept_up`, completions per arrival (1 - the
    line's slope / the arrival rate), `in_flight_growth`, the line's end over its start, and
    `in_flight_rise_sigma`, that rise against the rise a server that keeps up would show with the same latencies
    (`shuffled_rises`), in standard deviations, so neither a few requests bunching at the end of a short run nor
    long requests still filling the window after the ramp are taken for a backlog.
    `latency_growth`: latency per output token (E2E / tokens, so lengths add no noise) of the later half of
    those arrivals over the earlier half's (of the window's last third over its first when the window is
    short). `window_short`: the ramp took more than half the window, so a
    rising in-flight count may be the ramp itself; `window_note` then says how long a window can tell."""
    out: dict[str, float | bool | None] = {"kept_up": None, "latency_growth": None, "in_flight_growth": None,
                                           "in_flight_rise_sigma": None, "ramp_s": None, "window_short": None}
    starts, ends, tokens, unit = arrivals(measured)
    if len(starts) < 30:
        return out
    first, last = float(starts.min()), float(starts.max())
    span = last - first
    if span <= 0:
        return out
    e2e = ends - starts
    ramp = float(np.percentile(e2e[starts <= first + span / 3], RAMP_QUANTILE))
    out["ramp_s"] = ramp
    out["window_short"] = ramp > span / 2
    cut = first + min(max(span / 3, ramp), span / 2)
    grid = np.linspace(cut, last, 40)
    flying = in_flight(starts, ends, grid)
    slope, intercept = np.polyfit(grid, flying, 1)
    arrival_rate = len(starts) / span
    out["kept_up"] = float(1.0 - slope / arrival_rate)
    at_start, at_end = intercept + slope * cut, intercept + slope * last
    out["in_flight_growth"] = float(at_end / max(at_start, 1.0))
    null = shuffled_rises(starts, e2e, grid)
    out["in_flight_rise_sigma"] = float((at_end - at_start - null.mean()) / max(float(null.std()), 1.0))
    per_token = e2e / tokens
    if out["window_short"]:  # the whole window's first and last thirds: a queue shows even in a short one
        earlier, later = per_token[starts < first + span / 3], per_token[starts >= first + 2 * span / 3]
    else:
        middle = (cut + last) / 2
        earlier, later = per_token[(starts >= cut) & (starts < middle)], per_token[starts >= middle]
    if len(earlier) >= 10 and len(later) >= 10:
        out["latency_growth"] = float(np.median(later) / max(np.median(earlier), 1e-9))
    if out["window_short"]:
        median = float(np.median(e2e))
        out["window_note"] = (f"{unit} took {median:.1f} s (P50) against a {span:.1f} s arrival window: "
                              "too short to tell a ramp from a backlog, so only a latency that grew with "
                              f"arrival time counts; --duration {window_for(median):.0f} (10x P50 E2E) can tell")
    return out


def window_for(median_e2e_s: float) -> float:
    """Seconds of arrivals that leave the ramp of requests lasting `median_e2e_s` a tenth of the window."""
    return WINDOW_E2E_MULTIPLE * median_e2e_s


def meets(r: RequestRecord, slos: dict[str, float]) -> bool:
    """Whether a request is within every SLO bound (ms by key: ttft, tpot, e2el, ttfo)."""
    values = {"ttft": r.ttft, "tpot": tpot(r) or 0.0, "e2el": r.latency, "ttfo": r.ttfo_bound if r.ttfo_bound is not None else math.inf}
    return all(slo / 1000.0 >= values[key] for key, slo in slos.items())


def client_health(records: list[RequestRecord], percentiles: tuple[float, ...],
                  requested_rate: float | None) -> dict:
    """Achieved vs requested rate (of conversations, in a multi-turn run) and send lag. The client counts as
    overloaded only where it measurably shaped the result: it sent short of the schedule, or a tenth of its sends
    were late by a material share of the latencies it measured (one stalled send in a hundred moves neither the
    offered load nor a P99)."""
    if not records:
        return {"requested_rate": requested_rate, "achieved_rate": 0.0, "client_overloaded": False}
    lags = [r.dispatched - r.scheduled for r in records]
    queue = [r.start - r.scheduled for r in records]
    openers = [r for r in records if r.turn == 0] or records  # a later turn follows its reply, not the rate
    last = max(r.dispatched for r in openers)
    achieved = len(openers) / last if last > 0 else math.inf
    out = {"requested_rate": requested_rate, "achieved_rate": achieved}
    out |= stats_ms(lags, "send_lag", percentiles)
    out |= stats_ms(queue, "client_queue_time", percentiles)
    p90_lag = float(np.percentile(np.asarray(lags) * 1000, 90))
    ttfts = [r.ttft for r in records if r.success and r.ttft is not None]
    p50_ttft = float(np.median(ttfts)) * 1000 if ttfts else 0.0
    scheduled = requested_rate is not None and math.isfinite(requested_rate)  # at rate inf everything is "late"
    behind = scheduled and len(openers) > 10 and achieved < ACHIEVED_RATE_FLOOR * requested_rate
    late = p90_lag > max(SEND_LAG_LIMIT_MS, SEND_LAG_TTFT_SHARE * p50_ttft)
    out["p90_send_lag_ms"] = p90_lag
    out["client_overloaded"] = bool(scheduled and (behind or late))
    out["client_overload_reason"] = (f"sent {achieved:.2f} req/s of {requested_rate:g} requested" if behind else
                                     f"P90 send lag {p90_lag:.1f} ms against a P50 TTFT of {p50_ttft:.0f} ms"
                                     if late and scheduled else None)
    return out
