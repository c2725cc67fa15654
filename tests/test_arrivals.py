import math

import numpy as np
import pytest

from llmbench import arrivals
from llmbench.sweep import saturation


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
    base = {"completed": 100, "failed": 0, "request_rate": 10.0, "request_throughput": 9.9,
            "steady_completion_rate": 9.9, "latency_growth": 1.0, "in_flight_growth": 1.0}
    assert saturation([], base) is None
    failing = base | {"completed": 90, "failed": 10}
    assert "10 of 100 requests failed" in saturation([], failing)
    behind = base | {"steady_completion_rate": 6.0}
    assert saturation([base], behind) is None  # a short run's figures alone are no evidence
    growing = base | {"latency_growth": 2.5, "in_flight_growth": 2.0}
    assert saturation([base], growing) is None  # keeping up, even if latency moved
    saturated = behind | {"latency_growth": 2.5}
    message = saturation([base], saturated)
    assert "6.00 req/s done of 10 offered" in message and "E2E latency rose 2.5x" in message
    assert "requests in flight rose 1.8x" in saturation([], behind | {"in_flight_growth": 1.8})
    assert saturation([], saturated | {"request_rate": "inf"}) is None


def test_saturation_uses_steady_completions_not_the_drain():
    """A long-output run under capacity completes fewer per second of total duration (the drain after the
    last arrival counts), but its steady completion rate matches the offered rate."""
    draining = {"completed": 100, "failed": 0, "request_rate": 2.0, "request_throughput": 1.53,
                "steady_completion_rate": 1.95, "latency_growth": 1.6, "in_flight_growth": 1.6}
    assert saturation([], draining) is None
    assert "1.10 req/s done of 2 offered" in saturation([], draining | {"steady_completion_rate": 1.1})


def test_growth_from_records():
    from llmbench.metrics import growth
    from llmbench.records import RequestRecord

    def rec(i: int, start: float, latency: float) -> RequestRecord:
        r = RequestRecord(index=i, scheduled=start, prompt_len=10, expected_output_len=10)
        r.start, r.end, r.success = start, start + latency, True
        return r

    stable = growth([rec(i, i * 0.1, 3.0) for i in range(150)])  # 10 req/s for 15 s, 3 s each
    assert stable["latency_growth"] == pytest.approx(1.0) and stable["in_flight_growth"] < 1.2
    queued = growth([rec(i, i * 0.1, 0.5 + i * 0.05) for i in range(150)])  # each waits longer than the last
    assert queued["latency_growth"] > 1.5 and queued["in_flight_growth"] > 1.5
    assert growth([rec(i, i * 0.1, 1.0) for i in range(10)])["latency_growth"] is None  # too few to tell


def test_steady_completion_rate_from_records():
    from llmbench.metrics import steady_completion_rate
    from llmbench.records import RequestRecord

    def rec(i: int, start: float, latency: float) -> RequestRecord:
        r = RequestRecord(index=i, scheduled=start, prompt_len=10, expected_output_len=10)
        r.start, r.end, r.success = start, start + latency, True
        return r

    stable = [rec(i, i * 0.5, 3.0) for i in range(200)]  # 2 req/s, every request takes 3 s
    assert steady_completion_rate(stable, stable, [3.0] * 200) == pytest.approx(2.0, rel=0.03)
    queued = [rec(i, i * 0.5, 1.0 + i * 0.25) for i in range(200)]  # served at 4/3 s: the queue grows
    lat = [r.end - r.start for r in queued]
    assert steady_completion_rate(queued, queued, lat) < 1.6
