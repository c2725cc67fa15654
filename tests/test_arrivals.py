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


def test_saturation_rules():
    base = {"completed": 100, "failed": 0, "output_throughput": 1000.0, "p99_ttft_ms": 100.0}
    assert saturation([], base) is None
    grew = base | {"output_throughput": 1500.0, "p99_ttft_ms": 300.0}
    assert saturation([base], grew) is None
    flat = base | {"output_throughput": 1020.0, "p99_ttft_ms": 250.0}
    assert "saturated" in saturation([base], flat)
    failing = base | {"completed": 90, "failed": 10}
    assert "failed" in saturation([], failing)
    overloaded = [{**base, "request_rate": 5.0, "request_throughput": 1.7},
                  {**base, "request_rate": 10.0, "request_throughput": 1.9, "output_throughput": 1500.0}]
    assert saturation([], overloaded[0]) is None  # a sweep always measures two rates
    assert "completed of 10 offered" in saturation(overloaded[:1], overloaded[1])


def test_saturation_uses_steady_completions_not_the_drain():
    """A long-output run under capacity completes fewer per second of total duration (the drain after the
    last arrival counts), but its steady completion rate matches the offered rate."""
    base = {"completed": 100, "failed": 0, "output_throughput": 1000.0, "p99_ttft_ms": 100.0}
    draining = [{**base, "request_rate": 1.5, "request_throughput": 1.16, "steady_completion_rate": 1.47},
                {**base, "request_rate": 2.0, "request_throughput": 1.53, "steady_completion_rate": 1.95,
                 "output_throughput": 1300.0}]
    assert saturation(draining[:1], draining[1]) is None
    capped = [d | {"steady_completion_rate": 1.1} for d in draining]
    assert "completed of 2 offered" in saturation(capped[:1], capped[1])


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
