"""Tail term `speed drift`: the fitted engine's slow and fast seconds, measured window by window from its own
steps and replayed in the simulator as a block bootstrap."""

import numpy as np
import pytest

from llmbench.plan.drift import SWING, SpeedDrift, fit_drift, run_pauses, run_swings
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.simulator import simulate


class _Flat:
    """10 ms a decode step, 1 ms a prefill token."""

    def step_time(self, prefill_tokens, decode_seqs, context_tokens, cached_context=0.0, prefill_seqs=0.0,
                  prefill_pairs=None):
        return prefill_tokens * 1e-3 + (decode_seqs > 0) * 0.01


def _steps(durations: list[float], start: float = 1000.0) -> list[dict]:
    """Back-to-back decode steps of one sequence; `time` is each step's end, as the engine records it."""
    out, now = [], start
    for d in durations:
        now += d
        out.append({"time": now, "step_seconds": d, "num_prefill_tokens": 0, "num_decode_tokens": 1, "num_seqs": 1,
                    "num_context_tokens": 100, "num_running": 1, "num_waiting": 0})
    return out


def test_each_window_holds_the_measured_over_the_fitted_time():
    # 10 s at the model's speed, 5 s twice as slow, 10 s at speed again; then an idle gap and 3 s more
    run = _steps([0.01] * 1000 + [0.02] * 250 + [0.01] * 1000)
    run += _steps([0.01] * 300, start=run[-1]["time"] + 7.5)
    drift = fit_drift([run], _Flat())
    ratios = np.array(drift.runs[0])
    assert len(ratios) == 25 + 3 + 1  # the idle seconds hold no window; a window straddling the gap keeps its steps
    assert ratios[:9] == pytest.approx(1.0) and ratios[11:14] == pytest.approx(2.0)  # a boundary window may mix
    assert ratios[16:] == pytest.approx(1.0) and all(1.0 <= r <= 2.0 + 1e-9 for r in ratios)
    assert fit_drift([[]], _Flat()) is None


def test_a_swing_within_a_run_is_its_slowest_busy_window_over_its_fastest():
    even = _steps([0.01] * 600)
    spell = _steps([0.01] * 300 + [0.03] * 100 + [0.01] * 300)
    slow = _steps([0.01] * 300) + _steps([0.02] * 45, start=1010.0)  # a window busy 0.9 of it, at half speed
    sparse = _steps([0.01] * 300) + _steps([0.04] * 2, start=1010.0)  # busy 8 % of its window: not judged
    paused = _steps([0.01] * 300) + _steps([0.9], start=1010.0)  # one step 0.89 s past its fit: run_pauses' to say
    swings = run_swings([even, spell, slow, sparse, paused, []], _Flat())
    assert swings[0] == pytest.approx(1.0) and swings[1] == pytest.approx(3.0) and swings[1] > SWING
    assert swings[2] == pytest.approx(2.0) and swings[3:] == [pytest.approx(1.0)] * 2 + [1.0]


def test_a_pause_is_a_step_far_past_its_fit_or_a_wait_between_steps_holding_requests():
    run = _steps([0.01] * 100 + [0.5] + [0.01] * 100 + [0.15] + [0.01] * 100)  # two steps the fit gives 10 ms
    assert [round(lost, 3) for _, lost in run_pauses(run, _Flat())] == [0.49, 0.14]
    assert run_pauses(run, _Flat())[0][0] == pytest.approx(1.0)
    gap = _steps([0.01] * 100)
    gap += _steps([0.01] * 100, start=gap[-1]["time"] + 0.4)
    assert [(round(at, 3), round(lost, 3)) for at, lost in run_pauses(gap, _Flat())] == [(1.0, 0.4)]
    gap[99]["num_running"] = 0  # idle then: no request was kept waiting
    assert run_pauses(gap, _Flat()) == []
    busy_prefill = [{"time": 1001.0, "step_seconds": 0.6, "num_prefill_tokens": 400, "num_decode_tokens": 0,
                     "num_seqs": 1, "num_running": 1, "num_waiting": 0}]  # 0.2 s past a 0.4 s fit: not a pause
    assert run_pauses(busy_prefill, _Flat()) == []


def test_a_trace_replays_blocks_of_consecutive_windows_from_one_run():
    drift = SpeedDrift(((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), (10.0, 20.0, 30.0)), window=0.5, block=3)
    trace = drift.trace(7)
    factors = [trace.factor(0.5 * i + 0.01) for i in range(60)]
    for i in range(0, 60, 3):
        block = factors[i:i + 3]
        assert block in ([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 5.0], [4.0, 5.0, 6.0], [10.0, 20.0, 30.0])
    assert trace.window_end(1.2) == 1.5
    assert [drift.trace(7).factor(0.5 * i) for i in range(60)] == factors  # a seed is one trace, however asked


@pytest.mark.parametrize("concurrency", [None, 16])
def test_fast_forward_gives_the_step_by_step_answer_under_drift(concurrency):
    rng = np.random.default_rng(2)
    n = 100
    prompts, outputs = rng.integers(20, 600, n), rng.integers(1, 300, n)
    arrivals = None if concurrency else np.cumsum(rng.exponential(1 / 4, n))
    drift = SpeedDrift((tuple(rng.uniform(0.7, 1.8, 40)),), window=0.25, block=4)
    shape = EngineShape(64, 1024, 10**6, 16)
    fast = simulate(arrivals, prompts, outputs, _Flat(), shape, concurrency, drift=drift.trace(3))
    slow = simulate(arrivals, prompts, outputs, _Flat(), shape, concurrency, fast_forward=False, drift=drift.trace(3))
    for name in ("ttft", "tpot_all", "e2el"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9)
    plain = simulate(arrivals, prompts, outputs, _Flat(), shape, concurrency)
    assert not np.allclose(fast.e2el, plain.e2el)


