"""Per-step engine statistics: a bounded ring buffer plus running totals."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, fields

import torch


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
    device_seconds: float = 0.0  # the forward and sampling on the device (the rest of the step is host work)
    index: int = 0  # position in the engine's life, for incremental reads


_SUMMED = ("step_seconds", "device_seconds", "num_prefill_tokens", "num_decode_tokens", "prefix_queried_tokens",
           "prefix_hit_tokens", "num_preemptions", "num_generated_tokens", "num_drafts", "num_draft_tokens",
           "num_accepted_tokens")


class DeviceClock:
    """How long the device spent on a step's forward and sampling: CUDA events around them, read after the
    step's one synchronisation (gaps between kernels inside the span count as busy, so in eager mode this is
    an upper bound); on the CPU, where the work is synchronous, the wall time."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.t0 = self.elapsed = 0.0

    def start(self) -> None:
        if self.cuda:
            self.begin.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            self.end.record()
        else:
            self.elapsed = time.perf_counter() - self.t0

    def seconds(self) -> float:
        """After the device has caught up (the step's tokens are on the host)."""
        return self.begin.elapsed_time(self.end) / 1000 if self.cuda else self.elapsed


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
