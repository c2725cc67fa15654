"""One vocabulary across the commands, checked before anything starts, with errors that say what to do."""

import time

import pytest
from click.testing import CliRunner

from llmbench.cli import main


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_a_workload_written_for_run_runs_on_plan_unchanged(scripted, tmp_path, tiny_model):
    """The same workload flags, llmbench's or vLLM's spelling, on `run` and on `plan`."""
    server = scripted("--ttft-ms", "2", "--itl-ms", "1")
    for spelling in (["--input-len", "16", "--output-len", "4", "--range-ratio", "0"],
                     ["--random-input-len", "16", "--random-output-len", "4", "--random-range-ratio", "0"]):
        out = tmp_path / spelling[0].strip("-")
        r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "50",
                   "--num-prompts", "5", *spelling, "--out", str(out), "--no-progress")
        assert r.exit_code == 0, r.output
        assert (out / "rate-50.json").read_text().count('"dataset": "random"') == 1
        r = invoke("plan", "--at-rate", "2", "--model", "llama-3.1-8b", "--gpu", "H100-SXM", *spelling,
                   "--num-prompts", "50", "--no-search", "--out", str(tmp_path / f"{spelling[0]}.json"))
        assert r.exit_code == 0, r.output
        assert "random: input 16, output 4" in r.output


@pytest.mark.parametrize("args, message", [
    (["--dataset", "jsonl"], "the jsonl dataset needs --dataset-path FILE"),
    (["--out", "/proc/llmbench-x"], "cannot write there"),
    (["--tokenizer", "/missing-tokenizer"], "/missing-tokenizer: no such folder"),
    (["--base-url", "127.0.0.1:8000"], "did you mean http://127.0.0.1:8000?"),
    (["--dataset", "random", "--dataset-path", "x.json"], "--dataset-path does not apply to the random dataset"),
    (["--input-len", "8", "--dataset", "sharegpt"], "--input-len does not apply to the sharegpt dataset"),
    (["--percentiles", "p99"], "use numbers, e.g. 50,90,99"),
])
def test_bad_flags_are_refused_before_anything_starts(args, message, tmp_path):
    """Without --base-url these would start the bundled engine: each is refused first, in a second, exit 2."""
    t0 = time.time()
    r = invoke("run", "--num-prompts", "2", "--out", str(tmp_path / "o"), *args)
    assert r.exit_code == 2 and message in r.output, r.output
    assert time.time() - t0 < 10 and not (tmp_path / "o" / "engine.log").exists()


def test_messages_that_say_what_to_do(scripted, tmp_path, tiny_model):
    server = scripted("--ttft-ms", "2", "--itl-ms", "1")
    r = invoke("run", "--base-url", server.url + "/v1", "--tokenizer", str(tiny_model), "--rate", "50",
               "--num-prompts", "3", "--output-len", "2", "--out", str(tmp_path / "v1"), "--no-progress")
    assert r.exit_code == 0 and "dropped the trailing /v1" in r.output, r.output
    r = invoke("sweep", "--rate", "5-50")
    assert r.exit_code == 2 and "a..b as in 5..50" in r.output
    r = invoke("gate", "--baseline", str(tmp_path / "none"), "--current", str(tmp_path / "v1"))
    assert r.exit_code == 2 and "Error: " in r.output and "error: " not in r.output
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"prompt": "hello", "output_len": 2}\nnot json\n')
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset", "jsonl",
               "--dataset-path", str(bad), "--rate", "50", "--out", str(tmp_path / "j"), "--no-progress")
    assert r.exit_code == 0 and "note: " in r.output and "skipped 1 malformed line" in r.output
    assert "UserWarning" not in r.output
    r = invoke("run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "inf", "--num-prompts",
               "3", "--output-len", "2", "--out", str(tmp_path / "inf"), "--no-progress")
    assert r.exit_code == 0 and "sent all at once" in r.output and "/s, kept up" not in r.output


def test_serve_help_names_the_model_it_serves():
    from engine.serve.__main__ import server_command

    text = " ".join(CliRunner().invoke(server_command, ["--help"]).output.split())
    assert "the bundled `llmbench-tiny` model" in text and "`small`" not in text


def test_the_sweep_bar_has_no_eta_the_rate_bar_has_one():
    from rich.console import Console

    from llmbench.live import LiveView

    view = LiveView(Console(force_terminal=True, width=120), live=True)
    try:
        view.rate_started(0, 8, 1.0, 30)
        tasks = {t.description: t for t in view.bars.tasks}
        assert tasks["rate 1 of up to 8"].fields["eta"] is False and tasks["1 req/s done"].fields["eta"] is True
    finally:
        view.close()


def test_report_and_gate_take_the_same_flags(scripted, tmp_path, tiny_model):
    """`report --slo` judges a folder after the fact (from its records); gate's ratio mode takes the workload
    flags of run, and a malformed one is refused before anything is measured."""
    server = scripted("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "r"
    r = invoke("sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "5,10", "--duration",
               "2", "--output-len", "4", "--out", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    r = invoke("report", str(out), "-o", str(tmp_path / "strict.html"), "--slo", "ttft=1ms")
    assert r.exit_code == 0, r.output
    assert "No rate met the SLO (P99 TTFT &lt;= 1 ms)" in (tmp_path / "strict.html").read_text()
    r = invoke("gate", "--ratio", "--baseline", str(tmp_path / "ratio.json"), "--update-baseline", "--input-len",
               "8", "--output-len", "2", "--dataset-option", "oops")
    assert r.exit_code == 2 and "--dataset-option" in r.output and "KEY=VALUE" in r.output
