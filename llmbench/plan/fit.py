"""Step-time models fitted on measurements: the bundled engine's per-step statistics, weighted to minimise
relative error as DistServe does.

t = f(decode sequences) + b_prefill·prefill tokens + b_prefill_seq·prefill sequences + b_context·K/V tokens
attended. f is piecewise linear on knots 0, 1, 2, 4, 8, … (BLIS-style models use one slope; on this
engine a decode step's cost is concave in the batch: 1 → 4 sequences costs more per sequence than
16 → 32, because per-step work dominates small batches); beyond the largest calibrated batch f continues
with its last slope.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

KNOTS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class LinearStepModel:
    knots: tuple[float, ...]  # decode batch sizes
    values: tuple[float, ...]  # f at each knot, seconds
    b_prefill: float
    b_prefill_seq: float
    b_context: float
    scale: float = 1.0  # uncertainty band: re-simulate with 1 ± the fit's relative error
    rel_error: float = 0.0  # median |residual| / t on the fitting data

    def decode_cost(self, decode_seqs: float) -> float:
        k, v = self.knots, self.values
        if decode_seqs <= k[-1] or len(k) < 2:
            return float(np.interp(decode_seqs, k, v))
        slope = (v[-1] - v[-2]) / (k[-1] - k[-2])
        return v[-1] + slope * (decode_seqs - k[-1])

    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float | np.ndarray,
                  cached_context: float = 0.0, prefill_seqs: float = 0.0, prefill_pairs: float | None = None
                  ) -> float | np.ndarray:
        attended = context_tokens + cached_context + prefill_tokens
        t = (self.decode_cost(decode_seqs) + self.b_prefill * prefill_tokens + self.b_prefill_seq * prefill_seqs
             + self.b_context * attended)
        return self.scale * t

    def scaled(self, factor: float) -> LinearStepModel:
        return replace(self, scale=factor)


def _tents(decode: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Interpolation weights of each decode count on the knots (columns), with linear extension past the
    last knot."""
    cols = np.zeros((len(decode), len(knots)))
    for j in range(len(knots)):
        basis = np.zeros(len(knots))
        basis[j] = 1.0
        cols[:, j] = np.interp(decode, knots, basis)
    beyond = decode > knots[-1]
    if beyond.any() and len(knots) > 1:
        frac = (decode[beyond] - knots[-1]) / (knots[-1] - knots[-2])
        cols[beyond, -1] = 1 + frac
        cols[beyond, -2] = -frac
    return cols


def fit_steps(steps: list[dict]) -> LinearStepModel:
    rows = [s for s in steps if s["step_seconds"] > 0 and s["num_prefill_tokens"] + s["num_decode_tokens"] > 0]
    if len(rows) < 10:
        raise ValueError(f"only {len(rows)} engine steps recorded; need at least 10 to fit a step-time model")
    t = np.array([s["step_seconds"] for s in rows])
    decode = np.array([s["num_decode_tokens"] for s in rows], dtype=float)
    prefill = np.array([s["num_prefill_tokens"] for s in rows], dtype=float)
    prefill_seqs = np.array([max(s.get("num_seqs", 0) - s["num_decode_tokens"], int(s["num_prefill_tokens"] > 0))
                             for s in rows], dtype=float)
    context = np.array([s.get("num_context_tokens", 0) for s in rows], dtype=float)
    top = decode.max()
    knots = np.array([k for k in KNOTS if k < top] + [top]) if top > 0 else np.array([0.0])
    x = np.column_stack([_tents(decode, knots), prefill, prefill_seqs, context])
    w = 1.0 / t
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:  # least squares, dropping any coefficient that comes out negative (costs are >= 0)
        sol, *_ = np.linalg.lstsq(x[:, active] * w[:, None], t * w, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    nk = len(knots)
    values = np.maximum.accumulate(coef[:nk])  # a larger batch never costs less
    coef[:nk] = values
    rel = float(np.median(np.abs(x @ coef - t) / t))
    return LinearStepModel(tuple(float(k) for k in knots), tuple(float(v) for v in values), float(coef[nk]),
                           float(coef[nk + 1]), float(coef[nk + 2]), rel_error=rel)


def fit_client_overhead(measured_ttft: np.ndarray, simulated_ttft: np.ndarray) -> float:
    """HTTP, tokenization and streaming time that the engine's own steps do not see (median gap)."""
    if not len(measured_ttft) or not len(simulated_ttft):
        return 0.0
    return max(float(np.median(measured_ttft) - np.median(simulated_ttft)), 0.0)
