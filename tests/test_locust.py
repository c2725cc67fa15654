"""Locust transport: headless master + 2 local workers against the scripted server."""

import json
import threading
import time

import numpy as np
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.records import read_records


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_two_workers_match_native_and_truth(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "60", "--itl-ms", "25")
    common = ["--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "20", "--num-prompts", "200",
              "--output-len", "6", "--no-progress"]
    r = run("run", "--engine", "locust", "--workers", "2", "--out", str(tmp_path / "locust"), *common)
    assert r.exit_code == 0, r.output
    r = run("run", "--out", str(tmp_path / "native"), *common)
    assert r.exit_code == 0, r.output
    loc = json.loads((tmp_path / "locust" / "rate-20.json").read_text())
    nat = json.loads((tmp_path / "native" / "rate-20.json").read_text())
    assert loc["completed"] == 200 and loc["failed"] == 0
    assert abs(loc["achieved_rate"] - 20) / 20 < 0.05
    # the scripted gaps are wide so that these bounds catch a chunk's worth of error on a slow, loaded machine
    for key in ("median_ttft_ms", "median_tpot_ms", "median_itl_ms"):
        assert abs(loc[key] - nat[key]) < 8.0, (key, loc[key], nat[key])
    assert 60 <= loc["median_ttft_ms"] < 72 and 24 <= loc["median_itl_ms"] < 33
    records = read_records(tmp_path / "locust" / "rate-20.records.jsonl")
    assert {r.worker for r in records} == {"worker-0", "worker-1"} and len(records) == 200
    # the server watched while Locust's processes sent the load, on the records' time base
    points = [json.loads(line) for line in (tmp_path / "locust" / "rate-20.server_metrics.jsonl").read_text().splitlines()]
    busy = [p["t"] for p in points if p.get("running")]
    assert busy and min(r.start for r in records) - 1.5 <= min(busy) <= max(busy) <= max(r.end for r in records) + 1.5
    stats = (tmp_path / "locust" / "rate-20.locust_stats.csv").read_text()
    assert "TTFT" in stats and "TPOT" in stats and "E2E" in stats
    page = run("report", str(tmp_path / "locust"), "-o", str(tmp_path / "r.html"))
    assert page.exit_code == 0


def test_dead_worker_is_reported_and_records_kept(scripted, tmp_path, tiny_model):
    """Worker-1 killed mid-run: its records up to then kept. Worker-0 stopped for a second before that (SIGSTOP,
    as a process that gets no CPU): the stall is its own, measured by its watch, on the run's time base, and
    charged to none of worker-1's requests."""
    import signal

    import psutil

    from llmbench.client_stalls import spanning

    server = scripted("--ttft-ms", "10", "--itl-ms", "2")
    out = tmp_path / "dead"

    def stop_one_kill_the_other():
        deadline = time.time() + 60
        while time.time() < deadline:
            metas = list((out / "rate-10.locust").glob("worker-*.meta.json")) if (out / "rate-10.locust").exists() \
                else []
            if len(metas) == 2:
                pids = [json.loads(m.read_text())["pid"] for m in sorted(metas)]
                time.sleep(1.5)
                psutil.Process(pids[0]).send_signal(signal.SIGSTOP)
                time.sleep(1.0)
                psutil.Process(pids[0]).send_signal(signal.SIGCONT)
                time.sleep(0.5)
                psutil.Process(pids[1]).kill()
                return
            time.sleep(0.2)

    killer = threading.Thread(target=stop_one_kill_the_other)
    killer.start()
    t0 = time.time()
    r = run("run", "--engine", "locust", "--workers", "2", "--base-url", server.url, "--tokenizer", str(tiny_model),
            "--rate", "10", "--num-prompts", "100", "--output-len", "5", "--out", str(out), "--no-progress")
    killer.join()
    assert r.exit_code == 0, r.output
    assert time.time() - t0 < 90
    data = json.loads((out / "rate-10.json").read_text())
    assert any("stopped answering" in n for n in data["notes"]), data["notes"]
    records = read_records(out / "rate-10.records.jsonl")
    by_worker = {w: sum(1 for x in records if x.worker == w) for w in ("worker-0", "worker-1")}
    assert by_worker["worker-0"] == 50 and 3 <= by_worker["worker-1"] < 50
    assert np.isfinite(data["median_ttft_ms"])
    stalls = data["client_stall_intervals"]
    assert max(e - s for s, e in stalls["worker-0"]) > 0.8 and data["max_client_stall_ms"] > 800
    assert all(e - s < 0.8 for s, e in stalls.get("worker-1", []))
    touched = spanning(records, stalls)
    assert len(touched) == data["requests_in_client_stalls"] and {r.worker for r in touched} <= {"worker-0"}


def test_a_locust_burst_may_take_as_long_as_a_request_may(scripted, tmp_path, tiny_model, monkeypatch):
    """A burst sent at once was given 70 s before Locust stopped its users (the requests then in flight lost) and
    every request a fixed 600 s socket timeout: the run now lasts as long as --request-timeout allows after the
    last send, and the workers get --read-timeout and --request-timeout."""
    import llmbench.locust_runner as locust_runner

    seen = {}

    def capture(base_url, options, workers, files, limit, users=None):
        seen.update(options, limit=limit, args=locust_runner.locust_args(base_url, options, files.locust_dir, 1))
        raise RuntimeError("captured")

    monkeypatch.setattr(locust_runner, "run_locust", capture)
    server = scripted("--ttft-ms", "10", "--itl-ms", "2")
    r = CliRunner().invoke(main, ["run", "--engine", "locust", "--base-url", server.url, "--tokenizer",
                                  str(tiny_model), "--rate", "inf", "--num-prompts", "20", "--output-len", "4",
                                  "--request-timeout", "900", "--read-timeout", "5", "--no-progress",
                                  "--out", str(tmp_path / "burst")])
    assert isinstance(r.exception, RuntimeError) and str(r.exception) == "captured"
    assert seen["limit"] >= 900 and seen["request_timeout"] == 900 and seen["read_timeout"] == 5
    args = seen["args"]
    assert args[args.index("--llm-request-timeout") + 1] == "900.0"
    assert args[args.index("--llm-read-timeout") + 1] == "5.0"


def test_locust_users_are_a_closed_loop_and_keep_what_is_in_flight_at_the_end(scripted, tmp_path, tiny_model):
    """vLLM-CPU, `run --engine locust --users 4 --duration 30`: the 200 requests went out at once (open loop at an
    infinite rate), and when Locust stopped its users at 30 s the 147 then in flight were lost: 53 records where
    the server had started 185. Users are a closed loop, and a request under way at the time limit is waited for."""
    server = scripted("--ttft-ms", "50", "--itl-ms", "100")
    out = tmp_path / "users"
    r = run("run", "--engine", "locust", "--workers", "2", "--users", "3", "--duration", "3", "--base-url",
            server.url, "--tokenizer", str(tiny_model), "--output-len", "12", "--num-prompts", "200", "--out",
            str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    import urllib.request

    with urllib.request.urlopen(server.url + "/truth") as resp:
        sent = len(json.load(resp))
    records = read_records(out / "users-3.records.jsonl")
    result = json.loads((out / "users-3.json").read_text())
    assert len(records) == sent and all(r.success for r in records), (len(records), sent)
    assert result["max_concurrent_requests"] <= 3 and 3 <= sent <= 20