def test_a_slow_spell_sets_the_p99_tpot_and_an_even_speed_changes_nothing():
    rng = np.random.default_rng(5)
    n = 300
    prompts, outputs = rng.integers(20, 300, n), rng.integers(50, 300, n)
    arrivals = np.cumsum(rng.exponential(1 / 2, n))
    shape = EngineShape(64, 1024, 10**6, 16)
    plain = simulate(arrivals, prompts, outputs, _Flat(), shape)
    even = simulate(arrivals, prompts, outputs, _Flat(), shape, drift=SpeedDrift(((1.0,) * 30,)).trace(0))
    np.testing.assert_allclose(even.tpot_all, plain.tpot_all, rtol=1e-9)
    spells = SpeedDrift(((1.0,) * 18 + (2.5,) * 6,))  # a quarter of the time 2.5x slower, in 6 s spells
    slow = [simulate(arrivals, prompts, outputs, _Flat(), shape, drift=spells.trace(seed)).summary()
            for seed in range(5)]
    p99 = plain.summary()["p99_tpot_ms"]
    assert min(s["p99_tpot_ms"] for s in slow) > 1.3 * p99 and np.median([s["p99_tpot_ms"] for s in slow]) > 1.6 * p99
    assert np.median([s["median_tpot_ms"] for s in slow]) < np.median([s["p99_tpot_ms"] for s in slow]) / 1.5


def test_a_plan_fitted_on_runs_of_different_speeds_says_so(tmp_path):
    """`plan --results` on the bundled engine's steps: where the same work cost much more in one run than in
    another, no model of load explains it, and the plan's P99s are no finer than that."""
    import json
    import shutil
    from pathlib import Path

    from llmbench.plan.drift import run_speeds
    from llmbench.plan.fit import fit_steps
    from llmbench.plan.replica import fitted_replica
    from llmbench.plan.request import PlanRequest
    from llmbench.plan.workload import from_results
    from llmbench.results import load_engine_steps
    from llmbench.slo import SLO

    example = Path(__file__).resolve().parents[1] / "reports" / "example"
    quiet = fitted_replica(PlanRequest(slo=SLO()), from_results(example), example)
    assert quiet is not None and not any("from one run to the next" in n for n in quiet.notes)
    folder = tmp_path / "example"
    shutil.copytree(example, folder)
    path = folder / "rate-2.engine_steps.jsonl"
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(s | {"step_seconds": 1.6 * s["step_seconds"]}) + "\n" for s in steps))
    runs = [load_engine_steps(folder, f"rate-{r}") for r in ("0.5", "1", "1.5", "2", "2.5", "3")]
    speeds = run_speeds(runs, fit_steps([s for run in runs for s in run]))
    assert max(speeds) / min(speeds) > 1.4
    noisy = fitted_replica(PlanRequest(slo=SLO()), from_results(folder), folder)
    said = [n for n in noisy.notes if "from one run to the next" in n]
    assert said and f"x{max(speeds):.2f}" in said[0]


def test_a_plan_fitted_on_runs_with_a_pause_or_a_slow_spell_says_where(tmp_path):
    """`plan --results` on the bundled engine's steps: a pause (the host gave the engine no CPU) and a slow spell
    within one run set that run's P99s, and the note names the run and the moment."""
    import json
    import re
    import shutil
    from pathlib import Path

    from llmbench.plan.replica import fitted_replica
    from llmbench.plan.request import PlanRequest
    from llmbench.plan.workload import from_results
    from llmbench.slo import SLO

    example = Path(__file__).resolve().parents[1] / "reports" / "example"
    quiet = fitted_replica(PlanRequest(slo=SLO()), from_results(example), example)
    assert not any("paused" in n or "1 s windows" in n for n in quiet.notes)
    folder = tmp_path / "example"
    shutil.copytree(example, folder)
    path = folder / "rate-3.engine_steps.jsonl"
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    t0 = steps[0]["time"] - steps[0]["step_seconds"]
    k = next(i for i, s in enumerate(steps) if s["time"] - t0 > 10 and s["num_prefill_tokens"] == 0)
    at = steps[k]["time"] - steps[k]["step_seconds"] - t0
    steps = steps[:k] + [s | {"time": s["time"] + 0.8} for s in steps[k:]]  # step k took 0.8 s longer, and so
    steps[k]["step_seconds"] += 0.8  # every later step ended that much later
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    paused = fitted_replica(PlanRequest(slo=SLO()), from_results(folder), folder)
    said = [n for n in paused.notes if "paused" in n]
    assert said and f"at {at:.1f} s into rate-3" in said[0]
    assert 780 <= int(re.search(r"the longest (\d+) ms", said[0]).group(1)) <= 810  # 0.8 s, less the fit's miss
    assert not any("1 s windows" in n for n in paused.notes)
    steps = [s | {"step_seconds": 3 * s["step_seconds"]} if 15 < s["time"] - t0 < 19 else s for s in steps]
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    spell = fitted_replica(PlanRequest(slo=SLO()), from_results(folder), folder)
    said = [n for n in spell.notes if "1 s windows" in n]
    assert said and said[0].startswith("within rate-3 ")
