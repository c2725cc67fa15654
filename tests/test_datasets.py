import json

import pytest

from llmbench import datasets
from llmbench.datasets.text import count_tokens


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.fixture(autouse=True)
def _quiet(recwarn):
    """The packaged ShareGPT file is truncated; its warning is tested in test_sharegpt."""


def test_sharegpt_lengths_match_tokenizer(tok):
    reqs, info = datasets.build("sharegpt", tok, 20, seed=0)
    assert len(reqs) == 20 and "vLLM ShareGPT" in info.description
    for r in reqs:
        assert r.prompt_len == count_tokens(tok, r.prompt) and 4 <= r.prompt_len <= 1024
        assert r.prompt_len + r.output_len <= 2048
    again, _ = datasets.build("sharegpt", tok, 20, seed=0)
    other, _ = datasets.build("sharegpt", tok, 20, seed=1)
    assert [r.prompt for r in again] == [r.prompt for r in reqs] != [r.prompt for r in other]


def test_random_exact_lengths(tok):
    reqs, _ = datasets.build("random", tok, 30, seed=0, input_len=100, output_len=20, range_ratio=0.5)
    for r in reqs:
        assert 50 <= r.prompt_len <= 150 and 10 <= r.output_len <= 30
        assert abs(count_tokens(tok, r.prompt) - r.prompt_len) <= 1
    exact = sum(count_tokens(tok, r.prompt) == r.prompt_len for r in reqs)
    assert exact >= 27
    fixed, _ = datasets.build("random", tok, 5, input_len=64, output_len=8)
    assert {r.prompt_len for r in fixed} == {64} and {r.output_len for r in fixed} == {8}


def test_synthetic_means_scale(tok):
    reqs, info = datasets.build("synthetic", tok, 400, seed=0, input_mean=200, output_mean=100)
    mean_in = sum(r.prompt_len for r in reqs) / len(reqs)
    mean_out = sum(r.output_len for r in reqs) / len(reqs)
    assert 140 < mean_in < 260 and 70 < mean_out < 130
    assert info.options["input_sigma"] > 0.3  # fitted, not constant


def test_shared_prefix_groups(tok):
    reqs, _ = datasets.build("shared-prefix", tok, 12, num_groups=3, prompts_per_group=4, system_prompt_len=200,
                             question_len=20, output_len=8)
    assert len(reqs) == 12
    groups = {}
    for r in reqs:
        groups.setdefault(r.conversation_id, []).append(r.prompt)
    assert len(groups) == 3
    for prompts in groups.values():
        prefix = prompts[0].split("\n\n")[0]
        assert all(p.startswith(prefix) for p in prompts) and len(set(prompts)) == 4


def test_multi_turn_structure(tok):
    reqs, _ = datasets.build("multi-turn", tok, 5, max_turns=3, system_prompt_len=50)
    assert len(reqs) == 5
    for r in reqs:
        assert r.messages[0]["role"] == "system" and r.messages[1]["role"] == "user"
        assert 1 <= len(r.follow_ups) <= 2 and len(r.follow_up_output_lens) == len(r.follow_ups)


def test_jsonl_trace(tok, tmp_path):
    path = tmp_path / "trace.jsonl"
    lines = [json.dumps({"prompt": "hello world", "output_len": 5, "timestamp": 1.5}),
             "not json",
             json.dumps({"messages": [{"role": "user", "content": "hi"}], "timestamp": 0.5})]
    path.write_text("\n".join(lines))
    reqs, info = datasets.build("jsonl", tok, 0, path=str(path))
    assert len(info.notes) == 1 and "skipped 1 malformed line(s) (first: line 2" in info.notes[0]
    assert [r.timestamp for r in reqs] == [1.5, 0.5] and reqs[0].output_len == 5 and "trace" in info.description
    with pytest.raises(datasets.DatasetError, match="no such dataset file"):
        datasets.build("jsonl", tok, 0, path=str(tmp_path / "nope.jsonl"))


def test_unknown_dataset(tok):
    with pytest.raises(datasets.DatasetError, match="unknown dataset"):
        datasets.build("imagenet", tok, 1)
