"""`llmbench run` / `sweep` end to end against the scripted server: files, errors, a dying target."""

import json
import time

import pandas as pd
import pytest
import requests
from click.testing import CliRunner

from llmbench import machine
from llmbench.cli import main
from llmbench.records import read_records


def invoke(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def test_run_writes_results(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "5", "--itl-ms", "1", "--tokens-per-chunk", "3")
    out = tmp_path / "res"
    result = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "20",
                    "--num-prompts", "30", "--out", str(out), "--no-progress", "--goodput", "ttft:1000")
    assert result.exit_code == 0, result.output
    data = json.loads((out / "rate-20.json").read_text())
    for key in ("date", "backend", "model_id", "request_rate", "burstiness", "completed", "failed",
                "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                "max_output_tokens_per_s", "max_concurrent_requests", "p99_ttft_ms", "median_tpot_ms",
                "p99_itl_ms", "mean_e2el_ms", "achieved_rate", "p99_send_lag_ms", "client_stalls", "max_client_stall_ms"):
        assert key in data, key
    assert data["completed"] == 30 and data["model_id"] == "scripted" and data["request_goodput"] > 0
    records = read_records(out / "rate-20.records.jsonl")
    assert len(records) == 30
    assert all(set(r.chunk_tokens) <= {3, 1, 2} for r in records)  # continuous usage gives tokens per chunk
    assert (out / "rate-20.server_metrics.jsonl").read_text()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["dataset"]["name"] == "sharegpt" and meta["target"]["model"] == "scripted"
    assert set(meta["machine"]["isa"]) <= set(machine.ISA) and "cpu_model" in meta["machine"]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["label"]) == ["rate-20"]


def test_sweep_multiple_rates_and_chat(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "2", "--itl-ms", "1")
    out = tmp_path / "sweep"
    result = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "5,10",
                    "--duration", "2", "--out", str(out), "--no-progress", "--backend", "openai-chat",
                    "--dataset", "random", "--random-input-len", "32", "--random-output-len", "8")
    assert result.exit_code == 0, result.output
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["request_rate"]) == [5, 10]
    assert list(summary["completed"]) == [10, 20]
    assert "prefix cache not reset before each rate (the server has neither /reset_prefix_cache" in result.output
    # a server whose cache cannot be dropped gets no prompt twice: the rate-10 run would find all of rate-5's cached
    assert "each rate sends prompts no earlier rate sent" in result.output
    sent = [json.dumps(t["messages"]) for t in requests.get(server.url + "/truth", timeout=10).json()]
    assert len(sent) == 30 and len(set(sent)) == 30
    assert [json.loads((out / f"rate-{r}.json").read_text())["fresh_prompts"] for r in (5, 10)] == [True, True]



def test_fresh_prompts_say_when_the_dataset_ran_out(monkeypatch):
    """Where a dataset holds fewer unsent prompts than a rate needs, the rate tops up with prompts an earlier rate
    sent, counts them, and is not marked as fresh."""
    from llmbench import datasets, sweep

    pool = [datasets.Request(f"prompt {i}", 3, 4) for i in range(5)]
    monkeypatch.setattr(datasets, "build", lambda name, tokenizer, n, seed=0, **kw: (pool[:n], None))
    work = sweep.Workload(dataset="random", num_prompts=3)
    first, _, reused = sweep._requests(work, None, 1.0, set())
    assert reused == 0 and len(first) == 3
    sent = {sweep._prompt_key(r) for r in first}
    second, _, reused = sweep._requests(work, None, 1.0, sent)
    assert [r.prompt for r in second] == ["prompt 3", "prompt 4", "prompt 0"] and reused == 1

def test_target_dies_mid_run(scripted, tmp_path, tiny_model):
    from conftest import stop_after_records

    server = scripted("--ttft-ms", "5", "--itl-ms", "5")
    out = tmp_path / "dead"
    killer = stop_after_records(server, out / "rate-20.records.jsonl", 8)
    t0 = time.time()
    result = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "20",
                    "--num-prompts", "400", "--output-len", "20", "--out", str(out), "--no-progress")
    killer.join()
    assert time.time() - t0 < 60  # ends by itself, long before the 20 s schedule is through
    assert result.exit_code == 3, result.output  # measured, but a CI job must not pass on a dead target
    data = json.loads((out / "rate-20.json").read_text())
    assert data["completed"] >= 8 and data["failed"] >= 10 and data["completed"] + data["failed"] < 400
    assert any("stopped answering" in note for note in data["notes"])
    assert "stopped answering" in result.output
    records = read_records(out / "rate-20.records.jsonl")
    assert sum(r.success for r in records) == data["completed"]


