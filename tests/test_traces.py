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
