import hashlib

import torch
from click.testing import CliRunner

from bundled.modelbuild import build_model
from llmbench.cli import main


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_small_build_is_byte_identical(tmp_path, small_model):
    again = build_model("small", tmp_path / "again", force=True)
    first, second = _digests(small_model), _digests(again)
    assert set(first) >= {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                          "tokenizer_config.json"}
    assert first == second


def test_transformers_loads_and_generates(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    ids = tok("How do I bake bread?", return_tensors="pt").input_ids
    assert ids[0, 0].item() == tok.bos_token_id
    out = model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    assert out.shape == (1, ids.shape[1] + 8)
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.endswith("<|assistant|>\n") and "hi" in chat
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    assert model.dtype == torch.float32


def test_small_shape_matches_issue(small_model):
    import json

    cfg = json.loads((small_model / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"], cfg["max_position_embeddings"]) == \
        (512, 8, 8, 2, 1408, 16000, 4096)


def test_cli_help_and_errors(tiny_model):
    runner = CliRunner()
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0 and "model" in result.output
    result = runner.invoke(main, ["model", "build", "--size", "huge"])
    assert result.exit_code == 2 and "'huge' is not one of" in result.output
    result = runner.invoke(main, ["model", "build", "--nope"])
    assert result.exit_code == 2 and "No such option" in result.output
    result = runner.invoke(main, ["model", "build", "--size", "tiny"])
    assert result.exit_code == 0 and result.output.strip() == str(tiny_model)


def test_a_cached_build_of_an_older_shape_is_rebuilt(tmp_path, tiny_model):
    """The tiny model went from 4 heads of 16 to 2 of 32 (vLLM's attention needs head_dim >= 32): a folder
    built from the older definition, same hidden size and layers, must not be reused."""
    import json
    import shutil

    from bundled.modelbuild import SIZES, build_model

    old = tmp_path / "llmbench-tiny"
    shutil.copytree(tiny_model, old)
    config = json.loads((old / "config.json").read_text()) | {"num_attention_heads": 4, "num_key_value_heads": 2}
    (old / "config.json").write_text(json.dumps(config))
    rebuilt = json.loads((build_model("tiny", old) / "config.json").read_text())
    assert rebuilt["num_attention_heads"] == SIZES["tiny"].num_attention_heads == 2
    assert rebuilt["hidden_size"] // rebuilt["num_attention_heads"] >= 32


def test_builders_started_together_build_once(tmp_path, tiny_model, monkeypatch):
    """Two test workers (or two servers) asking for the same model at once: the second waits for the first's
    build and reuses it, instead of replacing the folder under the first one's loader."""
    import threading

    from bundled import modelbuild

    builds, real = [], modelbuild._build
    monkeypatch.setattr(modelbuild, "_build", lambda size, out: builds.append(size) or real(size, out))
    out = tmp_path / "llmbench-tiny"
    got = []
    workers = [threading.Thread(target=lambda: got.append(build_model("tiny", out))) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert builds == ["tiny"] and got == [out] * 3 and _digests(out) == _digests(tiny_model)
