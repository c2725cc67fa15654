"""benchmarks/engine_throughput.py's account of continuous / static batching: the fixed cost of a decode step from
the run's own step statistics, and the ratio the extra steps predict and bound."""

import pytest

from engine.stats import StepStats


def _step(seconds: float, seqs: int, context: int, prefill: int = 0) -> StepStats:
    return StepStats(0.0, seconds, prefill, seqs, seqs, 0, 0.0, 0, 0, 0, seqs, num_seqs=seqs,
                     num_context_tokens=context)


def test_the_fixed_cost_is_the_decode_fit_s_intercept(benchmark_script):
    """Decode steps of 12 ms + 0.4 ms a sequence + 1 µs a context token give back 12 ms; prefill steps, however
    long, are not decode steps; too few decode steps give no figure."""
    bench = benchmark_script("engine_throughput")
    steps = [_step(0.012 + 0.0004 * n + 1e-6 * n * ctx, n, n * ctx) for n, ctx in
             [(1, 1800), (4, 1200), (24, 650), (90, 350), (150, 220), (256, 200), (8, 900), (64, 400), (2, 1500),
              (128, 300)]]
    steps += [_step(0.98, 130, 30000, prefill=2048)] * 5
    assert bench.fixed_step_seconds(steps) == pytest.approx(0.012, rel=1e-6)
    assert bench.fixed_step_seconds(steps[:9]) is None


def test_extra_steps_predict_and_bound_the_ratio(benchmark_script):
    """300 static steps against 100 continuous ones at 10 ms each: 2 s more on a 4 s run predict 1.50x; with the
    work at the ceiling (1 s) beside continuous's 1 s of fixed costs, 2.00x at most."""
    line = benchmark_script("engine_throughput").why_static({"steps": 100, "fixed_s": 0.01}, {"steps": 300}, 4.0, 1.0)
    assert "300 steps to continuous's 100" in line and "10.0 ms" in line
    assert "predict 1.50×" in line and "at most 2.00×" in line
