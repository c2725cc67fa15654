import json
import logging
import warnings

import pytest

from bundled import sharegpt
from llmbench.datasets.sharegpt import sample_pairs


def test_packaged_file_counts():
    load = sharegpt.load()
    assert len(load.conversations) == 17671
    assert load.truncated and load.skipped_malformed == 0
    assert sum(len(c.turns) >= 2 for c in load.conversations) == 17400
    first = load.conversations[0]
    assert first.id == "QWJhYvA_0"
    assert [who for who, _ in first.turns[:2]] == ["human", "gpt"]


def _item(i, turns=2):
    return {"id": f"c{i}", "conversations": [{"from": "human" if t % 2 == 0 else "gpt", "value": f"t{i}-{t}"}
                                              for t in range(turns)]}


def test_truncated_and_malformed(tmp_path, caplog):
    good = [_item(i) for i in range(5)]
    body = json.dumps(good[:2] + [{"id": "bad"}, 7] + good[2:])
    path = tmp_path / "cut.json"
    path.write_text(body[:-1][: len(body) - 30])  # drop the closing bracket and cut into the last item
    with caplog.at_level(logging.DEBUG, logger="bundled.sharegpt"), warnings.catch_warnings():
        warnings.simplefilter("error")  # the truncation is logged at debug level, never warned about
        load = sharegpt.load(path)
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.DEBUG
    message = caplog.records[0].getMessage()
    assert "kept 4 complete conversations" in message and "truncated" in message and "2 malformed" in message
    assert [c.id for c in load.conversations] == ["c0", "c1", "c2", "c3"]
    assert load.skipped_malformed == 2


def test_jsonl_with_bad_line(tmp_path, caplog):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join([json.dumps(_item(0)), "{not json", json.dumps(_item(1, 4))]) + "\n")
    with caplog.at_level(logging.DEBUG, logger="bundled.sharegpt"):
        load = sharegpt.load(path)
    assert "1 malformed" in caplog.text
    assert [len(c.turns) for c in load.conversations] == [2, 4]


def test_complete_file_logs_nothing(tmp_path, caplog):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps([_item(i) for i in range(3)]))
    with caplog.at_level(logging.DEBUG, logger="bundled.sharegpt"):
        assert len(sharegpt.load(path).conversations) == 3
    assert not caplog.records


@pytest.mark.parametrize("content, message", [(None, "no such dataset file"), ("{}", "no ShareGPT conversations"),
                                              ("[]", "no ShareGPT conversations")])
def test_unusable_files(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(sharegpt.DatasetError, match=message):
        sharegpt.load(path)


def test_vllm_sampling_rules():
    convs = [sharegpt.Conversation(f"c{i}", (("human", "p" * n), ("gpt", "r" * m)))
             for i, (n, m) in enumerate([(3, 10), (10, 3), (1100, 10), (1000, 1100), (10, 10), (50, 60)])]
    convs.append(sharegpt.Conversation("single", (("human", "only one turn"),)))
    picked = sample_pairs(convs, 2, len, seed=0)
    assert sorted(p.conversation_id for p in picked) == ["c4", "c5"]
    topped = sample_pairs(convs, 5, len, seed=0)
    assert len(topped) == 5 and {p.conversation_id for p in topped} <= {"c4", "c5"}
    fixed = sample_pairs(convs, 10, len, seed=0, output_len=1800, oversample=False)
    assert {p.conversation_id for p in fixed} == {"c1", "c4", "c5"}  # output check skipped, total <= 2048
    assert all(p.output_len == 1800 for p in fixed)
