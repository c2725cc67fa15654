"""Tail term `step jitter`: a measured server's steps of one batch do not all take one time, and a queue feels it.

The step-time model gives a step of a given batch one time. The server's own decode-only steps of one batch size,
read from the token gaps its clients saw (decode_gaps.py), spread around their median, and the spread is a few
milliseconds whatever the step's length: on vLLM-CPU (2-core AMD EPYC, Z10 in benchmarks/README.md) the gaps'
interquartile range was 4.7 ms at one sequence (median 13.7 ms) and 5.4-7.9 ms at two to twelve (medians up to
28.6 ms), and one gap told nothing of the next (lag-1 correlation -0.00 to 0.06), so it is neither the client's
clock (which would make a long gap's successor short) nor a slow spell (tail term `speed drift`). It is added, not
multiplied: a prefill step of 300 ms carries the same few milliseconds, not a hundred.

A deterministic step leaves the spread out, and queueing is where it shows: a request that arrives mid-step waits
out the rest of the step in progress, which is longer on average the more step times vary (the mean residual of a
renewal process is E[S^2] / 2E[S], not E[S] / 2), and near saturation a run of slow steps builds a queue that a run
of fast ones does not take back. A replay without it put the open rates' P99 TTFT low in eleven of twelve figures
over four registered vLLM-CPU rounds (Z7-Z10; twelve of fifteen with Z11).

The term keeps the calibration's gap offsets (each quiet gap less its run's and batch size's median) as evenly
spaced quantiles, centered on mean 0 so the fitted speed, and with it every median TPOT and throughput, stays the
calibration's; every simulated step gets one of them added, drawn from a seeded stream (a replay is repeatable,
and a calibration's bisection compares like with like), and never runs shorter than half its modelled time.

Not in the default (`plan --step-jitter` asks for it, on the measured server itself): on its registered round
(Z11) 15 of 16 figures within 15 % as the deterministic replay, median |error| 4.09 against 3.99 %. It moved the
open rates' median TTFT toward the measured (+7 -> +4 %, -3 -> -2 %) and the loop's P99 TPOT away (-2 -> -5 %).
"""

from __future__ import annotations

import numpy as np

QUANTILES = 400
MIN_GAPS = 200  # fewer quiet gaps than this: no jitter (its tail would rest on a handful)
BLOCK = 4096
FLOOR = 0.5  # a step runs at least this share of its modelled time


def jitter_offsets(offsets: np.ndarray, points: int = QUANTILES) -> tuple[float, ...]:
    """The offsets' distribution (seconds) as `points` evenly spaced quantiles centered on mean 0; () from too few."""
    offsets = np.asarray(offsets, dtype=float)
    offsets = offsets[np.isfinite(offsets)]
    if len(offsets) < MIN_GAPS:
        return ()
    q = np.quantile(offsets, (np.arange(points) + 0.5) / points)
    return tuple(float(x) for x in q - q.mean())


def describe(offsets: tuple[float, ...], gaps: int) -> str:
    lo, hi = np.percentile(offsets, [5, 95]) * 1000
    return (f"step jitter (the server's decode-only steps of one batch size ran {lo:+.1f} to {hi:+.1f} ms about "
            f"their mean, 5th-95th percentile of {gaps:,} token gaps; each simulated step draws one)")


class JitterDraws:
    """One simulation's stream of step offsets; steps unchanged where there are none."""

    def __init__(self, offsets: tuple[float, ...], seed: int = 0) -> None:
        self.offsets = np.asarray(offsets, dtype=float)
        self.rng = np.random.default_rng(seed)
        self.buffer, self.at = np.empty(0), 0

    def _draw(self, n: int) -> np.ndarray:
        if self.at + n > len(self.buffer):
            self.buffer = np.concatenate([self.buffer[self.at:], self.rng.choice(self.offsets, max(BLOCK, n))])
            self.at = 0
        out = self.buffer[self.at:self.at + n]
        self.at += n
        return out

    def many(self, times: np.ndarray) -> np.ndarray:
        if not len(self.offsets):
            return times
        return np.maximum(times + self._draw(len(times)), FLOOR * times)

    def one(self, time: float) -> float:
        if not len(self.offsets):
            return time
        return max(time + float(self._draw(1)[0]), FLOOR * time)
