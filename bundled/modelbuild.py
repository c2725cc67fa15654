"""The bundled default model: a Llama-architecture checkpoint with seeded random weights.

No weights can be downloaded here, so the model every benchmark runs on is built locally and
deterministically: the same seed gives byte-identical files. It is a real Hugging Face checkpoint
(config.json, model.safetensors, a byte-level BPE tokenizer trained on ShareGPT text), so the engine,
`transformers` and vLLM all load it unchanged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SEED = 0
VOCAB_SIZE = 16000
TOKENIZER_TRAIN_CONVERSATIONS = 4000
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int = 4096


SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(64, 2, 2, 1, 192, 2048),  # head_dim 32: the smallest vLLM's CPU and GPU attention take
    "small": ModelSize(512, 8, 8, 2, 1408, 4096),
    "qwen0.5b-shape": ModelSize(896, 24, 14, 2, 4864, 4096),  # Qwen2.5-0.5B's shapes, for GPU checks
}

DEFAULT_SIZE = "tiny"  # what the engine serves, and llmbench counts tokens with, when no model is named

# layer-skip self-drafts for speculative decoding: (target size, leading layers kept)
DRAFTS: dict[str, tuple[str, int]] = {"small-draft": ("small", 2), "tiny-draft": ("tiny", 1)}


def llmbench_home() -> Path:
    return Path(os.environ.get("LLMBENCH_HOME", Path.home() / ".cache" / "llmbench"))


def default_model_dir(size: str = DEFAULT_SIZE) -> Path:
    return llmbench_home() / "models" / f"llmbench-{size}"


def _training_texts() -> Iterator[str]:
    from bundled import sharegpt

    for conv in sharegpt.load().conversations[:TOKENIZER_TRAIN_CONVERSATIONS]:
        for _, text in conv.turns:
            yield text


def build_tokenizer(out: Path) -> None:
    """Train a byte-level BPE on ShareGPT text and write tokenizer.json + its config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_texts(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    tok.save(str(out / "tokenizer.json"))
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "model_max_length": 4096,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(out / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})


def model_config(size: ModelSize, tokenizer_dir: Path) -> dict:
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": size.hidden_size,
        "intermediate_size": size.intermediate_size,
        "num_hidden_layers": size.num_hidden_layers,
        "num_attention_heads": size.num_attention_heads,
        "num_key_value_heads": size.num_key_value_heads,
        "head_dim": size.hidden_size // size.num_attention_heads,
        "hidden_act": "silu",
        "max_position_embeddings": size.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": vocab[BOS],
        "eos_token_id": vocab[EOS],
        "pad_token_id": vocab[PAD],
        "torch_dtype": "float32",
    }


def random_weights(config: dict, seed: int = SEED) -> dict:
    """Seeded weights, drawn in a fixed order so every build gives the same bytes."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    h, inter = config["hidden_size"], config["intermediate_size"]
    hd = config["head_dim"]
    q_out, kv_out = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    def norm_weight() -> torch.Tensor:
        return 1.0 + normal(h, std=0.1)

    weights = {"model.embed_tokens.weight": normal(config["vocab_size"], h, std=1.0)}
    out_std = 0.02 / (2 * config["num_hidden_layers"]) ** 0.5
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": norm_weight(),
            p + "self_attn.q_proj.weight": normal(q_out, h, std=h**-0.5),
            p + "self_attn.k_proj.weight": normal(kv_out, h, std=h**-0.5),
            p + "self_attn.v_proj.weight": normal(kv_out, h, std=h**-0.5),
            p + "self_attn.o_proj.weight": normal(h, q_out, std=out_std),
            p + "post_attention_layernorm.weight": norm_weight(),
            p + "mlp.gate_proj.weight": normal(inter, h, std=h**-0.5),
            p + "mlp.up_proj.weight": normal(inter, h, std=h**-0.5),
            p + "mlp.down_proj.weight": normal(h, inter, std=out_std),
        }
    weights["model.norm.weight"] = norm_weight()
    weights["lm_head.weight"] = normal(config["vocab_size"], h, std=h**-0.5 * 4)
    return weights


def build_model(size: str = DEFAULT_SIZE, out: Path | str | None = None, force: bool = False) -> Path:
    """Build (or reuse) the bundled model of `size`; return its folder."""
    if size not in SIZES and size not in DRAFTS:
        raise ValueError(f"unknown model size {size!r}; choose one of {', '.join([*SIZES, *DRAFTS])}")
    out = Path(out) if out is not None else default_model_dir(size)
    if _built(out, size) and not force:
        return out
    with _building(out):
        if _built(out, size) and not force:  # another process built it while this one waited
            return out
        if size in DRAFTS:
            target, keep = DRAFTS[size]
            return build_layer_skip_draft(build_model(target), out, keep)
        _build(size, out)
    return out


def _built(out: Path, size: str) -> bool:
    return (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file() and _shape_matches(out, size)


@contextlib.contextmanager
def _building(out: Path) -> Iterator[None]:
    """One builder of a folder at a time across processes (test workers, two servers started together): a second
    one replacing the folder would pull it from under the first one's loader. flock is released if a builder dies."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(size: str, out: Path) -> None:
    from safetensors.torch import save_file

    with _staged(out) as tmp:
        _tokenizer_into(tmp)
        config = model_config(SIZES[size], tmp)
        _write_json(tmp / "config.json", config)
        _write_json(
            tmp / "generation_config.json",
            {
                "bos_token_id": config["bos_token_id"],
                "eos_token_id": config["eos_token_id"],
                "pad_token_id": config["pad_token_id"],
                "do_sample": False,
            },
        )
        save_file(random_weights(config), str(tmp / "model.safetensors"), metadata={"format": "pt"})


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A scratch folder beside `out` that replaces it only if the block completes (no half-built model)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _shape_matches(folder: Path, size: str) -> bool:
    """A cached build from an older definition of `size` is rebuilt."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    target, keep = DRAFTS.get(size, (size, None))
    want = SIZES[target]
    layers = keep or want.num_hidden_layers
    fields = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    return tuple(config.get(f) for f in fields) == (want.hidden_size, want.intermediate_size, layers,
                                                     want.num_attention_heads, want.num_key_value_heads)


def build_layer_skip_draft(source: Path, out: Path, keep_layers: int) -> Path:
    """A draft for speculative decoding that shares the source's tokenizer, embeddings, final norm and
    LM head and keeps its first `keep_layers` decoder layers (a layer-skip self-draft)."""
    from safetensors.torch import load_file, save_file

    config = json.loads((source / "config.json").read_text())
    if not 0 < keep_layers < config["num_hidden_layers"]:
        raise ValueError(f"keep_layers must be between 1 and {config['num_hidden_layers'] - 1}")
    weights = load_file(str(source / "model.safetensors"))
    kept = {name: w for name, w in weights.items()
            if not name.startswith("model.layers.") or int(name.split(".")[2]) < keep_layers}
    with _staged(out) as tmp:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
            shutil.copyfile(source / name, tmp / name)
        _write_json(tmp / "config.json", config | {"num_hidden_layers": keep_layers})
        save_file(kept, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return out


def _tokenizer_into(folder: Path) -> None:
    """Every size shares one tokenizer, trained once and copied from the cache."""
    cached = llmbench_home() / "tokenizer"
    with _building(cached):
        if not (cached / "tokenizer.json").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=cached.parent))
            build_tokenizer(tmp)
            if not cached.exists():
                tmp.rename(cached)
            shutil.rmtree(tmp, ignore_errors=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(cached / name, folder / name)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
