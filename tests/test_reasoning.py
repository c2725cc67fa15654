"""Reasoning streams: TTFT stays the first token of any kind (vLLM's definition), TTFO (the first answer
token) is measured beside it, reasoning and answer tokens are counted apart, `--slo ttfo=` judges it, and the
table, report and gate show it, whether the server sends `reasoning_content` (chat) or `<think>` text."""

import json

import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.client import StreamParser
from llmbench.metrics import compute
from llmbench.records import RequestRecord
from llmbench.slo import parse_slo


def _chat(delta: dict, done: int) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": delta}], "usage": {"completion_tokens": done}}).encode()


def _text(text: str, done: int) -> bytes:
    return b"data: " + json.dumps({"choices": [{"text": text}], "usage": {"completion_tokens": done}}).encode()


def test_reasoning_content_then_answer():
    record = RequestRecord(0, 0.0, start=0.0)
    parser = StreamParser(record, chat=True)
    parser.feed(_chat({"role": "assistant", "content": ""}, 0), 0.05)
    for i in range(1, 4):
        parser.feed(_chat({"reasoning_content": " hmm"}, i), 0.1 * i)
    parser.feed(_chat({"content": "Paris"}, 5), 0.5)
    parser.feed(b"data: [DONE]", 0.6)
    parser.finish(0.6)
    assert record.ttft == pytest.approx(0.05) and record.ttfo == pytest.approx(0.5)
    assert record.reasoning_tokens == 3 and record.output_tokens == 5


def test_think_tags_in_text_and_stated_reasoning_tokens():
    record = RequestRecord(0, 0.0, start=0.0)
    parser = StreamParser(record, chat=False)
    parser.feed(_text("<think>let me", 2), 0.1)
    parser.feed(_text(" see", 3), 0.2)
    parser.feed(_text("</think>", 4), 0.3)
    parser.feed(_text(" 42", 5), 0.4)
    assert record.ttft == pytest.approx(0.1) and record.ttfo == pytest.approx(0.4)
    assert record.reasoning_tokens == 4
    parser.feed(b'data: {"choices":[],"usage":{"completion_tokens":5,"completion_tokens_details":'
                b'{"reasoning_tokens":3}}}', 0.45)
    assert record.reasoning_tokens == 3  # the server's own count wins


def test_a_stream_that_never_answers_misses_a_ttfo_bound():
    thinker = RequestRecord(0, 0.0, start=0.0, end=1.0, chunk_times=[0.1, 0.2], success=True, output_tokens=2,
                            reasoning_tokens=2)
    plain = RequestRecord(1, 0.0, start=0.0, end=1.0, chunk_times=[0.1, 0.2], success=True, output_tokens=2,
                          first_output=0.1)
    result = compute([thinker, plain], 1.0, goodput=parse_slo("ttfo=1s").bounds)
    assert result["slo_attainment"] == 0.5 and result["answered_requests"] == 1
    assert result["reasoning_requests"] == 1 and result["total_answer_tokens"] == 2


@pytest.mark.parametrize("backend", ["openai-chat", "openai"])
def test_reasoning_server_end_to_end(backend, scripted, tmp_path, tiny_model):
    """20 reasoning tokens 5 ms apart after a 20 ms first token: TTFO is about 120 ms while TTFT is 20 ms;
    an SLO of TTFT 1 s alone passes every request, one adding TTFO 60 ms passes none."""
    server = scripted("--ttft-ms", "20", "--itl-ms", "5", "--reasoning", "20")
    base = ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--backend", backend, "--rate", "20",
            "--num-prompts", "12", "--dataset", "random", "--input-len", "8", "--output-len", "30", "--no-progress"]
    runner = CliRunner()
    out = tmp_path / "think"
    r = runner.invoke(main, [*base, "--out", str(out), "--slo", "ttft=1s,ttfo=60ms"])
    assert r.exit_code == 0, r.output
    row = json.loads((out / "rate-20.json").read_text())
    assert row["median_ttft_ms"] < 60 and 110 <= row["median_ttfo_ms"] < 400
    assert row["total_reasoning_tokens"] == 12 * 20 and row["total_answer_tokens"] == 12 * 10
    assert row["slo_attainment"] == 0.0
    assert "TTFO P50/P99" in r.output and "240 reasoning tokens of 360" in r.output
    if backend == "openai":  # <think> text: the parse is the difference; the report and gate are the chat run's
        return
    loose = tmp_path / "loose"
    assert runner.invoke(main, [*base, "--out", str(loose), "--slo", "ttft=1s"]).exit_code == 0
    assert json.loads((loose / "rate-20.json").read_text())["slo_attainment"] == 1.0
    r = runner.invoke(main, ["report", str(out), str(loose), "--output", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "r.html").read_text()
    assert "TTFO P99" in page and "TTFO (dashed)" in page
    summary = tmp_path / "gate.md"
    r = runner.invoke(main, ["gate", "--baseline", str(out), "--current", str(loose), "--summary", str(summary),
                             "--allow-inconclusive"])
    assert summary.is_file() and "p99_ttfo" in summary.read_text(), (r.output, r.exception)
