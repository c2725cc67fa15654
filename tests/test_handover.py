"""The steps a request waited to join a server's batch, counted from its clients' records without a model
(llmbench/plan/handover.py)."""

import numpy as np

from llmbench.plan.handover import handover_steps
from llmbench.records import read_records
from tests.test_decode_gaps import _stepped_run


def test_the_steps_a_request_waited_to_join_are_counted_from_the_records(tmp_path):
    """Tokens another stream received between a request's send and its first token: 2 where the server takes a
    request in at its next step (the step under way, then the one that prefills it), more where the hand-over
    takes longer than a step (30 ms against steps of 10 ms + 1.5 ms a sequence); a loop's opening burst is left
    out by `skip`."""
    _stepped_run(tmp_path / "now", "rate-3", 3, 200, 0.010, 0.0015, np.random.default_rng(21))
    _stepped_run(tmp_path / "late", "rate-3", 3, 200, 0.010, 0.0015, np.random.default_rng(21), handover=0.03)
    now = handover_steps(read_records(tmp_path / "now" / "rate-3.records.jsonl"))
    late = handover_steps(read_records(tmp_path / "late" / "rate-3.records.jsonl"))
    assert len(now) > 100 and set(now) == {2}
    assert len(late) > 100 and late.mean() > 3 and (late >= 3).mean() > 0.9  # 2 where a step outlasted 30 ms
    assert len(handover_steps(read_records(tmp_path / "now" / "rate-3.records.jsonl"), skip=100)) < len(now)
