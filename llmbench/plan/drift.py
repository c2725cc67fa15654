"""Tail term `speed drift`: a measured engine's speed wanders over seconds, and its P99s come from the slow spells.

A step-time model fitted on per-step statistics says what a step of a given composition costs on average; the
engine it was fitted on ran some seconds faster and some slower than that (a shared host, clock changes, the load
generator's own CPU beside it). On the bundled engine on a 2-core VM the measured / fitted ratio, summed over 1 s
windows, ran 0.81-1.57 (5th-95th percentile) and stayed put from step to step (lag-1 correlation of the log ratio
0.65-0.77): a request that decodes through a slow spell has a TPOT well above what any average step gives, and a
simulation at the average speed puts the P99 TPOT 34-43 % low at low rates even on the runs it was fitted on.

The term keeps those ratios, window by window and run by run, and a simulation draws a trace from them as a block
bootstrap (blocks of consecutive windows from one run, so a slow spell stays as long as it was): every step's
time is multiplied by its window's ratio, and a figure is the median over a few traces. It is not in the
planner's default: on two fresh self-checks (`benchmarks/plan_selfcheck.py --drift-ablation`, one sweep and three
pooled rounds) it did worse than the average speed (largest |error| 41.1 against 38.0 %, 38.9 against 31.5 %).
What stays in use is `run_speeds`: how far the same work's cost moved from run to run, which `plan --results`
reports as a limit on its P99s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmbench.plan.scheduler import StepModel

WINDOW_S = 1.0
BLOCK_WINDOWS = 10


@dataclass(frozen=True)
class SpeedDrift:
    runs: tuple[tuple[float, ...], ...]  # measured / fitted step time per window, one tuple per run
    window: float = WINDOW_S
    block: int = BLOCK_WINDOWS

    def trace(self, seed: int) -> SpeedTrace:
        return SpeedTrace(self, np.random.default_rng(seed))

    def describe(self) -> str:
        ratios = np.concatenate([np.array(r) for r in self.runs])
        lo, hi = np.percentile(ratios, [5, 95])
        return (f"speed drift (the fitted engine ran x{lo:.2f}-x{hi:.2f} of its model's step time over "
                f"{self.window:g} s windows, 5th-95th percentile of {len(ratios)}; drawn in {self.block}-window blocks)")


class SpeedTrace:
    """One draw: a step-time factor for every window, made as the simulation's clock reaches it."""

    def __init__(self, drift: SpeedDrift, rng: np.random.Generator) -> None:
        self.drift, self.rng = drift, rng
        self.factors: list[float] = []
        self.usable = [r for r in drift.runs if r]

    def _extend(self, windows: int) -> None:
        while len(self.factors) <= windows:
            run = self.usable[self.rng.integers(len(self.usable))]
            start = int(self.rng.integers(max(len(run) - self.drift.block, 0) + 1))
            self.factors.extend(run[start:start + self.drift.block])

    def factor(self, now: float) -> float:
        i = max(int(now // self.drift.window), 0)
        self._extend(i)
        return self.factors[i]

    def window_end(self, now: float) -> float:
        return (max(int(now // self.drift.window), 0) + 1) * self.drift.window


def _rows(steps: list[dict]) -> list[dict]:
    return [s for s in steps if s["step_seconds"] > 0 and s["num_prefill_tokens"] + s["num_decode_tokens"] > 0]


def _modelled(s: dict, model: StepModel) -> float:
    seqs = max(s.get("num_seqs", 0) - s["num_decode_tokens"], int(s["num_prefill_tokens"] > 0))
    return model.step_time(s["num_prefill_tokens"], s["num_decode_tokens"], s.get("num_context_tokens", 0),
                           prefill_seqs=seqs)


def run_speeds(runs: list[list[dict]], model: StepModel) -> list[float]:
    """Each run's measured step time over what `model` gives its steps (runs without steps left out): how far
    the same work's cost moved from run to run, which no model of load explains."""
    speeds = []
    for steps in runs:
        rows = _rows(steps)
        modelled = sum(_modelled(s, model) for s in rows)
        if modelled > 0:
            speeds.append(sum(s["step_seconds"] for s in rows) / modelled)
    return speeds


def fit_drift(runs: list[list[dict]], model: StepModel, window: float = WINDOW_S, block: int = BLOCK_WINDOWS
              ) -> SpeedDrift | None:
    """Each run's steps (the bundled engine's statistics, in time order) against `model`, window by window;
    None when no run has a whole window of steps."""
    ratios = []
    for steps in runs:
        rows = _rows(steps)
        if not rows:
            ratios.append(())
            continue
        t0 = rows[0]["time"] - rows[0]["step_seconds"]
        measured: dict[int, float] = {}
        modelled: dict[int, float] = {}
        for s in rows:
            w = int((s["time"] - t0) // window)
            measured[w] = measured.get(w, 0.0) + s["step_seconds"]
            modelled[w] = modelled.get(w, 0.0) + _modelled(s, model)
        ratios.append(tuple(measured[w] / modelled[w] for w in sorted(measured) if modelled[w] > 0))
    if not any(ratios):
        return None
    return SpeedDrift(tuple(ratios), window, block)
