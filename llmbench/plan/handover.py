"""How many steps a request waited to join a server's batch, counted from its clients' records without a model.

A request sent while other streams decode gets its first token after some of their steps: the step under way when
it reached the engine and the step that prefilled it, two for a front end that hands it over at once, more where
the hand-over itself takes time. The count is the most tokens any other stream that spans the wait received in
it. The planner's replay gives an open loop's request 2 plus whatever the step under way has left of its `front-end
ingest`, and a closed loop's newcomer (sent when its predecessor's last token arrived) exactly 2; vLLM-CPU on two
cores counted 2.3-2.6 at open rates and 3.0-3.2 in loops (Z10, Z11 in benchmarks/README.md).
"""

from __future__ import annotations

import numpy as np


def handover_steps(records: list, skip: int = 0) -> np.ndarray:
    """Per request, in send order after the first `skip` (a closed loop's opening burst), whose wait [send, first
    token] another stream spans: that stream's tokens inside the wait, the most over such streams."""
    done = [r for r in records if r.success and not r.warmup and r.chunk_times]
    done.sort(key=lambda r: r.start)
    times = [np.asarray(r.chunk_times, dtype=float) for r in done]
    first = np.array([t[0] for t in times])
    last = np.array([t[-1] for t in times])
    counts = []
    for i, r in enumerate(done[skip:], skip):
        sent, got = r.start, first[i]
        spans = np.flatnonzero((first < sent) & (last > got))
        spans = spans[spans != i]
        if len(spans):
            counts.append(max(int(np.count_nonzero((times[j] > sent) & (times[j] <= got))) for j in spans))
    return np.array(counts, dtype=int)
