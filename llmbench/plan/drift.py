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
reports as a limit on its P99s; `run_swings`, the same within a run; and `run_pauses`, the moments the host gave
the engine no CPU at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmbench.client_stalls import STALL
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


SWING = 2.0  # see run_swings
PAUSE_RATIO = 2.0  # a pause is also this many times its fitted time: a 1,000-token prefill 30 % past a 0.4 s fit
# is the fit's miss


def run_pauses(steps: list[dict], model: StepModel) -> list[tuple[float, float]]:
    """One run's pauses as (seconds from its first step, seconds lost): a step that took more than STALL past
    what `model` gives it and over PAUSE_RATIO times that, or a wait that long between two steps while requests
    were in the engine. A pause is the host's (it gave the engine no CPU), not load's: it adds its length to the
    TPOT or TTFT of every request in flight then, and so sets a short run's P99s while `run_speeds`' sum over the
    run barely moves (a 0.9 s SIGSTOP of the bundled engine 2.5 s into a 6 s run: P99 TPOT 28 ms against 8 ms
    replayed, the run's speed x1.18)."""
    if not steps:
        return []
    t0 = steps[0]["time"] - steps[0]["step_seconds"]
    pauses = []
    for before, s in zip([None, *steps], steps, strict=False):
        start = s["time"] - s["step_seconds"]
        holding = before is not None and before.get("num_running", 0) + before.get("num_waiting", 0) > 0
        if holding and start - before["time"] > STALL:
            pauses.append((before["time"] - t0, start - before["time"]))
        lost = _lost(s, model)
        if lost:
            pauses.append((start - t0, lost))
    return pauses


def _lost(s: dict, model: StepModel) -> float:
    """Seconds a step of work took past its fit where that makes it a pause (0.0 where it does not)."""
    if not _rows([s]):
        return 0.0
    modelled = _modelled(s, model)
    paused = s["step_seconds"] - modelled > STALL and s["step_seconds"] > PAUSE_RATIO * modelled
    return s["step_seconds"] - modelled if paused else 0.0


def window_ratios(steps: list[dict], model: StepModel, window: float = WINDOW_S, min_busy: float = 0.0
                  ) -> tuple[float, ...]:
    """One run's measured / fitted step time, window by window, over windows whose steps took at least `min_busy`
    of the window."""
    rows = _rows(steps)
    if not rows:
        return ()
    t0 = rows[0]["time"] - rows[0]["step_seconds"]
    measured: dict[int, float] = {}
    modelled: dict[int, float] = {}
    for s in rows:
        w = int((s["time"] - t0) // window)
        measured[w] = measured.get(w, 0.0) + s["step_seconds"]
        modelled[w] = modelled.get(w, 0.0) + _modelled(s, model)
    return tuple(measured[w] / modelled[w] for w in sorted(measured)
                 if modelled[w] > 0 and measured[w] >= min_busy * window)


def run_swings(runs: list[list[dict]], model: StepModel) -> list[float]:
    """Each run's slowest 1 s window over its fastest (windows busy a tenth of the time or more, pauses left to
    `run_pauses`; 1.0 with fewer than two). Past SWING the host, not the load, set the run's P99s: on a 2-core CI
    runner whose other test worker came and went, one 6 s run's windows ran x0.62 to x1.66 of the fitted step time
    and its P99 TPOT was 21 ms where its replay gave 7, while `run_speeds` said x1.13; quiet runs swung x1.13-1.52."""
    swings = []
    for steps in runs:
        ratios = swing_windows(steps, model)
        swings.append(max(ratios) / min(ratios) if len(ratios) > 1 else 1.0)
    return swings


def swing_windows(steps: list[dict], model: StepModel) -> tuple[float, ...]:
    """The windows `run_swings` compares."""
    return window_ratios([s for s in steps if not _lost(s, model)], model, min_busy=0.1)


def fit_drift(runs: list[list[dict]], model: StepModel, window: float = WINDOW_S, block: int = BLOCK_WINDOWS
              ) -> SpeedDrift | None:
    """Each run's steps (the bundled engine's statistics, in time order) against `model`, window by window;
    None when no run has a whole window of steps."""
    ratios = [window_ratios(steps, model, window) for steps in runs]
    if not any(ratios):
        return None
    return SpeedDrift(tuple(ratios), window, block)
