"""A Hugging Face `config.json` read into a ModelSpec: Llama-style decoders (gated FFN, GQA, MoE under each
family's own field names, MLA) and the older two-matrix-FFN ones (OPT, GPT-NeoX, Falcon, MPT), with the format the
checkpoint's weights ship in."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from llmbench.plan.model_spec import ModelSpec

# config.json field names per layout: layers, hidden, heads, FFN, vocab
LAYOUTS = {
    "llama": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"),
    "opt": ("num_hidden_layers", "hidden_size", "num_attention_heads", "ffn_dim", "vocab_size"),
    "gpt_neox": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"),
    "falcon": ("num_hidden_layers", "hidden_size", "num_attention_heads", None, "vocab_size"),
    "mpt": ("n_layers", "d_model", "n_heads", None, "vocab_size"),
}


# the field names each family's config.json uses for the same quantity, first found wins
EXPERTS = ("num_local_experts", "n_routed_experts", "num_experts")  # Mixtral/gpt-oss, DeepSeek/GLM, Qwen-MoE
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk")
TWO_MATRIX_FFN = ("phi", "gpt2", "starcoder2")  # a plain GELU FFN with biases, Llama-style fields otherwise


def _first(cfg: dict, names: tuple[str, ...]):
    return next((cfg[n] for n in names if cfg.get(n) is not None), None)


def model_from_config(path: Path) -> ModelSpec:
    if not path.is_file():
        raise KeyError(f"{path}: no such config.json")
    cfg = json.loads(path.read_text())
    if isinstance(cfg.get("text_config"), dict):  # vision-language models nest their language model
        cfg = {**cfg, **cfg["text_config"]}
    kind = cfg.get("model_type", "")
    layout = kind if kind in LAYOUTS else "llama"
    if kind == "falcon":  # older Falcon configs use n_layer / n_head
        cfg.setdefault("num_hidden_layers", cfg.get("n_layer"))
        cfg.setdefault("num_attention_heads", cfg.get("n_head"))
    lacking = [f for f in LAYOUTS[layout] if f and cfg.get(f) is None]
    if lacking:
        arch = ", ".join(cfg.get("architectures") or [kind or "this model"])
        raise KeyError(f"{path}: {arch} is not a layout the planner models (Llama-style decoders with GQA, MoE or "
                       f"MLA; OPT, GPT-NeoX, Falcon, MPT): config.json has no {', '.join(lacking)}")
    if layout == "llama":
        return _llama(path, cfg)
    layers, hidden, heads, ffn_field, vocab = (cfg[f] if f else None for f in LAYOUTS[layout])
    common = {"name": path.parent.name, "layers": layers, "hidden": hidden, "heads": heads,
              "head_dim": hidden // heads, "vocab": vocab, "gated_ffn": False,
              "tied": bool(cfg.get("tie_word_embeddings", layout in ("opt", "mpt", "falcon")))}
    if layout == "opt":
        return ModelSpec(**common, kv_heads=heads, ffn=ffn_field, linear_bias=bool(cfg.get("enable_bias", True)),
                         learned_positions=cfg.get("max_position_embeddings", 2048) + 2,
                         max_positions=cfg.get("max_position_embeddings", 2048))
    if layout == "gpt_neox":
        return ModelSpec(**common, kv_heads=heads, ffn=ffn_field, linear_bias=True,
                         max_positions=cfg.get("max_position_embeddings", 2048))
    if layout == "falcon":
        kv = cfg.get("num_kv_heads") if cfg.get("new_decoder_architecture") else (1 if cfg.get("multi_query", True)
                                                                                  else heads)
        return ModelSpec(**common, kv_heads=kv or heads, ffn=cfg.get("ffn_hidden_size") or 4 * hidden,
                         linear_bias=bool(cfg.get("bias", False)), max_positions=cfg.get("max_position_embeddings",
                                                                                        2048))
    attn = cfg.get("attn_config") or {}
    return ModelSpec(**common, kv_heads=attn.get("kv_n_heads") or heads, ffn=int(cfg.get("expansion_ratio", 4) * hidden),
                     linear_bias=not cfg.get("no_bias", True), max_positions=cfg.get("max_seq_len", 2048))


def checkpoint_dtype(cfg: dict) -> str:
    """The weights' format from config.json's `quantization_config`: MXFP4 (gpt-oss), FP8 (DeepSeek's blocks, Qwen's
    -FP8), AWQ/GPTQ and compressed-tensors by their bits; bf16 when there is none or it is not one of these."""
    quant = cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    if method in ("mxfp4", "fp8"):
        return method
    bits = quant.get("bits") or quant.get("w_bit")
    if method == "compressed-tensors":
        weights = next((g.get("weights") or {} for g in (quant.get("config_groups") or {}).values()), {})
        bits = weights.get("num_bits")
        if bits == 8 and weights.get("type") == "float":
            return "fp8"
    return {4: "int4", 8: "int8"}.get(bits, "bf16") if method in ("awq", "gptq", "compressed-tensors") else "bf16"


def fp8_blocks(cfg: dict) -> bool:
    """Whether FP8 weights are scaled per block (`weight_block_size`, DeepSeek's and Qwen's; compressed-tensors'
    `block` strategy, llm-compressor's FP8_BLOCK) rather than per tensor or channel."""
    quant = cfg.get("quantization_config") or {}
    groups = (quant.get("config_groups") or {}).values()
    return checkpoint_dtype(cfg) == "fp8" and (bool(quant.get("weight_block_size")) or any(
        (g.get("weights") or {}).get("strategy") == "block" for g in groups))


def _llama(path: Path, cfg: dict) -> ModelSpec:
    """Llama, Mistral, Qwen2/2.5/3, Qwen3-MoE, Mixtral, DeepSeek-V2/V3, gpt-oss, GLM-4.x, Gemma, Phi: one
    layout, each family's own names for the MoE fields; the dense layers of an MoE model (DeepSeek's and
    GLM's `first_k_dense_replace`, Qwen-MoE's `mlp_only_layers`) keep the dense FFN."""
    heads = cfg["num_attention_heads"]
    kind = cfg.get("model_type", "")
    experts = _first(cfg, EXPERTS) or 1
    dense = cfg.get("first_k_dense_replace") or len(cfg.get("mlp_only_layers") or [])
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    spec = ModelSpec(
        name=path.parent.name, layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        ffn=cfg["intermediate_size"], vocab=cfg["vocab_size"],
        tied=bool(cfg.get("tie_word_embeddings", kind.startswith("gemma"))),
        qkv_bias=kind in ("qwen2", "qwen2_moe") or bool(cfg.get("attention_bias")),
        gated_ffn=kind not in TWO_MATRIX_FFN, linear_bias=kind in TWO_MATRIX_FFN,
        experts=experts, top_k=_first(cfg, TOP_K) or 1 if experts > 1 else 1,
        shared_experts=cfg.get("n_shared_experts") or round((cfg.get("shared_expert_intermediate_size") or 0) / (
            cfg.get("moe_intermediate_size") or cfg["intermediate_size"])),
        moe_ffn=cfg.get("moe_intermediate_size"), dense_layers=dense,
        sliding_window=window,
        sliding_layers=sum(t == "sliding_attention" for t in cfg.get("layer_types") or []) if window else 0,
        max_positions=cfg.get("max_position_embeddings", 4096), checkpoint_dtype=checkpoint_dtype(cfg),
        fp8_blocks=fp8_blocks(cfg),
    )
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3): low-rank q and kv projections
        h, rope, nope = cfg["hidden_size"], cfg.get("qk_rope_head_dim", 64), cfg.get("qk_nope_head_dim", 128)
        rank, q_rank, v = cfg["kv_lora_rank"], cfg.get("q_lora_rank"), cfg.get("v_head_dim", 128)
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        attn = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
        spec = replace(spec, mla_kv_dim=rank + rope, head_dim=nope + rope, attn_params=attn)
    return spec
