"""Tail term `front-end ingest` (llmbench/plan/ingest.py) and the benchmark that measures it."""

from dataclasses import replace

import numpy as np
import pytest

from llmbench.plan import engines, gpus, models
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.ingest import INGEST_COST, INGEST_PARSE_SHARE, ingest_wait
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.simulator import simulate


def test_a_burst_reaches_the_engine_after_every_request_is_parsed_then_in_send_order():
    """N requests sent at once: the parsing of all of them (N x a x c) comes first, then each is rendered in turn,
    so request i reaches the engine at N a c + (i + 1)(1 - a) c and waits that less its own c."""
    n, c, a = 1000, 2e-3, 0.6
    wait = ingest_wait(np.zeros(n), c, a)
    reached = wait + c
    assert reached[0] == pytest.approx(n * a * c + (1 - a) * c)
    assert reached == pytest.approx(n * a * c + (np.arange(n) + 1) * (1 - a) * c)
    assert reached[-1] == pytest.approx(n * c)


def test_requests_that_do_not_overlap_wait_nothing_and_order_is_kept():
    c = 2e-3
    assert ingest_wait(np.arange(10) * 0.01, c, 0.6) == pytest.approx(np.zeros(10))
    assert ingest_wait(np.zeros(5), 0.0, 0.6) == pytest.approx(np.zeros(5))
    sent = np.array([0.5, 0.0, 0.0, 0.0])  # the late one, listed first, is not behind the burst
    wait = ingest_wait(sent, c, 0.5)
    assert wait[0] == pytest.approx(0.0, abs=1e-12) and wait[1:] == pytest.approx(ingest_wait(np.zeros(3), c, 0.5))


def test_parsing_of_new_arrivals_holds_back_the_rendering_of_earlier_ones():
    """A request that arrives while another is being rendered is parsed first: the earlier one waits that out."""
    c, a = 1.0, 0.5
    wait = ingest_wait(np.array([0.0, 0.6]), c, a)
    # 0-0.5 parse #0; 0.5-0.6 render #0; 0.6-1.1 parse #1; 1.1-1.5 rest of #0; 1.5-2.0 render #1
    assert wait == pytest.approx([1.5 - 1.0, 2.0 - 0.6 - 1.0])


def test_the_term_is_measured_and_reaches_the_simulator_from_the_send():
    """The figures are the benchmark's (not zero); a burst's TTFTs count the front end's wait from the send, and its
    duration starts at the first send; a closed loop and a non-HTTP run (MLPerf, trtllm-bench) do not take it."""
    assert 0.5e-3 < INGEST_COST < 10e-3 and 0.2 < INGEST_PARSE_SHARE < 0.9
    vllm = engines.profile("vllm", gpus.gpu("H100-SXM"))
    shape = vllm.shape(10**6)
    assert (shape.ingest_cost, shape.ingest_parse_share) == (INGEST_COST, INGEST_PARSE_SHARE)
    none = replace(shape, ingest_cost=0.0)
    roof = RooflineModel(models.model("llama-3.1-8b"), gpus.gpu("H100-SXM"), engine=vllm)
    n = 1000
    prompts, outputs = np.full(n, 128), np.full(n, 4)
    with_term, without = (simulate(np.zeros(n), prompts, outputs, roof, s) for s in (shape, none))
    front = n * INGEST_PARSE_SHARE * INGEST_COST
    assert with_term.ttft.min() > front > without.ttft.min()  # no request reaches the engine before all are parsed
    assert with_term.duration > without.duration + 0.9 * front
    loops = (simulate(None, prompts, outputs, roof, s, concurrency=64) for s in (shape, none))
    assert np.array_equal(next(loops).ttft, next(loops).ttft)
    assert engines.profile("vllm", gpus.gpu("H100-SXM"), None).with_knobs(ingest_cost=0.0).shape(10).ingest_cost == 0
    assert EngineShape().ingest_cost == 0.0


def test_the_benchmark_reads_when_each_request_was_added(benchmark_script):
    bench = benchmark_script("front_end_ingest")
    log = ("100.000000 Received request chatcmpl-b01000r0-ab12cd34: params\n"
           "101.500000 Added request chatcmpl-b01000r0-ab12cd34.\n"
           "101.700000 Added request chatcmpl-b01000r1-0f0f0f0f.\n"
           "101.800000 Added request chatcmpl-b11000r0-0f0f0f0f.\n")
    added = bench.added_times(log, "b01000")
    assert added == {0: 101.5, 1: 101.7}
    run = bench.summarise([100.0, 100.1], added, cpu=1.2)
    assert run["span"] == pytest.approx(1.7) and run["a"] == pytest.approx(1.5 / 1.7)
    assert run["c"] == pytest.approx(0.6) and run["busy"] == pytest.approx(1.7 / 1.2)
    with pytest.raises(Exception, match="1 of 3 requests never logged"):
        bench.summarise([100.0, 100.1, 100.2], added, cpu=1.0)
