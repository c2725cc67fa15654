import json
import shutil

import pytest

from engine.llm import LLM
from engine.loader import CheckpointError


@pytest.fixture
def copy(tmp_path, tiny_model):
    dst = tmp_path / "model"
    shutil.copytree(tiny_model, dst)
    return dst


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="model folder does not exist"):
        LLM(tmp_path / "nothing")


def test_missing_config(copy):
    (copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config.json: missing"):
        LLM(copy)


def test_malformed_config(copy):
    (copy / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"config.json: malformed JSON"):
        LLM(copy)


def test_unsupported_architecture(copy):
    _edit_config(copy, architectures=["GPT2LMHeadModel"])
    with pytest.raises(CheckpointError, match="unsupported architecture.*GPT2LMHeadModel"):
        LLM(copy)


def test_bad_field(copy):
    _edit_config(copy, hidden_size="wide")
    with pytest.raises(CheckpointError, match="'hidden_size' must be a int"):
        LLM(copy)


def test_missing_weights(copy):
    (copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no \*.safetensors weights"):
        LLM(copy)


def test_shape_mismatch_names_tensor(copy):
    _edit_config(copy, intermediate_size=200)
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor 'model.layers.0.mlp.[a-z_]+.weight' has shape .* expected"):
        LLM(copy)


def test_missing_tensor_named(copy):
    from safetensors.torch import load_file, save_file

    weights = load_file(str(copy / "model.safetensors"))
    del weights["model.layers.1.self_attn.v_proj.weight"]
    save_file(weights, str(copy / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"layers.1.self_attn.qkv_proj.weight"):
        LLM(copy)


def test_qwen2_style_bias_and_tied_embeddings(copy, tmp_path):
    """A Qwen2-shaped checkpoint (q/k/v bias, tied embeddings) loads and matches transformers."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    weights = load_file(str(copy / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    for name in list(weights):
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            weights[name.replace("weight", "bias")] = torch.randn(weights[name].shape[0], generator=gen) * 0.1
    del weights["lm_head.weight"]
    save_file(weights, str(copy / "model.safetensors"))
    _edit_config(copy, architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True,
                 use_sliding_window=False)
    from engine.config import SamplingParams

    prompt = list(range(10, 60))
    ours = LLM(copy, kv_cache_memory=8 * 2**20).generate([prompt], SamplingParams(temperature=0, max_tokens=8,
                                                                                   ignore_eos=True))
    hf = AutoModelForCausalLM.from_pretrained(str(copy))
    ref = hf.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert ours[0].outputs[0].token_ids == ref[0, 50:].tolist()