def test_clear_errors(scripted, tmp_path, tiny_model):
    server = scripted()
    r = invoke("run", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2", "--out", str(tmp_path / "a"))
    assert r.exit_code == 1 and "cannot reach http://127.0.0.1:9" in r.output
    r = invoke("run", "--base-url", server.url, "--model", "nope", "--num-prompts", "2", "--out", str(tmp_path / "b"))
    assert r.exit_code == 1 and "model 'nope' is not served" in r.output and "scripted" in r.output
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset-path",
               str(tmp_path / "missing.json"), "--num-prompts", "2", "--out", str(tmp_path / "c"))
    assert r.exit_code == 2 and "no such dataset file" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": "a", "conversations": [{"from": "human", "value": "hello there friend"}, {"from": "gpt", '
                   '"value": "hi how are you doing"}]}, {"id": "b", "conv')
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset-path", str(bad),
               "--num-prompts", "2", "--out", str(tmp_path / "d"), "--no-progress")
    assert r.exit_code == 0 and "kept 1 complete conversations; the file is truncated" in r.output
    r = invoke("run", "--rate", "fast")
    assert r.exit_code == 2 and "Invalid value for --rate: 'fast' is not a rate" in r.output
    r = invoke("run", "--base-url", server.url, "--dataset", "random", "--max-turns", "5", "--tokenizer",
               str(tiny_model), "--out", str(tmp_path / "e"))
    assert r.exit_code == 2 and "--max-turns does not apply to the random dataset (it applies to multi-turn)" in r.output


def test_all_failures_exit_nonzero(scripted, tmp_path, tiny_model):
    server = scripted("--fail-every", "1")
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--num-prompts", "5", "--rate", "50",
               "--out", str(tmp_path / "f"), "--no-progress")
    assert r.exit_code == 1 and "nothing could be measured" in r.output and "HTTP 500" in r.output


def test_multi_turn_sends_actual_replies(scripted, tmp_path, tiny_model):
    server = scripted()
    out = tmp_path / "mt"
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset", "multi-turn",
               "--max-turns", "3", "--backend", "openai-chat", "--num-prompts", "4", "--rate", "inf",
               "--output-len", "3", "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    import urllib.request

    with urllib.request.urlopen(server.url + "/truth") as resp:
        entries = json.load(resp)
    later = [e for e in entries if len(e["messages"]) > 1]
    assert later and all(e["messages"][-2] == {"role": "assistant", "content": " tok" * 3} for e in later)
    records = read_records(out / "rate-inf.records.jsonl")
    assert {r.turn for r in records} >= {0, 1} and len(records) == len(entries)


def test_a_multi_turn_sweep_answers_in_conversations(scripted, tmp_path, tiny_model):
    """A rate of a multi-turn workload opens conversations; the sweep's lines, answer and report count them."""
    server = scripted()
    out = tmp_path / "mts"
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset", "multi-turn",
               "--max-turns", "2", "--backend", "openai-chat", "--num-prompts", "6", "--rate", "5,10",
               "--output-len", "3", "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    assert "conversations/s per replica" in r.output and "client overloaded" not in r.output
    page = (out / "report.html").read_text()
    assert "rate (conversations/s)" in page and "Sustains 10 conversations/s" in page


def test_trace_replay_uses_timestamps(scripted, tmp_path, tiny_model):
    server = scripted()
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps({"prompt": f"p{i}", "output_len": 2, "timestamp": 10 + 0.3 * i})
                               for i in range(5)))
    out = tmp_path / "trace"
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset", "jsonl",
               "--dataset-path", str(trace), "--out", str(out), "--no-progress", "--rate", "100")
    assert r.exit_code == 0, r.output
    records = sorted(read_records(out / "rate-100.records.jsonl"), key=lambda x: x.index)
    assert [round(x.scheduled, 6) for x in records] == [0.0, 0.3, 0.6, 0.9, 1.2]


