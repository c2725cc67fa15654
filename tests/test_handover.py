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


def _loop(folder, n, streams, base, per_seq, rng, read=0.0015):
    """A closed loop of `streams` on a server that steps all its sequences at once (`base` + `per_seq` a sequence)
    and takes a request in at the first step that starts after it was sent (a step that starts as it is sent
    does not take it). The client reads each step's tokens one stream after another over `read` seconds and sends
    a newcomer the moment it reads its predecessor's last."""
    from llmbench.records import RecordWriter, RequestRecord
    from llmbench.results import RunFiles, write_result

    outputs = rng.integers(20, 80, n)
    sent = np.full(n, np.nan)
    sent[:streams] = 0.0
    times: list[list[float]] = [[] for _ in range(n)]
    now, nxt, running = 0.0, streams, []
    while len(running) or nxt < n or any(not times[j] for j in range(min(nxt, n))):
        running += [j for j in range(nxt) if not times[j] and sent[j] < now and j not in running]
        now += base + per_seq * len(running)
        reads = now + rng.uniform(0, read, len(running))
        for j, t in zip(running, reads, strict=True):
            times[j].append(float(t))
            if len(times[j]) == outputs[j] and nxt < n:
                sent[nxt] = t
                nxt += 1
        running = [j for j in running if len(times[j]) < outputs[j]]
    files = RunFiles(folder, "rate-inf-c8")
    writer = RecordWriter(files.records)
    for j in range(n):
        writer.write(RequestRecord(j, sent[j], dispatched=sent[j], start=sent[j], end=times[j][-1],
                                   chunk_times=times[j], chunk_tokens=[1] * len(times[j]), prompt_len=200,
                                   output_tokens=int(outputs[j]), success=True))
    writer.close()
    write_result(files, {"request_rate": float("inf"), "completed": n, "saturated": None})
    return files.records


def test_a_loop_newcomer_sent_while_a_step_is_read_counts_only_the_steps_after_it(tmp_path):
    """A newcomer goes out on its predecessor's last token, read among the step's others: those read after it are
    that step's, which had ended before the send. The server here takes it at its next step, so it waits 2."""
    path = _loop(tmp_path, 300, 8, 0.010, 0.0015, np.random.default_rng(4))
    counts = handover_steps(read_records(path), skip=8)
    assert len(counts) > 250 and set(counts) == {2}
    untied = handover_steps(read_records(_loop(tmp_path / "at-once", 300, 8, 0.010, 0.0015,
                                                    np.random.default_rng(4), read=0.0)), skip=8)
    assert set(untied) == {2}
