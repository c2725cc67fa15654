"""Requests longer than the server serves are found before they are sent (context_fit.py)."""

import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.context_fit import check
from llmbench.datasets import DatasetError, Request
from llmbench.target import Target

SERVED = Target("http://127.0.0.1:1", "m", None, False, {"models": [{"id": "m", "max_model_len": 2048}]})


def test_some_too_long_are_said_and_sent_every_one_too_long_is_refused():
    fits, long = Request("a", 1500, 500), Request("b", 2000, 100)
    assert check([fits, fits], SERVED, True) is None
    said = check([fits, long], SERVED, True)
    assert said.startswith("1 of 2 requests need more than the 2,048 tokens") and "the longest 2,100" in said
    assert "count as failed" in said
    with pytest.raises(DatasetError, match="refuse every one .*nothing was sent"):
        check([long, long], SERVED, True)
    assert "2 of 2" in check([long, long], SERVED, False)  # another tokenizer's count: a hint, sent anyway
    unstated = Target("http://127.0.0.1:1", "m", None, False, {"models": [{"id": "m"}]})
    assert check([long], unstated, True) is None


def test_conversations_that_outgrow_the_context_by_a_later_turn_are_said():
    """vLLM-CPU at --max-model-len 2048, `--dataset multi-turn --max-turns 3`: one conversation's second turn
    (its history and the reply before it) came to 2,049 tokens and was refused with HTTP 400."""
    words = len  # a token a character, for the test
    short = Request(None, 100, 50, follow_ups=["x" * 100], follow_up_output_lens=[50])
    growing = Request(None, 900, 400, follow_ups=["x" * 300, "x" * 200], follow_up_output_lens=[400, 300])
    assert check([short, short], SERVED, True, words) is None
    said = check([short, growing], SERVED, True, words)
    assert said.startswith("1 of 2 conversations may outgrow the 2,048 tokens") and "up to 2,500" in said
    assert check([short, growing], SERVED, True) is None  # without a count of the later turns: first turns only


def test_the_bundled_engine_states_its_context_and_a_workload_past_it_sends_nothing(tmp_path, tiny_model):
    out = tmp_path / "long"
    r = CliRunner().invoke(main, ["run", "--model", str(tiny_model), "--dataset", "random", "--input-len", "2100",
                                  "--output-len", "8", "--range-ratio", "0", "--num-prompts", "3", "--out", str(out),
                                  "--no-progress"])
    assert r.exit_code == 1 and "3 of 3 requests need more than the 2,048 tokens the server serves" in r.output
    assert not list(out.glob("*.records.jsonl"))
