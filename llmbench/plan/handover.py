"""How many steps a request waited to join a server's batch, counted from its clients' records without a model.

A request sent while other streams decode gets its first token after some of their steps: the step under way when
it reached the engine and the step that prefilled it, two for a front end that hands it over at once, more where
the hand-over itself takes time. The count is the most tokens any other stream that spans the wait received in
it, reading each step's tokens as one: a client reads them one stream after another, so a send made while it
does (a closed loop's newcomer goes out on its predecessor's last token, read among them) comes before some of a
step that had already ended, and a first token can be read before the same step's others. On vLLM-CPU's loops
57-67 % of newcomers saw another stream's token within 2-3 ms of their send; counted as steps waited on, the loops
read 2.98-3.15, read as one 2.60-2.69 against 2.24-2.68 at open rates (Z10, Z11 in benchmarks/README.md). The
planner's replay gives an open loop's request 2 plus whatever the step under way has left of its `front-end
ingest`, and a closed loop's newcomer (sent when its predecessor's last token arrived) exactly 2.
"""

from __future__ import annotations

import numpy as np

TIE = 0.003  # s: one step's tokens reach the client within this of each other (twelve streams on vLLM-CPU: < 3 ms)


def handover_steps(records: list, skip: int = 0) -> np.ndarray:
    """Per request, in send order after the first `skip` (a closed loop's opening burst), whose wait [send, first
    token] another stream spans: that stream's tokens after the reading of the step's tokens the send fell in (if
    it fell in one) and up to the end of the reading its first token came in, the most over such streams. A
    reading is arrivals of any stream less than TIE (or a quarter of the median gap between a stream's tokens, if
    less) apart."""
    done = [r for r in records if r.success and not r.warmup and r.chunk_times]
    done.sort(key=lambda r: r.start)
    times = [np.asarray(r.chunk_times, dtype=float) for r in done]
    if not times:
        return np.array([], dtype=int)
    every = np.sort(np.concatenate(times))
    gaps = np.concatenate([np.diff(t) for t in times])
    tie = min(TIE, 0.25 * float(np.median(gaps))) if len(gaps) else TIE
    first = np.array([t[0] for t in times])
    last = np.array([t[-1] for t in times])
    counts = []
    for i, r in enumerate(done[skip:], skip):
        sent, got = r.start, first[i]
        spans = np.flatnonzero((first < sent) & (last > got))
        spans = spans[spans != i]
        if len(spans):
            cut, end = _reading_end(every, sent, tie), _reading_end(every, got, tie)
            counts.append(max(int(np.count_nonzero((times[j] > cut) & (times[j] <= end))) for j in spans))
    return np.array(counts, dtype=int)


def _reading_end(every: np.ndarray, sent: float, tie: float) -> float:
    """The last arrival of the step's tokens being read at `sent` (`sent` itself when none was)."""
    k = int(np.searchsorted(every, sent, side="right"))
    if k == 0 or sent - every[k - 1] > tie:
        return sent
    end = sent  # every[k - 1] <= sent < every[k], and the arrivals are sorted
    while k < len(every) and every[k] - end <= tie:
        end = every[k]
        k += 1
    return end
