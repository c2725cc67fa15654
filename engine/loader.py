"""Local Hugging Face checkpoints: config parsing and safetensors weights, with errors that name the file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
}


class CheckpointError(ValueError):
    """A checkpoint the engine cannot load; the message names the file and the problem."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    attention_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    sliding_window: int | None
    torch_dtype: str | None
    quantization: dict | None = None  # the checkpoint's quantization_config (AWQ/GPTQ)


def read_config(folder: Path) -> ModelConfig:
    path = folder / "config.json"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: model folder does not exist")
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (a Hugging Face checkpoint folder needs config.json)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: malformed JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    archs = raw.get("architectures") or []
    arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
    if arch is None:
        raise CheckpointError(
            f"{path}: unsupported architecture {archs or raw.get('model_type')!r}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )

    def need(key: str, kind: type = int):
        value = raw.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CheckpointError(f"{path}: '{key}' must be a {kind.__name__}, got {value!r}")
        return value

    rope = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    heads = need("num_attention_heads")
    hidden = need("hidden_size")
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
    window = raw.get("sliding_window") if raw.get("use_sliding_window", arch == "MistralForCausalLM") else None
    return ModelConfig(
        architecture=arch,
        vocab_size=need("vocab_size"),
        hidden_size=hidden,
        intermediate_size=need("intermediate_size"),
        num_layers=need("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or hidden // heads,
        max_position_embeddings=need("max_position_embeddings"),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(raw.get("rope_theta", rope.get("rope_theta", 10000.0))),
        rope_scaling=scaling,
        attention_bias=bool(raw.get("attention_bias", arch == "Qwen2ForCausalLM")),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        eos_token_ids=eos_ids,
        bos_token_id=raw.get("bos_token_id"),
        sliding_window=window,
        torch_dtype=raw.get("torch_dtype") or raw.get("dtype"),
        quantization=raw.get("quantization_config"),
    )


def weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError) as err:
            raise CheckpointError(f"{index}: malformed index ({err})") from None
        files = [folder / n for n in names]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{missing[0]}: listed in {index.name} but missing")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors weights (pickled .bin checkpoints are not loaded)")
    return files


QUANT_TENSORS = ("qweight", "qzeros", "scales", "g_idx")


def load_weights(model: torch.nn.Module, folder: Path) -> dict[tuple[str, int | None], dict[str, torch.Tensor]]:
    """Copy every checkpoint tensor into the model's (possibly fused) parameters and buffers (fp8 KV
    scales). Quantized linears (AWQ/GPTQ tensors) are returned, keyed by (module, shard), for
    `engine.quant.apply` to build."""
    from safetensors import safe_open

    params = dict(model.named_parameters()) | dict(model.named_buffers())
    loaded: set[str] = set()
    quantized: dict[tuple[str, int | None], dict[str, torch.Tensor]] = {}
    for file in weight_files(folder):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if "rotary_emb" in name:
                    continue
                target, shard = model.checkpoint_to_param(name)
                module, _, kind = target.rpartition(".")
                if kind in QUANT_TENSORS:
                    quantized.setdefault((module, shard), {})[kind] = f.get_tensor(name)
                    loaded.add(f"{module}.weight#{shard}" if shard is not None else f"{module}.weight")
                    continue
                if target not in params:
                    continue
                _copy_into(params[target], f.get_tensor(name), shard, model, target, file, name)
                loaded.add(f"{target}#{shard}" if shard is not None else target)
    expected = set()
    for target in dict(model.named_parameters()):
        if target == "lm_head.weight" and model.cfg.tie_word_embeddings:
            continue
        fused = target.split(".")[-2]
        shards = len(model.shard_sizes(fused)) if fused in ("qkv_proj", "gate_up_proj") else 0
        expected |= {f"{target}#{i}" for i in range(shards)} if shards else {target}
    missing = sorted(expected - loaded)
    if missing:
        raise CheckpointError(f"{folder}: tensor for {missing[0].split('#')[0]!r} missing from the checkpoint "
                              f"({len(missing)} missing in all)")
    return quantized


def _copy_into(param: torch.Tensor, tensor: torch.Tensor, shard: int | None, model, target: str,
               file: Path, name: str) -> None:
    if shard is None:
        dest = param.data
    else:
        sizes = model.shard_sizes(target.split(".")[-2])
        dest = param.data.narrow(0, sum(sizes[:shard]), sizes[shard])
    if dest.shape != tensor.shape:
        raise CheckpointError(f"{file}: tensor {name!r} has shape {tuple(tensor.shape)}, "
                              f"expected {tuple(dest.shape)} from config.json")
    dest.copy_(tensor)
