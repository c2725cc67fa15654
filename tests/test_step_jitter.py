"""Tail term `step jitter` (llmbench/plan/step_jitter.py): the measured server's step-to-step spread, read from its
decode-only token gaps as milliseconds added to a step, and drawn by every simulated step of a plan on it."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.plan.decode_gaps import decode_curve
from llmbench.plan.simulator import simulate
from llmbench.plan.step_jitter import FLOOR, JitterDraws, jitter_offsets
from tests.test_calibration import _catalog_setup
from tests.test_decode_gaps import _stepped_run


def test_the_gaps_give_the_spread_in_milliseconds_about_each_batch_sizes_median(tmp_path):
    """A server whose steps carry +-4 ms (uniform) at every batch size, its steps 10 ms + 1.5 ms a sequence: the
    offsets read back are the +-4 ms (quartiles -2 / +2 ms), centered on mean 0; a steady server reads none."""
    rng = np.random.default_rng(11)
    _stepped_run(tmp_path, "rate-2", 2, 300, 0.010, 0.0015, rng, jitter=0.004)
    _stepped_run(tmp_path, "rate-5", 5, 300, 0.010, 0.0015, rng, jitter=0.004)
    curve = decode_curve(tmp_path, ["rate-2", "rate-5"])
    offsets = np.array(jitter_offsets(curve.offsets))
    assert abs(offsets.mean()) < 1e-12 and len(curve.offsets) == curve.gaps
    q25, q75 = np.percentile(offsets, [25, 75])
    assert q25 == pytest.approx(-0.002, abs=5e-4) and q75 == pytest.approx(0.002, abs=5e-4)
    assert -0.0046 < np.percentile(offsets, 1) < -0.0034 and 0.0034 < np.percentile(offsets, 99) < 0.0046
    quiet = decode_curve(tmp_path, ["rate-2", "rate-5"], keep={"rate-2": set(), "rate-5": set()})
    assert quiet is None  # no gap kept: no curve, no jitter
    steady = tmp_path / "steady"
    _stepped_run(steady, "rate-2", 2, 300, 0.010, 0.0015, np.random.default_rng(12))
    assert np.abs(jitter_offsets(decode_curve(steady, ["rate-2"]).offsets)).max() < 1e-9
    assert jitter_offsets(np.zeros(10)) == ()  # too few gaps to read a tail from


def test_draws_add_to_a_step_never_below_half_of_it_and_repeat():
    """Seeded: two simulations draw the same offsets; a draw that would take a step below half its modelled
    time leaves it at half; no offsets, no change."""
    offsets = (-0.05, 0.0, 0.05)
    a, b = JitterDraws(offsets), JitterDraws(offsets)
    times = np.full(10_000, 0.02)
    first, second = a.many(times), b.many(times)
    assert np.array_equal(first, second)
    assert first.min() == pytest.approx(FLOOR * 0.02) and first.max() == pytest.approx(0.07)
    assert {round(x, 6) for x in first} == {0.01, 0.02, 0.07}
    assert JitterDraws(()).one(0.02) == 0.02 and JitterDraws(()).many(times) is times


def test_jitter_keeps_the_mean_step_and_lengthens_the_wait_for_the_step_in_progress():
    """Short prompts arriving while others decode: a newcomer waits out the step in progress, on average
    E[S^2] / 2E[S] of it. Steps that run 45 % short four times in five and 180 % long the fifth (mean 0, a
    right tail like a real server's) double that wait and lengthen the mean TTFT by a fifth (22 % here), while
    the TPOT and the throughput, means over many steps, stay within a few percent."""
    setup, _, rng = _catalog_setup()
    n = 400
    arrivals = np.cumsum(rng.exponential(1 / 3, n))
    prompts, outputs = np.full(n, 32), rng.integers(40, 120, n)
    plain = simulate(arrivals, prompts, outputs, setup.model, setup.shape)
    step = float(np.median(plain.tpot))
    spread = replace(setup.shape, step_jitter=jitter_offsets(np.resize([-0.45 * step] * 4 + [1.8 * step], 1000)))
    jittered = simulate(arrivals, prompts, outputs, setup.model, spread)
    assert np.mean(jittered.ttft) > 1.12 * np.mean(plain.ttft)
    assert np.mean(jittered.tpot) == pytest.approx(np.mean(plain.tpot), rel=0.04)
    assert jittered.output_tokens == plain.output_tokens
    assert jittered.duration == pytest.approx(plain.duration, rel=0.02)
    again = simulate(arrivals, prompts, outputs, setup.model, spread)
    assert np.array_equal(again.ttft, jittered.ttft)
    slow = simulate(arrivals, prompts, outputs, setup.model, spread, fast_forward=False)
    assert np.mean(slow.tpot) == pytest.approx(np.mean(jittered.tpot), rel=0.04)


def test_plan_draws_the_measured_servers_jitter_only_when_asked_and_only_on_that_server(tmp_path):
    """`plan --results SWEEP --step-jitter` on a sweep whose steps carry +-6 ms: the step model line names the
    term with the spread it read and the plan's steps draw it about their mean; for another GPU than the sweep's
    the plan says why it leaves the term out; without --results the flag is refused."""
    from llmbench.results import RunFiles, write_result

    rng = np.random.default_rng(13)
    for rate in (1.5, 3):
        _stepped_run(tmp_path, f"rate-{rate}", rate, 200, 0.012, 0.003, rng, jitter=0.006)
        write_result(RunFiles(tmp_path, f"rate-{rate}"), {"request_rate": rate, "completed": 200,
                                                          "achieved_rate": rate, "saturated": None,
                                                          "output_throughput": 70.0 * rate})

    def plan(*flags: str) -> tuple[dict, str]:
        r = CliRunner().invoke(main, ["plan", "--results", str(tmp_path), "--at-rate", "1.5", "--model",
                                      "llama-3.1-8b", "--gpu", "A100-80GB", "--no-search", "--num-prompts", "300",
                                      *flags])
        assert r.exit_code == 0, r.output
        return json.loads((tmp_path / "plan.json").read_text()), r.output

    (on, _), (off, _) = plan("--step-jitter"), plan()
    how = on["setup"]["step_model"]
    assert "step jitter" in how and "step jitter" not in off["setup"]["step_model"]
    low, high = (float(x) for x in re.search(r"ran ([-+0-9.]+) to ([-+0-9.]+) ms about their mean", how).groups())
    assert -6.0 < low < -3.5 and 3.5 < high < 6.0  # the 5th and 95th percentiles of +-6 ms: -5.4, +5.4
    jittered, plain = on["simulated"]["point"], off["simulated"]["point"]
    assert jittered["p90_itl_ms"] != plain["p90_itl_ms"]  # the plan's steps drew it
    assert jittered["mean_itl_ms"] == pytest.approx(plain["mean_itl_ms"], rel=0.03)  # ... about their own mean
    other, output = plan("--step-jitter", "--measured-gpu", "A100-80GB", "--gpu", "H100")
    assert "step jitter (" not in other["setup"]["step_model"] and "no step jitter" in output
    r = CliRunner().invoke(main, ["plan", "--at-rate", "2", "--step-jitter"])
    assert r.exit_code == 2 and "give --results" in r.output, r.output