def test_embedded_engine_and_results_api(tmp_path, tiny_model):
    from llmbench.results import load_records, load_results, load_server_metrics

    out = tmp_path / "embedded"
    r = invoke("run", "--model", str(tiny_model), "--num-prompts", "6", "--rate", "inf", "--output-len", "8",
               "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"note: starting the bundled engine ({tiny_model})")  # not 14 s of silence
    results = load_results(out)
    assert results[0]["completed"] == 6 and results[0]["model_id"] == "llmbench-tiny"
    assert results[0]["prefix_cache_reset"] is True and "prefix cache not reset" not in r.output
    frame = load_records(out)
    assert len(frame) == 6 and {"ttft", "tpot", "latency", "send_lag"} <= set(frame.columns)
    assert frame["output_tokens"].tolist() == [8] * 6
    assert "kv_usage" in load_server_metrics(out, "rate-inf").columns
    assert (out / "engine.log").is_file()
    # the server's own clock over the same six requests: it starts after the client's send and stops before the
    # client reads the token, so the client's mean can only be longer
    assert results[0]["server_timed_ttft"] == 6 and results[0]["server_timed_e2el"] == 6
    assert 0 < results[0]["server_mean_ttft_ms"] <= results[0]["mean_ttft_ms"] + 0.5
    assert results[0]["client_over_server_ttft_ms"] >= -0.5 and results[0]["client_over_server_e2el_ms"] >= -0.5
    assert "the server's own mean TTFT" in r.output
    from llmbench.report.html import build_report

    page = build_report([out], tmp_path / "report.html").read_text()
    assert "The server's own clock" in page and f"{results[0]['server_mean_ttft_ms']:,.1f}" in page


@pytest.mark.parametrize("signals", [("SIGINT", "SIGINT"), ("SIGTERM",)])  # a second Ctrl-C covers the first
def test_ctrl_c_keeps_the_partial_result_and_exits_130(scripted, tmp_path, tiny_model, signals):
    """Ctrl-C, Ctrl-C twice, or SIGTERM: the result so far, the requests in flight (marked interrupted, with
    their chunks so far), the table and the report are all written."""
    import os
    import signal
    import subprocess
    import sys

    server = scripted("--ttft-ms", "20", "--itl-ms", "50")
    out = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-m", "llmbench.cli", "sweep", "--base-url", server.url, "--tokenizer",
                             str(tiny_model), "--rate", "5,10", "--duration", "20", "--output-len", "40", "--out",
                             str(out), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    records = out / "rate-5.records.jsonl"
    while not (records.is_file() and records.read_text().count("\n") >= 1) and time.time() < deadline:
        time.sleep(0.2)  # the first rate is running and has answers to keep
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(0.05)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    data = json.loads((out / "rate-5.json").read_text())
    assert data["interrupted"] is True and data["completed"] >= 1 and not (out / "rate-10.json").exists()
    assert list(pd.read_csv(out / "summary.csv")["interrupted"]) == [True]
    records = read_records(out / "rate-5.records.jsonl")
    cut = [r for r in records if r.interrupted]
    assert len(records) == data["completed"] + data["failed"] + data["interrupted_requests"]
    assert cut and data["interrupted_requests"] == len(cut) and any(r.chunk_times for r in cut)
    assert "in flight are recorded as interrupted" in output
    assert "interrupted" in output and "sustains" not in output.splitlines()[-1]
    assert "llmbench sweep" in output and (out / "report.html").is_file()  # the table and the report


def test_failures_beyond_the_limit_exit_3(scripted, tmp_path, tiny_model):
    server = scripted("--fail-every", "4")
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--num-prompts", "40", "--rate", "50",
               "--out", str(tmp_path / "f"), "--no-progress", "--output-len", "4")
    assert r.exit_code == 3 and "more than --max-failure-rate 0.05" in r.output
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--num-prompts", "40", "--rate", "50",
               "--out", str(tmp_path / "g"), "--no-progress", "--output-len", "4", "--max-failure-rate", "0.5")
    assert r.exit_code == 0, r.output


