import json
import math
from pathlib import Path

import numpy as np
import pytest

from llmbench import arrivals
from llmbench.saturation import verdict


def test_poisson_and_rescale():
    t = arrivals.schedule(2000, 10.0, 1.0, seed=3)
    assert t[-1] == pytest.approx(200.0) and np.all(np.diff(t) >= 0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)  # exponential: CV 1


def test_gamma_burstier_and_constant_and_inf():
    bursty = np.diff(arrivals.schedule(4000, 10.0, 0.3, seed=1))
    assert bursty.std() / bursty.mean() == pytest.approx(1 / math.sqrt(0.3), rel=0.1)
    const = arrivals.schedule(5, 4.0, math.inf)
    assert np.allclose(const, [0.25, 0.5, 0.75, 1.0, 1.25])
    assert not arrivals.schedule(7, math.inf).any()
    assert len(arrivals.schedule(1, 20.0, duration=3.0)) == 60
    with pytest.raises(ValueError):
        arrivals.schedule(5, -1.0)


def test_parse_rates():
    assert arrivals.parse_rates("5..50") == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    assert arrivals.parse_rates("1..2:0.5") == [1, 1.5, 2]
    assert arrivals.parse_rates("5,10,inf") == [5, 10, math.inf]
    assert arrivals.parse_rates("1..8") == [1, 2, 3, 4, 5, 6, 7, 8]
    for bad in ("5..1", "a..b", "0", "-2"):
        with pytest.raises(ValueError):
            arrivals.parse_rates(bad)


def test_saturation_needs_falling_behind_and_a_growing_backlog():
    base = {"completed": 100, "failed": 0, "request_rate": 10.0, "kept_up": 1.0, "latency_growth": 1.0,
            "in_flight_growth": 1.0}
    assert verdict(base) is None
    failing = base | {"completed": 90, "failed": 10}
    assert "10 of 100 requests failed" in verdict(failing)
    behind = base | {"kept_up": 0.6}
    assert verdict(behind) is None  # no growth to back it: not enough evidence
    growing = base | {"latency_growth": 2.5, "in_flight_growth": 2.0}
    assert verdict(growing) is None  # keeping up, even if latency moved
    assert verdict(behind | {"in_flight_growth": 1.8, "in_flight_rise_sigma": 2.0}) is None  # within the noise
    saturated = behind | {"in_flight_growth": 1.8, "in_flight_rise_sigma": 5.0}
    assert verdict(saturated | {"window_short": True}) is None  # a short window: the rise may be the ramp
    message = verdict(saturated)
    assert "kept up with 60% of arrivals (6 of 10 req/s)" in message and "requests in flight rose 1.8x" in message
    assert "latency per token rose 1.6x" in verdict(behind | {"latency_growth": 1.6})
    assert verdict(saturated | {"request_rate": "inf"}) is None
    assert verdict(saturated | {"kept_up": None}) is None  # too few requests to tell


def test_capacity_never_above_what_an_overloaded_server_completed():
    from llmbench.slo import SLO, capacity

    slo = SLO()
    points = [{"rate": 5.0, "attainment": 1.0}, {"rate": 10.0, "attainment": 1.0},
              {"rate": 15.0, "attainment": 1.0, "saturated": True, "kept_up": 0.7},
              {"rate": 20.0, "attainment": 0.997, "saturated": True, "kept_up": 0.55}]
    cap = capacity(points, slo)  # a saturated rate counts as missing the SLO, whatever its short-run latencies
    assert cap.passing == [5.0, 10.0] and cap.rate == pytest.approx(10.05) and "interpolated" in cap.note
    assert capacity(points[:2] + [{"rate": 15.0, "attainment": 0.5}], slo).rate == pytest.approx(10.1)
    late = points[:2] + [{"rate": 15.0, "attainment": 0.8},
                         {"rate": 20.0, "attainment": 1.0, "saturated": True, "kept_up": 0.51}]
    cap = capacity(late, slo)  # interpolation says 10.9; the overloaded server completed only 10.2
    assert cap.rate == pytest.approx(10.2) and "capped by the 10.2 req/s" in cap.note
    below = points[:2] + [{"rate": 15.0, "attainment": 1.0, "kept_up": 0.92},
                          {"rate": 25.0, "attainment": 1.0, "saturated": True, "kept_up": 0.55}]
    cap = capacity(below, slo)  # 15 met it; the 13.75 completed at 25 keeps it from rising, not below 15
    assert cap.rate == 15.0 and cap.note.startswith("measured at 15 req/s; not interpolated higher")
    assert capacity([{"rate": 5.0, "attainment": 0.5}], slo).rate is None


