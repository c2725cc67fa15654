"""Tail term `request spread`: what a calibrated replay misses request by request, put back into its P99s.

The simulator is deterministic: given the arrivals and lengths it gives each request one TTFT and one TPOT. A
real server does not: the same request in the same company comes out faster or slower (the host's scheduler, the
API server's event loop, a prefill that lands just before or just after a step boundary). A calibration matches
the medians, so this spread cancels there, but a P99 is the largest few values, and the largest few of (model +
spread) sit above the largest few of the model alone: a deterministic replay of a server's own arrivals put its
P99 TTFT low in eight of nine open rates over three fresh vLLM-CPU servers (Z7-Z9 in benchmarks/README.md).

The term keeps, from the calibration's replay of its own runs, the log ratio measured / simulated of the requests
that set a tail (the quarter with the largest simulated TTFT, and with the largest simulated TPOT), centered on
its median. A simulated run then counts every request `COPIES` times, and each copy in the run's own tail
quarter of a figure has it multiplied by a ratio drawn from those: its P90s and P99s are the replay's with the
server's own request-to-request spread where it sets them, its medians the calibration's (the quarter below the
tail carries a spread of its own, which a median does not feel). Request counts, tokens and time stay the run's.

Open loops only (a rate, `--qps` and their capacity searches): on its first registered round (Z9), applied
everywhere, it took those open-rate P99 TTFTs from -13 / -18 / -14 % to +16 / +4 / +7 %, but a closed loop's P99
TTFT, set by its opening burst's queue (which the replay already holds), from +4 to +37 %. A closed loop and an
all-at-once run are queues of that kind, so they keep the replay's figures. Not in the default
(`plan --request-spread` asks for it): in this form, on its own registered round (Z10), 14 of 16 figures within
15 % against the replay's 15 (open-rate P99 TTFT -3 / -10 / -18 % became +6 / +8 / -10 %, P99 TPOT at 1.1 req/s
+3 % became +17 %).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmbench.plan.simulator import SimResult

COPIES = 20
TAIL_SHARE = 0.25  # the requests whose simulated figure is in this top share set the spread kept
MIN_REQUESTS = 20  # fewer tail requests than this: no spread (a P99 of it would rest on one or two)


@dataclass(frozen=True)
class RequestSpread:
    ttft: tuple[float, ...]  # log(measured / simulated), centered on the median
    tpot: tuple[float, ...]

    @classmethod
    def from_replay(cls, measured_ttft: np.ndarray, simulated_ttft: np.ndarray, measured_tpot: np.ndarray,
                    simulated_tpot: np.ndarray) -> RequestSpread | None:
        """From the calibration's requests, measured beside replayed (TPOT: requests of more than one token)."""
        ttft, tpot = _tail(measured_ttft, simulated_ttft), _tail(measured_tpot, simulated_tpot)
        if ttft is None or tpot is None:
            return None
        return cls(ttft, tpot)

    def apply(self, res: SimResult, seed: int = 0) -> SimResult:
        """Every request `COPIES` times; those in the run's own tail quarter of a figure carry the spread in it."""
        rng = np.random.default_rng(seed)
        ttft, tpot = np.repeat(res.ttft, COPIES), np.repeat(res.tpot_all, COPIES)
        multi = np.repeat(res.multi_token, COPIES)
        ttft_factor = _factors(ttft, np.ones(len(ttft), dtype=bool), self.ttft, rng)
        tpot_factor = _factors(tpot, multi, self.tpot, rng)
        e2el = ttft * ttft_factor + (np.repeat(res.e2el, COPIES) - ttft) * tpot_factor
        return SimResult(ttft * ttft_factor, tpot * tpot_factor, multi, e2el, res.itl, res.output_tokens,
                         res.duration, res.preemptions, res.finished)

    def describe(self) -> str:
        (t_lo, t_hi), (p_lo, p_hi) = (np.exp(np.percentile(v, [5, 95])) for v in (self.ttft, self.tpot))
        return (f"request spread (the server's tail requests ran x{t_lo:.2f}-x{t_hi:.2f} of the replay's TTFT and "
                f"x{p_lo:.2f}-x{p_hi:.2f} of its TPOT, 5th-95th percentile; kept in open loops' P90s and P99s)")


def _factors(values: np.ndarray, counted: np.ndarray, spread: tuple[float, ...],
             rng: np.random.Generator) -> np.ndarray:
    factor = np.ones(len(values))
    if counted.any():
        tail = counted & (values >= np.quantile(values[counted], 1 - TAIL_SHARE))
        factor[tail] = np.exp(rng.choice(spread, int(tail.sum())))
    return factor


def _tail(measured: np.ndarray, simulated: np.ndarray) -> tuple[float, ...] | None:
    measured, simulated = np.asarray(measured, dtype=float), np.asarray(simulated, dtype=float)
    ok = np.isfinite(measured) & np.isfinite(simulated) & (measured > 0) & (simulated > 0)
    measured, simulated = measured[ok], simulated[ok]
    if not len(simulated):
        return None
    top = simulated >= np.quantile(simulated, 1 - TAIL_SHARE)
    if top.sum() < MIN_REQUESTS:
        return None
    ratio = np.log(measured[top] / simulated[top])
    return tuple(float(x) for x in ratio - np.median(ratio))
