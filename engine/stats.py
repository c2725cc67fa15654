"""Per-step engine statistics: a bounded ring buffer plus running totals."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, fields


@dataclass
class StepStats:
    time: float
    step_seconds: float
    num_prefill_tokens: int
    num_decode_tokens: int
    num_running: int
    num_waiting: int
    kv_usage: float
    prefix_queried_tokens: int
    prefix_hit_tokens: int
    num_preemptions: int
    num_generated_tokens: int
    num_seqs: int = 0  # sequences in the step's batch
    num_context_tokens: int = 0  # K/V tokens attended over, summed over the batch
    num_drafts: int = 0  # sequences that got speculative guesses this step
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    index: int = 0  # position in the engine's life, for incremental reads


_SUMMED = ("step_seconds", "num_prefill_tokens", "num_decode_tokens", "prefix_queried_tokens",
           "prefix_hit_tokens", "num_preemptions", "num_generated_tokens", "num_drafts", "num_draft_tokens",
           "num_accepted_tokens")


class StatsLog:
    def __init__(self, window: int) -> None:
        self.steps: deque[StepStats] = deque(maxlen=window)
        self.totals: dict[str, float] = dict.fromkeys(_SUMMED, 0) | {"steps": 0}

    def record(self, stats: StepStats) -> None:
        stats.index = int(self.totals["steps"])
        self.steps.append(stats)
        self.totals["steps"] += 1
        for name in _SUMMED:
            self.totals[name] += getattr(stats, name)

    def as_records(self, since: int = -1) -> list[dict]:
        """Steps with index > since still in the ring buffer."""
        return [asdict(s) for s in list(self.steps) if s.index > since]

    @staticmethod
    def columns() -> list[str]:
        return [f.name for f in fields(StepStats)]