def test_a_sweep_stops_two_rates_past_the_knee():
    """Two rates that missed the SLO while completions lagged stop the sweep even when a window the ramp filled
    kept them from being called saturated; one such rate, or two that met the SLO, do not."""
    from llmbench.saturation import past_the_knee_twice

    past = {"saturated": None, "kept_up": 0.8, "slo_attainment": 0.7}
    fine = {"saturated": None, "kept_up": 1.0, "slo_attainment": 1.0}
    assert past_the_knee_twice([fine, past, past], 0.99)
    assert past_the_knee_twice([past, {"saturated": "2 of 3 requests failed", "kept_up": None,
                                        "slo_attainment": 0.3}], 0.99)
    assert not past_the_knee_twice([past, fine], 0.99) and not past_the_knee_twice([past], 0.99)
    assert not past_the_knee_twice([past | {"slo_attainment": 1.0}, past | {"slo_attainment": 1.0}], 0.99)


def test_a_rate_the_answer_could_rest_on_is_measured_again_when_its_window_was_short():
    from llmbench.sweep import SweepPlan, _too_short_to_trust

    plan = SweepPlan([20.0], out=None, auto_window=True)
    plan.workload.duration = 31
    row = {"window_short": True, "saturated": None, "kept_up": 0.83, "slo_attainment": 1.0, "window_s": 15}
    assert _too_short_to_trust(plan, row)
    assert not _too_short_to_trust(plan, row | {"kept_up": 0.95})  # kept up: nothing to doubt
    assert not _too_short_to_trust(plan, row | {"slo_attainment": 0.9})  # missed the SLO: not the answer anyway
    assert not _too_short_to_trust(plan, row | {"window_s": 31})  # no longer window to measure it over
    plan.auto_window = False  # the user's --duration is honoured
    assert not _too_short_to_trust(plan, row)


def test_long_requests_still_in_flight_are_not_a_backlog():
    """vLLM-CPU at 2 req/s, below the 2.9 req/s the same server sustained (its sweep kept up 100 % at 3 req/s):
    ShareGPT's long answers (P99 E2E 31 s against a 60 s window) were still piling in after the ramp, so the
    number in flight rose 2.8x and completions trailed arrivals (81 %). Against a Poisson count's noise that rise
    read 3.8 sigma and the sweep called the rate saturated; against the rise the same latencies give when
    shuffled over the arrivals it is within the noise. Given to the arrivals in increasing order (each request
    slower than the last: a queue), the same latencies are still a backlog."""
    from llmbench.metrics import backlog
    from llmbench.records import RequestRecord

    measured = json.loads((Path(__file__).parent / "data" / "vllm_cpu_2rps.json").read_text())["records"]

    def records(latencies) -> list[RequestRecord]:
        out = []
        for i, ((start, _, tokens), latency) in enumerate(zip(measured, latencies, strict=True)):
            r = RequestRecord(index=i, scheduled=start, prompt_len=10, expected_output_len=tokens)
            r.start, r.end, r.success, r.output_tokens = start, start + latency, True, tokens
            out.append(r)
        return out

    latencies = [end - start for start, end, _ in measured]
    row = {"request_rate": 2.0, "completed": len(measured), "failed": 0}
    seen = backlog(records(latencies))
    assert seen["kept_up"] < 0.9 and seen["in_flight_growth"] > 2 and seen["in_flight_rise_sigma"] < 3
    assert verdict(row | seen) is None
    queued = backlog(records(sorted(latencies)))
    assert queued["in_flight_rise_sigma"] > 3 and verdict(row | queued)


