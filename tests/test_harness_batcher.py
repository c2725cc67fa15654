"""Tail term `harness batcher`: AMD's v4.1 MLPerf harness gathers LoadGen's queries and sends each batch whole to
the next replica; the wait counts in TTFT and E2E, not in TPOT."""

import numpy as np

from llmbench.plan import gpus, models
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.harness_batcher import HarnessBatcher
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.search import SimSetup, at_rate
from llmbench.plan.simulator import simulate
from llmbench.plan.workload import Workload


def test_a_batch_leaves_when_full_or_when_the_threshold_has_passed():
    """As batch_samples_loop runs: full at the second query; the third waits for the fourth (full again); the
    fifth comes after a quiet spell longer than the threshold and leaves at once; the sixth leaves when the wait
    begun at its arrival times out."""
    issued = np.array([0.0, 0.1, 0.2, 0.25, 1.0, 1.1])
    batch, sent = HarnessBatcher(2, 0.3).release(issued)
    assert batch.tolist() == [0, 0, 1, 1, 2, 3]
    np.testing.assert_allclose(sent, [0.1, 0.1, 0.25, 0.25, 1.0, 1.4])


def test_batches_go_to_the_replicas_in_turn():
    issued = np.arange(12) * 0.01
    mine, reach = HarnessBatcher(3, 10.0).to_replica(issued, 2)
    assert mine.tolist() == [0, 1, 2, 6, 7, 8]
    np.testing.assert_allclose(reach, [0.02, 0.02, 0.02, 0.08, 0.08, 0.08])


def test_time_held_before_the_engine_counts_in_ttft_and_e2e_only():
    roof = RooflineModel(models.model("llama-3.1-8b"), gpus.gpu("H100-SXM"))
    arrivals, prompts, outputs = np.array([0.0, 0.5, 1.0]), np.full(3, 200), np.full(3, 20)
    shape = EngineShape(64, 4096, 10**6, 16)
    plain = simulate(arrivals, prompts, outputs, roof, shape)
    held = simulate(arrivals, prompts, outputs, roof, shape, waited=np.array([0.1, 0.0, 0.3]))
    np.testing.assert_allclose(held.ttft - plain.ttft, [0.1, 0.0, 0.3])
    np.testing.assert_allclose(held.e2el - plain.e2el, [0.1, 0.0, 0.3])
    np.testing.assert_allclose(held.tpot_all, plain.tpot_all)


def test_a_replica_fed_in_bursts_answers_later_than_one_fed_poisson():
    """Eight replicas at 2 req/s each behind a 0.4 s batcher: each replica takes a burst every 3.2 s, so the mean
    TTFT carries the wait (0.2 s on average) and the burst's prefill on top of the Poisson one."""
    roof = RooflineModel(models.model("llama-3.1-8b"), gpus.gpu("H100-SXM"))
    rng = np.random.default_rng(0)
    work = Workload(rng.integers(200, 1500, 500), rng.integers(50, 300, 500), "test lengths")
    setup = SimSetup(roof, EngineShape(256, 8192, 10**6, 16), work, (0,), 300)
    poisson = at_rate(setup, 2.0)
    bursts = at_rate(SimSetup(roof, setup.shape, work, (0,), 300, batcher=HarnessBatcher(32, 0.4), replicas=8), 2.0)
    assert bursts["mean_ttft_ms"] > poisson["mean_ttft_ms"] + 150
    assert abs(bursts["mean_tpot_ms"] / poisson["mean_tpot_ms"] - 1) < 0.5
