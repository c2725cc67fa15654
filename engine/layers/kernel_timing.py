"""Timing used at load to choose between two implementations of a layer on this machine."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def median_seconds(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, calls: int = 7) -> float:
    """Median of `calls` calls after a warm-up: one page fault or a neighbour's burst on a shared machine must
    not decide the path (a mean of five once sent a whole run down a 2x slower one)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    fn(x)
    times = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        fn(x)
        sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[calls // 2]