def test_no_results_folder_when_nothing_was_reached(tmp_path):
    out = tmp_path / "never"
    r = invoke("run", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2", "--out", str(out))
    assert r.exit_code == 1 and not out.exists()


def test_sweep_ends_with_the_answer(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "20", "--itl-ms", "5")
    out = tmp_path / "answer"
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "4,8", "--duration", "3",
               "--output-len", "8", "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("sustains 8 req/s per replica under P99 TTFT <= 2 s and P99 TPOT <= 100 ms"), last
    rows = pd.read_csv(out / "summary.csv")
    assert list(rows["slo_attainment"]) == [1.0, 1.0] and rows["request_goodput"].notna().all()
    page = (out / "report.html").read_text()
    assert page.index("Sustains 8 req/s per replica") < page.index("<h2")  # the first thing the report says
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "4", "--duration", "3",
               "--output-len", "8", "--out", str(tmp_path / "strict"), "--no-progress", "--slo", "ttft=5ms")
    assert r.exit_code == 0
    assert r.output.strip().splitlines()[-1].startswith("no rate met the SLO (P99 TTFT <= 5 ms); the lowest rate "
                                                        "measured was 4 req/s, try --rate 0.4..4")
    assert "Token indices" not in r.output and "Warning" not in r.output


def test_report_and_gate_write_beside_the_results(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "res"
    invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "20", "--num-prompts", "20",
           "--out", str(out), "--no-progress")
    r = invoke("report", str(out))
    assert r.exit_code == 0 and (out / "report.html").is_file() and f"report: {out / 'report.html'}" in r.output
    r = invoke("gate", "--baseline", str(out), "--current", str(out), "--allow-inconclusive")
    assert r.exit_code == 0 and (out / "gate-summary.md").is_file() and (out / "gate-junit.xml").is_file()
    assert f"summary: {out / 'gate-summary.md'}" in r.output


def test_engine_commands_name_themselves_llmbench():
    import subprocess
    import sys

    for command in ("serve", "quantize"):
        proc = subprocess.run([sys.executable, "-m", "llmbench.cli", command, "--help"], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and proc.stdout.startswith(f"Usage: llmbench {command} "), proc.stdout[:200]


def test_the_machine_names_its_cpu_and_extensions(tmp_path):
    """Figures differ between CPU kinds, so every results folder says which one took them."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                    "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    got = machine.machine(info)
    assert got["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert got["isa"] == ["amx_bf16", "avx512_bf16", "avx512f", "avx2"]
    assert "Xeon" in machine.describe_machine(got) and "amx_bf16, avx512_bf16" in machine.describe_machine(got)
    missing = machine.machine(tmp_path / "absent")
    assert missing["cpu_model"] is None and missing["isa"] == []


def test_a_run_without_paced_arrivals_answers_with_what_it_measured(scripted, tmp_path, tiny_model):
    """A closed loop (`--max-concurrency`) or every request at once has no per-replica rate to report, but its
    last line still says what the server did and whether the SLO held, in the terminal and the report."""
    server = scripted("--ttft-ms", "10", "--itl-ms", "2")
    out = tmp_path / "closed"
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--max-concurrency", "3",
               "--num-prompts", "9", "--output-len", "6", "--out", str(out), "--no-progress", "--slo", "ttft=1s")
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    row = json.loads((out / "rate-inf-c3.json").read_text())
    assert last.startswith(f"at 3 in flight (closed loop) the server completed {row['request_throughput']:.3g} req/s, "
                           ), last
    assert "P99 TTFT <= 1 s met by 100.0%" in last and last.endswith("`llmbench sweep --rate a..b`)")
    assert invoke("report", str(out)).exit_code == 0
    assert "3 in flight (closed loop) the server completed" in (out / "report.html").read_text()
    assert invoke("report", str(out), "--slo", "ttft=1ms").exit_code == 0  # the share under the SLO asked now
    assert "P99 TTFT &lt;= 1 ms met by 0.0%" in (out / "report.html").read_text()
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "inf", "--num-prompts",
               "5", "--output-len", "6", "--out", str(tmp_path / "burst"), "--no-progress", "--slo", "ttft=1ms")
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("at all 5 requests at once the server completed") and "met by 0.0%" in last, last
