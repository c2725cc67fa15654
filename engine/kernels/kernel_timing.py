"""Timing used at load to choose between two implementations of a layer on this machine."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch


def median_seconds(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, calls: int = 7) -> float:
    """Median of `calls` calls after a warm-up: one page fault or a neighbour's burst on a shared machine must
    not decide the path (a mean of five once sent a whole run down a 2x slower one)."""
    fn(x)
    return sorted(_one_call(fn, x) for _ in range(calls))[calls // 2]


def time_ratios(candidate: Callable[[torch.Tensor], torch.Tensor], baseline: Callable[[torch.Tensor], torch.Tensor],
                inputs: list[torch.Tensor], baseline_inputs: list[torch.Tensor] | None = None
                ) -> tuple[float, list[float]]:
    """`candidate`'s median time over `baseline`'s on each input, and their geometric mean. Each batch size
    counts the same: a sum of times is the largest batch's alone, and at 256 rows two GEMM paths can sit
    within noise while one is 2-4x faster at the 1-16 rows of a decode tail (bf16 on an AMD Zen 5: a summed
    timing chose F.linear in one run and oneDNN in the next). `baseline_inputs`: the same batch sizes in the
    baseline's own dtype, where the two differ."""
    ratios = []
    for x, y in zip(inputs, baseline_inputs or inputs, strict=True):
        base = median_seconds(baseline, y)
        first = _one_call(candidate, x)
        if _hopeless(first, base):  # or a one-time cost: the second call decides
            first = _one_call(candidate, x)
        ratios.append((first if _hopeless(first, base) else median_seconds(candidate, x)) / base)
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), ratios


HOPELESS = 4.0  # a call this many times the baseline's median, and HOPELESS_EXCESS_S more, is not repeated:
HOPELESS_EXCESS_S = 0.25  # bf16 tiles of 2,048 tokens emulated on an AVX2 CPU take 3.4 s a call (8 calls: 27 s)


def _hopeless(seconds: float, base: float) -> bool:
    """Far slower than the baseline. Judged on a second call when the first is: a first call also pays one-time
    costs (oneDNN compiling its bf16 kernels for a new shape), and on a Zen 4 one such call, 6.9x SDPA's time,
    sent a whole bf16 run to SDPA prefills, 10 % slower than the tiled ones the timing picked in the run before."""
    return seconds > HOPELESS * base and seconds - base > HOPELESS_EXCESS_S


def _one_call(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
    """One call's time, first-call costs included: only a path far slower than that is taken as losing on it."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn(x)
    sync()
    return time.perf_counter() - t0
