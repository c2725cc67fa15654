"""The load-time choice between two kernels weighs every batch size the same."""

import time

import torch

from engine.layers.kernel_timing import time_ratios


def _sleeper(ms_small: float, ms_large: float):
    def fn(x: torch.Tensor) -> torch.Tensor:
        time.sleep((ms_small if len(x) < 100 else ms_large) / 1e3)
        return x
    return fn


def test_a_path_much_faster_on_small_batches_wins_though_the_summed_time_says_otherwise():
    """4x faster at 1 row, 22 % slower at 256: a sum of times (46 against 44 ms) picks the baseline; the
    geometric mean of per-size ratios (~0.55) picks the candidate."""
    small, large = torch.zeros(1, 4), torch.zeros(256, 4)
    mean, ratios = time_ratios(_sleeper(2, 44), _sleeper(8, 36), [small, large])
    assert ratios[0] < 0.6 and ratios[1] > 1.0
    assert mean < 0.85
    mean, _ = time_ratios(_sleeper(8, 36), _sleeper(2, 44), [small, large])
    assert mean > 1.15