def test_backlog_from_records():
    """Kept up and growth from what the client saw: a server that keeps pace, and one that falls behind."""
    from llmbench.metrics import backlog
    from llmbench.records import RequestRecord

    def rec(i: int, start: float, latency: float, tokens: int = 20) -> RequestRecord:
        r = RequestRecord(index=i, scheduled=start, prompt_len=10, expected_output_len=tokens)
        r.start, r.end, r.success, r.output_tokens = start, start + latency, True, tokens
        r.chunk_times = [start + latency * (k + 1) / tokens for k in range(tokens)]
        return r

    stable = backlog([rec(i, i * 0.1, 2.0) for i in range(150)])  # 10 req/s for 15 s, 2 s each
    assert stable["kept_up"] == pytest.approx(1.0, abs=0.05) and stable["latency_growth"] == pytest.approx(1.0)
    assert stable["in_flight_growth"] == pytest.approx(1.0, abs=0.05) and "window_note" not in stable
    queued = backlog([rec(i, i * 0.1, 0.5 + i * 0.05) for i in range(150)])  # each waits longer than the last
    assert queued["kept_up"] < 0.7 and queued["latency_growth"] > 1.5 and queued["in_flight_growth"] > 1.5
    assert queued["in_flight_rise_sigma"] > 3
    slow = backlog([rec(i, i * 0.1, 14.0) for i in range(150)])  # 14 s each against 15 s: the ramp fills it
    assert "too short to tell" in slow["window_note"] and slow["window_short"]
    assert slow["kept_up"] < 0.9 and slow["latency_growth"] == pytest.approx(1.0)  # rising, but not slowing down
    assert backlog([rec(i, i * 0.1, 1.0) for i in range(10)])["kept_up"] is None  # too few to tell


def test_a_capacity_resting_on_a_client_stall_says_so():
    """The Zen 3 sweep of vLLM-CPU: rate 1 missed the SLO (97.8 %) only through a 2.5 s stall of the client's
    own; the answer keeps the measured figures and says which rate to measure again."""
    from llmbench.slo import SLO, capacity

    points = [{"rate": 0.5, "attainment": 1.0}, {"rate": 1.0, "attainment": 87 / 89, "client_stalled": True},
              {"rate": 1.5, "attainment": 0.977}]
    cap = capacity(points, SLO())
    assert cap.rate == pytest.approx(0.722, abs=0.001)
    assert "1 req/s missed it with a stall of the client's own" in cap.note
    points[1]["client_stalled"] = False
    assert "stall" not in capacity(points, SLO()).note


def test_the_verdict_column_says_a_client_stall_that_moved_the_slo():
    """`client stalled` where the stall moved the SLO attainment; a stall that moved only a percentile (said in the
    rate's note) leaves the verdict to the server."""
    from rich.console import Console

    from llmbench.live import summary_table
    from llmbench.slo import SLO

    row = {"request_rate": 1.0, "kept_up": 1.0, "output_throughput": 190.0, "median_ttft_ms": 95.0,
           "p99_ttft_ms": 663.0, "median_tpot_ms": 19.9, "p99_tpot_ms": 132.4, "slo_attainment": 0.978, "failed": 0}
    console = Console(width=120, record=True)
    console.print(summary_table([row | {"client_stall_moved_slo": True},
                                 {**row, "request_rate": 2.0, "client_stall_material": True}], "t", SLO(), None))
    lines = [line for line in console.export_text().splitlines() if "%" in line]
    assert "client stalled" in lines[0] and "client stalled" not in lines[1]
