"""A server's cost per sequence a step, read from the token gaps of its decode-only steps
(llmbench/plan/decode_gaps.py), and the calibration that takes it from there."""

import numpy as np
import pytest

from llmbench.plan.decode_gaps import decode_curve


def _stepped_run(folder, label, rate, n, base, per_seq, rng, prefill=0.02, chunks=True, jitter=0.0, handover=0.0):
    """A server that steps all its sequences at once: a step lasts `base` + `per_seq` per sequence in it, plus
    `prefill` for each request that joins in it (its first token comes at the step's end), plus a uniform draw
    within +-`jitter` seconds; a request can join `handover` seconds after it was sent; written as a sweep's run."""
    from llmbench.records import RecordWriter, RequestRecord
    from llmbench.results import RunFiles, write_result

    arrivals, outputs = np.cumsum(rng.exponential(1 / rate, n)), rng.integers(20, 120, n)
    times: list[list[float]] = [[] for _ in range(n)]
    now, waiting, running = 0.0, 0, []
    while waiting < n or running:
        if not running:
            now = max(now, arrivals[waiting] + handover)
        joined = []
        while waiting < n and arrivals[waiting] + handover <= now:
            joined.append(waiting)
            waiting += 1
        batch = running + joined
        now += base + per_seq * len(batch) + prefill * len(joined) + (rng.uniform(-jitter, jitter) if jitter else 0.0)
        for j in batch:
            times[j].append(now)
        running = [j for j in batch if len(times[j]) < outputs[j]]
    files = RunFiles(folder, label)
    writer = RecordWriter(files.records)
    for j in range(n):
        kept = times[j] if chunks else [times[j][0], times[j][-1]]
        writer.write(RequestRecord(j, arrivals[j], dispatched=arrivals[j], start=arrivals[j], end=times[j][-1],
                                   chunk_times=kept, chunk_tokens=[1] * len(kept) if chunks else [None, None],
                                   prompt_len=200, output_tokens=int(outputs[j]), success=True))
    writer.close()
    write_result(files, {"request_rate": rate, "completed": n, "saturated": None})


def test_the_cost_per_sequence_is_the_slope_of_decode_only_steps_within_each_run(tmp_path):
    """Truth: 1.5 ms per sequence a step. The second run is at a higher rate (more sequences at once) on a server
    10 ms a step slower for that minute; steps that carry a prompt cost 20 ms more (left out: decode-only steps).
    Read within each run, the slope is the truth; read across the runs it takes the slower minute for a cost per
    sequence."""
    rng = np.random.default_rng(3)
    _stepped_run(tmp_path, "rate-2", 2, 200, 0.010, 0.0015, rng)
    _stepped_run(tmp_path, "rate-5", 5, 200, 0.020, 0.0015, rng)
    curve = decode_curve(tmp_path, ["rate-2", "rate-5"])
    assert curve.slope() == pytest.approx(0.0015, rel=0.02) and curve.gaps > 5000
    levels = curve.levels
    across = np.polyfit(levels["seqs"], levels["gap"], 1, w=np.sqrt(levels["count"]))[0]
    assert across > 1.1 * 0.0015
    assert curve.slope(lambda seqs, context: 0.002 + 0.0004 * seqs) == pytest.approx(0.0004)
    per_seq_context = levels["context"] / levels["seqs"]
    assert per_seq_context.between(200, 200 + 120).all()  # each sequence's prompt and the tokens it had so far
    assert set(levels["run"]) == {"rate-2", "rate-5"} and (levels["count"] >= 20).all()


def test_records_without_each_tokens_arrival_give_no_curve(tmp_path):
    """A tool's records with the first and last token only (or a run too quiet to fill two batch sizes) leave the
    calibration to the rates' median TPOTs."""
    rng = np.random.default_rng(4)
    _stepped_run(tmp_path, "rate-2", 2, 200, 0.010, 0.0015, rng, chunks=False)
    assert decode_curve(tmp_path, ["rate-2"]) is None
    assert decode_curve(tmp_path, ["rate-missing"]) is None


def test_a_calibration_gives_the_model_the_decode_steps_slope_the_server_showed(tmp_path):
    """The stepping server above (3 ms a sequence) calibrated against an A100's priors for Llama-3.1-8B: the
    calibrated model's decode-only steps grow by the server's 3 ms a sequence, whatever share of it the priors
    already held, and its median TPOT is the runs'."""
    from llmbench.plan.calibrate import calibrate
    from tests.test_calibration import _catalog_setup

    setup, _, _ = _catalog_setup()
    rng = np.random.default_rng(5)
    _stepped_run(tmp_path, "rate-1.5", 1.5, 150, 0.012, 0.003, rng)
    _stepped_run(tmp_path, "rate-3", 3, 150, 0.012, 0.003, rng)
    cal = calibrate(tmp_path, setup.model, setup.shape, rates=2)
    curve = decode_curve(tmp_path, ["rate-1.5", "rate-3"])
    fitted = cal.apply(setup.model)
    assert curve.slope(lambda seqs, context: fitted.step_time(0, seqs, context)) == pytest.approx(0.003, rel=0.1)
    assert cal.decode_gaps == curve.gaps and "token gaps of decode-only steps" in cal.describe()
    assert cal.simulated_tpot_ms == pytest.approx(cal.measured_tpot_ms, rel=0.05)


def test_the_counts_from_sorted_events_are_those_of_every_request_against_every_gap(tmp_path):
    """The batch behind each quiet gap comes from sorted event times (a sweep holds millions of gaps); request by
    request, gap by gap, the count is the same."""
    import pandas as pd

    from llmbench.plan.decode_gaps import MIN_GAPS
    from llmbench.records import read_records

    _stepped_run(tmp_path, "rate-4", 4, 150, 0.010, 0.0015, np.random.default_rng(6))
    records = read_records(tmp_path / "rate-4.records.jsonl")
    start = np.array([r.start for r in records])
    first = np.array([r.chunk_times[0] for r in records])
    end = np.array([r.chunk_times[-1] for r in records])
    rows = []
    for r in records:
        t = np.asarray(r.chunk_times)
        for a, b in zip(t[:-1], t[1:], strict=True):
            if not ((start < b) & (first > a)).any():
                rows.append((int(((first <= a) & (end >= b)).sum()), b - a))
    brute = pd.DataFrame(rows, columns=["seqs", "gap"]).groupby("seqs")["gap"].agg(["median", "size"])
    brute = brute[brute["size"] >= MIN_GAPS]
    levels = decode_curve(tmp_path, ["rate-4"]).levels.set_index("seqs")
    assert list(levels.index) == list(brute.index) and len(levels) >= 4
    assert (levels["count"] == brute["size"]).all() and np.allclose(levels["gap"], brute["median"])
