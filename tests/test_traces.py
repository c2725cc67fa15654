"""Public trace formats (Azure, BurstGPT, Mooncake), each on a small file made here: lengths and timestamps read,
windows and speed-ups applied, the trace replayed at its own times, and Mooncake's shared blocks shared."""

import json

import pytest
from click.testing import CliRunner

from llmbench import datasets
from llmbench.cli import main

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens,NumImages
2023-11-16 18:17:03.9799600,40,12,0
2023-11-16 18:17:04.4799600,80,6,1
2023-11-16 18:17:05.9799600,20,8,0
2023-11-16 18:17:09.9799600,30,5,0
"""
BURSTGPT = """Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type
5.0,s1,1.2,ChatGPT,40,10,50,Conversation log
6.0,s1,0.8,ChatGPT,60,0,60,Conversation log
7.5,s2,2.0,GPT-4,30,12,42,API log
9.0,s3,0.5,ChatGPT,25,7,32,Conversation log
"""


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


def test_azure_lengths_times_windows_and_speed(tok, tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    reqs, info = datasets.build("azure", tok, 0, path=str(path))
    assert [r.timestamp for r in reqs] == pytest.approx([0.0, 0.5, 2.0, 6.0])
    assert [r.output_len for r in reqs] == [12, 6, 8, 5]
    assert all(abs(r.prompt_len - n) <= 2 for r, n in zip(reqs, (40, 80, 20, 30), strict=True))
    assert any("NumImages is read but ignored" in n for n in info.notes)
    fast, _ = datasets.build("azure", tok, 0, path=str(path), time_scale=2.0, trace_start=0.5, trace_duration=2.0)
    assert [r.timestamp for r in fast] == pytest.approx([0.0, 0.75])  # 0.5 s and 2.0 s, from the start, halved


def test_a_trace_is_not_swept_over_rates(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    r = CliRunner().invoke(main, ["sweep", "--dataset", "azure", "--dataset-path", str(path), "--rate", "1,2"])
    assert r.exit_code == 2 and "replays at its own timestamps" in r.output and "--time-scale" in r.output


def test_burstgpt_skips_failures_and_filters_models(tok, tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(BURSTGPT)
    reqs, info = datasets.build("burstgpt", tok, 0, path=str(path))
    assert [r.output_len for r in reqs] == [10, 12, 7] and [r.timestamp for r in reqs] == pytest.approx([0, 2.5, 4])
    assert "1 rows with 0 response tokens (failures in the trace) skipped" in info.notes
    assert reqs[0].conversation_id == "s1"
    chat, _ = datasets.build("burstgpt", tok, 0, path=str(path), model_filter="GPT-4")
    assert len(chat) == 1
    with pytest.raises(datasets.DatasetError, match="no row of model 'Claude'"):
        datasets.build("burstgpt", tok, 0, path=str(path), model_filter="Claude")
    bad = tmp_path / "bad.csv"
    bad.write_text("time,tokens\n1,2\n")
    with pytest.raises(datasets.DatasetError, match="no column Timestamp"):
        datasets.build("burstgpt", tok, 0, path=str(bad))


def mooncake(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_mooncake_equal_hash_ids_share_their_text(tok, tmp_path):
    path = mooncake(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 48, "output_length": 4, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 9]},
        {"timestamp": 900, "input_length": 16, "output_length": 4, "hash_ids": [7]}])
    a, b, c = datasets.build("mooncake", tok, 0, path=str(path), block_size=16)[0]
    ids = [tok(r.prompt, add_special_tokens=False).input_ids for r in (a, b, c)]
    assert ids[0][:32] == ids[1][:32] and ids[0][32:40] != ids[1][32:40]  # blocks 1 and 2 shared, 3 and 9 not
    assert ids[2][:16] != ids[0][:16] and [r.timestamp for r in (a, b, c)] == pytest.approx([0, 0.5, 0.9])
    with pytest.raises(datasets.DatasetError, match="line 1 is not a Mooncake record"):
        datasets.build("mooncake", tok, 0, path=str(mooncake(tmp_path / "x.jsonl", [{"ts": 1}])))


def test_a_mooncake_slice_replayed_fast_hits_the_prefix_cache(tiny_model, serve_engine, tmp_path):
    """Ten requests sharing their first blocks, at 10x the trace's speed, against the bundled engine: its
    /metrics counts prefix-cache hits, and every request was sent at its (scaled) time."""
    from engine.llm import LLM
    from llmbench.records import read_records

    server = serve_engine(LLM(tiny_model, kv_cache_memory=32 * 2**20))
    rows = [{"timestamp": 300 * i, "input_length": 64, "output_length": 4, "hash_ids": [100, 101, 102, 200 + i]}
            for i in range(10)]
    path = mooncake(tmp_path / "slice.jsonl", rows)
    out = tmp_path / "replay"
    r = CliRunner().invoke(main, ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--dataset",
                                  "mooncake", "--dataset-path", str(path), "--hash-block-size", "16", "--time-scale", "10",
                                  "--out", str(out), "--no-progress", "--keep-prefix-cache"])
    assert r.exit_code == 0, r.output
    records = read_records(out / "rate-inf.records.jsonl")
    assert sorted(round(x.scheduled, 3) for x in records) == pytest.approx([0.03 * i for i in range(10)])
    assert max(x.dispatched - x.scheduled for x in records) < 0.5
    series = [json.loads(line) for line in (out / "rate-inf.server_metrics.jsonl").read_text().splitlines()]
    assert max(p.get("prefix_hits", 0) for p in series) > 0
    assert "on the trace's own schedule" in r.output and "all at once" not in r.output


SESSIONS = """Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type
0.0,a,0.4,ChatGPT,30,8,38,Conversation log
0.5,b,0.4,ChatGPT,20,8,28,Conversation log
1.0,a,0.4,ChatGPT,60,8,68,Conversation log
1.2,a,0.4,ChatGPT,90,8,98,Conversation log
2.0,c,0.4,ChatGPT,25,8,33,Conversation log
"""


def test_a_burstgpt_session_replays_as_a_conversation(scripted, tmp_path, tiny_model):
    """Session a's turns are due at 0, 0.5 and 0.6 s (2x speed); each reply takes ~0.44 s, so its second turn
    goes at its own time and its third waits for the second's reply; each turn carries the history."""
    from llmbench.records import read_records

    server = scripted("--ttft-ms", "20", "--itl-ms", "60")
    path = tmp_path / "sessions.csv"
    path.write_text(SESSIONS)
    out = tmp_path / "sessions"
    r = CliRunner().invoke(main, ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--backend",
                                  "openai-chat", "--dataset", "burstgpt", "--dataset-path", str(path),
                                  "--time-scale", "2", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    turns = sorted((x for x in read_records(out / "rate-inf.records.jsonl") if x.conversation_id == "a"),
                   key=lambda x: x.turn)
    assert [x.turn for x in turns] == [0, 1, 2] and all(x.success for x in turns)
    assert turns[1].start == pytest.approx(0.5, abs=0.1) and turns[1].start >= turns[0].end
    assert turns[2].start >= turns[1].end > 0.6
    result = json.loads((out / "rate-inf.json").read_text())
    assert result["sessions"]["sessions"] == 1 and result["sessions"]["max_turns"] == 3
    assert set(result["sessions"]["median_ttft_ms_by_turn"]) == {"0", "1", "2"}
    assert "1 sessions of 3.0 turns" in r.output and "later turns of 1 sessions" in result["dataset_description"]
    import urllib.request

    truth = json.loads(urllib.request.urlopen(server.url + "/truth").read())
    assert max(len(t["messages"] or []) for t in truth) == 5  # user, reply, user, reply, user


def test_bailian_chat_chains_are_sessions_of_whole_prompts(tok, tmp_path):
    rows = [{"timestamp": 0, "input_length": 32, "output_length": 4, "hash_ids": [1, 2], "chat_id": 10,
             "parent_chat_id": -1},
            {"timestamp": 100, "input_length": 16, "output_length": 4, "hash_ids": [7], "chat_id": 20,
             "parent_chat_id": -1},
            {"timestamp": 400, "input_length": 48, "output_length": 4, "hash_ids": [1, 2, 3], "chat_id": 11,
             "parent_chat_id": 10}]
    path = mooncake(tmp_path / "bailian.jsonl", rows)
    reqs, info = datasets.build("mooncake", tok, 0, path=str(path), block_size=16)
    assert len(reqs) == 2 and reqs[0].follow_ups_whole and reqs[0].follow_up_at == pytest.approx([0.4])
    assert reqs[0].follow_ups[0].startswith(reqs[0].prompt[:40])  # the later turn's blocks start with the first's
    assert "later turns of 1 sessions" in info.description
    alone, _ = datasets.build("mooncake", tok, 0, path=str(path), block_size=16, sessions_on=False)
    assert len(alone) == 3
