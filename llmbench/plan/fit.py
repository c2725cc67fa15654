"""Step-time models fitted on measurements: the bundled engine's per-step statistics (a BLIS-style linear
model in the step's token counts), weighted to minimise relative error as DistServe does."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class LinearStepModel:
    """t = b0 + b_prefill·prefill_tokens + b_decode·decode_seqs + b_context·(K/V tokens attended)."""

    b0: float
    b_prefill: float
    b_decode: float
    b_context: float
    scale: float = 1.0  # uncertainty band: re-simulate with 1 ± the fit's relative error
    rel_error: float = 0.0  # median |residual| / t on the fitting data

    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float,
                  cached_context: float = 0.0) -> float:
        attended = context_tokens + cached_context + prefill_tokens
        t = self.b0 + self.b_prefill * prefill_tokens + self.b_decode * decode_seqs + self.b_context * attended
        return self.scale * t

    def scaled(self, factor: float) -> LinearStepModel:
        return replace(self, scale=factor)


def read_steps(folder: Path) -> list[dict]:
    steps = []
    for path in sorted(Path(folder).glob("*.engine_steps.jsonl")):
        steps += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return steps


def fit_steps(steps: list[dict]) -> LinearStepModel:
    rows = [s for s in steps if s["step_seconds"] > 0 and s["num_prefill_tokens"] + s["num_decode_tokens"] > 0]
    if len(rows) < 10:
        raise ValueError(f"only {len(rows)} engine steps recorded; need at least 10 to fit a step-time model")
    t = np.array([s["step_seconds"] for s in rows])
    x = np.column_stack([
        np.ones_like(t),
        [s["num_prefill_tokens"] for s in rows],
        [s["num_decode_tokens"] for s in rows],
        [s.get("num_context_tokens", 0) for s in rows],
    ]).astype(float)
    w = 1.0 / t
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:  # least squares, dropping any coefficient that comes out negative (costs are >= 0)
        sol, *_ = np.linalg.lstsq(x[:, active] * w[:, None], t * w, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    rel = float(np.median(np.abs(x @ coef - t) / t))
    return LinearStepModel(*coef, rel_error=rel)


def fit_client_overhead(measured_ttft: np.ndarray, simulated_ttft: np.ndarray) -> float:
    """HTTP, tokenization and streaming time that the engine's own steps do not see (median gap)."""
    if not len(measured_ttft) or not len(simulated_ttft):
        return 0.0
    return max(float(np.median(measured_ttft) - np.median(simulated_ttft)), 0.0)
