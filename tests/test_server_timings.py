"""The server's own timings over a run, from its /metrics latency histograms (llmbench/server_timings.py)."""

import pytest

from llmbench.scrape import parse
from llmbench.server_timings import summary

VLLM_METRICS = """# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.05",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 8.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
"""


def test_a_scrape_keeps_each_latency_histograms_sum_and_count_not_its_buckets():
    values = parse(VLLM_METRICS)
    assert values["running"] == 2.0
    assert values["server_ttft_sum"] == 0.5 and values["server_ttft_count"] == 4.0
    assert values["server_e2el_sum"] == 8.0 and values["server_e2el_count"] == 4.0


def _points(ttft_counts, ttft_sums, e2el=True):
    return [{"t": i, "server_ttft_count": c, "server_ttft_sum": s,
             **({"server_e2el_count": c, "server_e2el_sum": 20 * s} if e2el else {})}
            for i, (c, s) in enumerate(zip(ttft_counts, ttft_sums, strict=True))]


def test_the_runs_own_figures_are_the_differences_over_it_beside_the_clients_means():
    """Four requests timed before the run (a warm-up) are left out: the run's 10 took 0.3 s of TTFT in all."""
    out, note = summary(_points([4, 9, 14], [0.2, 0.35, 0.5]), 10, {"ttft": 41.0, "e2el": 620.0})
    assert note is None
    assert out["server_timed_ttft"] == 10 and out["server_mean_ttft_ms"] == pytest.approx(30.0)
    assert out["client_over_server_ttft_ms"] == pytest.approx(11.0)
    assert out["server_mean_e2el_ms"] == pytest.approx(600.0)
    assert out["client_over_server_e2el_ms"] == pytest.approx(20.0)


def test_a_server_that_timed_other_requests_too_gives_no_means_and_says_so():
    out, note = summary(_points([0, 13], [0.0, 0.4]), 10, {"ttft": 41.0})
    assert out == {"server_timed_e2el": 13, "server_timed_ttft": 13}
    assert note and "timed 13 by its E2EL histogram and 13 by its TTFT histogram" in note and "measured 10" in note


def test_a_server_without_latency_histograms_gives_nothing():
    assert summary([{"t": 0, "running": 1.0}, {"t": 1, "running": 2.0}], 10, {"ttft": 41.0}) == ({}, None)
    assert summary(_points([3], [0.1]), 3, {"ttft": 41.0}) == ({}, None)  # one scrape: no difference to take
    assert summary(_points([0, 2], [0.0, 0.1]), 0, {}) == ({}, None)  # a run that completed nothing: nothing to say


def test_the_report_sets_the_servers_clock_beside_the_clients_only_for_rates_it_timed():
    from llmbench.report.html import server_clock_rows

    timed = {"label": "rate-1", "server_timed_ttft": 10, "server_mean_ttft_ms": 150.0, "mean_ttft_ms": 157.5,
             "client_over_server_ttft_ms": 7.5, "server_mean_e2el_ms": 5000.0, "mean_e2el_ms": 5006.0,
             "client_over_server_e2el_ms": 6.0}
    shared = {"label": "rate-2", "server_timed_ttft": 13, "mean_ttft_ms": 160.0}  # the server timed another client too
    assert server_clock_rows([timed, shared]) == [["rate-1", "10", "150.0", "157.5", "7.5", "5,000.0", "5,006.0",
                                                   "6.0"]]
    assert server_clock_rows([shared]) == []
