"""Models the planner knows (planning.md §8) and any Hugging Face `config.json` of a supported layout:
Llama-style (gated FFN, GQA, MoE, MLA) and the older two-matrix-FFN decoders (OPT, GPT-NeoX, Falcon, MPT)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool = False
    qkv_bias: bool = False  # Qwen2: biases on q, k, v only
    gated_ffn: bool = True  # SwiGLU (3 matrices) or a plain GELU/ReLU FFN (2 matrices)
    linear_bias: bool = False  # OPT/GPT-NeoX: every projection has a bias
    learned_positions: int = 0  # OPT: a learned position table of this many rows
    experts: int = 1  # MoE: routed experts per layer
    top_k: int = 1
    shared_experts: int = 0
    moe_ffn: int | None = None  # expert FFN size when it differs from `ffn`
    dense_layers: int = 0  # leading dense layers of an MoE model
    mla_kv_dim: int | None = None  # MLA: kv_lora_rank + qk_rope_head_dim elements per layer
    attn_params: float | None = None  # per layer, where the layout is not q/k/v/o of head_dim (MLA)
    total_params: float | None = None  # published counts where the layout is not plain (MLA)
    active_params_published: float | None = None
    sliding_window: int | None = None
    max_positions: int = 4096
    checkpoint_dtype: str = "bf16"  # the weights as the published checkpoint ships them: the default --weight-dtype

    @cached_property
    def params(self) -> float:
        if self.total_params:
            return self.total_params
        return self._count(self.experts)

    @cached_property
    def active_params(self) -> float:
        if self.active_params_published:
            return self.active_params_published
        return self._count(min(self.top_k, self.experts) if self.experts > 1 else 1)

    @cached_property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.learned_positions * self.hidden

    @property
    def ffn_matrices(self) -> int:
        return 3 if self.gated_ffn else 2

    def _count(self, experts_counted: int) -> float:
        h, d = self.hidden, self.head_dim
        attn = self.attn_params or h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h
        if self.qkv_bias or self.linear_bias:
            attn += self.heads * d + 2 * self.kv_heads * d + (h if self.linear_bias else 0)
        moe_ffn = self.moe_ffn or self.ffn
        dense_mlp = self.ffn_matrices * h * self.ffn + ((self.ffn + h) if self.linear_bias else 0)
        moe_mlp = (experts_counted + self.shared_experts) * self.ffn_matrices * h * moe_ffn + (
            h * self.experts if self.experts > 1 else 0)
        moe_layers = self.layers - self.dense_layers if self.experts > 1 else 0
        norms = 2 * h * (2 if self.linear_bias else 1)
        per_dense = attn + dense_mlp + norms
        per_moe = attn + moe_mlp + norms
        return self.embedding_params + (self.layers - moe_layers) * per_dense + moe_layers * per_moe + h

    @cached_property
    def routed_expert_params(self) -> float:
        """Parameters of the routed experts (0 for a dense model): the part a step reads only where routed."""
        if self.experts <= 1:
            return 0.0
        return (self.layers - self.dense_layers) * self.experts * self.ffn_matrices * self.hidden * (
            self.moe_ffn or self.ffn)

    def params_read(self, tokens: float) -> float:
        """Parameters a step of `tokens` tokens reads: everything but the routed experts, and of those the
        expected share hit by tokens·top_k routings, 1 - (1 - k/E)^tokens (nearly all of them by 8 tokens)."""
        if self.experts <= 1:
            return self.params
        hit = 1.0 - (1.0 - min(self.top_k, self.experts) / self.experts) ** max(tokens, 1.0)
        routed = min(self.routed_expert_params, self.params)
        return self.params - routed + routed * hit

    def kv_bytes_per_token(self, kv_bytes: float, tp: int = 1) -> float:
        """Per GPU: 2·L·max(n_kv/TP, 1)·d_h·b (GQA heads replicated when n_kv < TP); MLA: L·(rank+rope)·b."""
        if self.mla_kv_dim:
            return self.layers * self.mla_kv_dim * kv_bytes
        return 2 * self.layers * max(self.kv_heads / tp, 1) * self.head_dim * kv_bytes


def _plain(name, layers, hidden, heads, ffn, vocab, **kw) -> ModelSpec:
    """A two-matrix-FFN, multi-head decoder (OPT, MPT, GPT-NeoX)."""
    return ModelSpec(name, layers, hidden, heads, kw.pop("kv_heads", heads), hidden // heads, ffn, vocab,
                     gated_ffn=False, **kw)


MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, max_positions=4096),
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, max_positions=4096),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, max_positions=4096),
    ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_positions=8192),
    ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_positions=131072),
    ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=8192),
    ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=131072),
    ModelSpec("llama-3.3-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=131072),
    ModelSpec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, max_positions=131072),
    ModelSpec("qwen2.5-0.5b", 24, 896, 14, 2, 64, 4864, 151936, tied=True, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-14b", 48, 5120, 40, 8, 128, 13824, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, sliding_window=4096, max_positions=32768),
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, experts=8, top_k=2, max_positions=32768),
    ModelSpec("mixtral-8x22b", 56, 6144, 48, 8, 128, 16384, 32768, experts=8, top_k=2, max_positions=65536),
    ModelSpec("qwen2.5-32b", 64, 5120, 40, 8, 128, 27648, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, tied=True, max_positions=40960),
    ModelSpec("qwen3-1.7b", 28, 2048, 16, 8, 128, 6144, 151936, tied=True, max_positions=40960),
    ModelSpec("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936, tied=True, max_positions=40960),
    ModelSpec("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, max_positions=40960),
    ModelSpec("qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, max_positions=40960),
    ModelSpec("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, max_positions=40960),
    ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, 151936, experts=128, top_k=8, moe_ffn=768,
              max_positions=40960),
    ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 12288, 151936, experts=128, top_k=8, moe_ffn=1536,
              max_positions=40960),
    ModelSpec("llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, tied=True, max_positions=131072),
    ModelSpec("llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, tied=True, max_positions=131072),
    # every layer routes (one shared expert beside one of 16); its chunked local attention is not modelled
    ModelSpec("llama-4-scout-17b-16e", 48, 5120, 40, 8, 128, 16384, 202048, experts=16, top_k=1, shared_experts=1,
              moe_ffn=8192, max_positions=10485760),
    # gpt-oss: biased attention, every other layer a 128-token sliding window (KV counted as if all were full:
    # what a pool without vLLM's hybrid allocator holds); MXFP4 experts (`--weight-dtype mxfp4`: the routed
    # experts in 4.25 bits, the rest bf16, as the checkpoints ship)
    ModelSpec("gpt-oss-20b", 24, 2880, 64, 8, 64, 2880, 201088, qkv_bias=True, experts=32, top_k=4,
              sliding_window=128, max_positions=131072, checkpoint_dtype="mxfp4"),
    ModelSpec("gpt-oss-120b", 36, 2880, 64, 8, 64, 2880, 201088, qkv_bias=True, experts=128, top_k=4,
              sliding_window=128, max_positions=131072, checkpoint_dtype="mxfp4"),
    ModelSpec("glm-4.5-air", 46, 4096, 96, 8, 128, 10944, 151552, qkv_bias=True, experts=128, top_k=8,
              shared_experts=1, moe_ffn=1408, dense_layers=1, max_positions=131072),
    ModelSpec("deepseek-v3", 61, 7168, 128, 128, 128, 18432, 129280, experts=256, top_k=8, shared_experts=1,
              moe_ffn=2048, dense_layers=3, mla_kv_dim=512 + 64, total_params=671e9,
              active_params_published=37e9, max_positions=163840, checkpoint_dtype="fp8"),
    _plain("opt-13b", 40, 5120, 40, 20480, 50272, tied=True, linear_bias=True, learned_positions=2050,
           max_positions=2048),
    _plain("opt-30b", 48, 7168, 56, 28672, 50272, tied=True, linear_bias=True, learned_positions=2050,
           max_positions=2048),
    _plain("mpt-7b", 32, 4096, 32, 16384, 50432, tied=True, max_positions=2048),
]}

PREFIXES = ("meta-llama/", "qwen/", "mistralai/", "deepseek-ai/", "facebook/", "mosaicml/", "openai/", "zai-org/")
# the same architecture under another checkpoint's name (R1 and V3.1 are V3's layout; the -Instruct-2507 updates
# keep their model's)
ALIASES = {"deepseek-r1": "deepseek-v3", "deepseek-r1-0528": "deepseek-v3", "deepseek-v3-0324": "deepseek-v3",
           "deepseek-v3.1": "deepseek-v3", "llama-4-scout": "llama-4-scout-17b-16e",
           "qwen3-30b-a3b-2507": "qwen3-30b-a3b", "qwen3-235b-a22b-2507": "qwen3-235b-a22b",
           "qwen3-4b-2507": "qwen3-4b"}


def model(name_or_path: str) -> ModelSpec:
    """A catalog model (Hugging Face ids and -Instruct names accepted) or a config.json path."""
    path = Path(name_or_path)
    if path.is_dir() or path.name == "config.json":
        return model_from_config(path if path.name == "config.json" else path / "config.json")
    key = name_or_path.lower()
    for prefix in PREFIXES:
        key = key.removeprefix(prefix)
    key = key.replace("-instruct", "").replace("meta-", "").replace("-v0.1", "").replace("-hf", "")
    key = ALIASES.get(key, key)
    if key in MODELS:
        return MODELS[key]
    raise KeyError(f"unknown model {name_or_path!r}; known: {', '.join(MODELS)}, or a path to a config.json")


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


def _llama(path: Path, cfg: dict) -> ModelSpec:
    """Llama, Mistral, Qwen2/2.5/3, Qwen3-MoE, Mixtral, DeepSeek-V2/V3, gpt-oss, GLM-4.x, Gemma, Phi: one
    layout, each family's own names for the MoE fields; the dense layers of an MoE model (DeepSeek's and
    GLM's `first_k_dense_replace`, Qwen-MoE's `mlp_only_layers`) keep the dense FFN."""
    heads = cfg["num_attention_heads"]
    kind = cfg.get("model_type", "")
    experts = _first(cfg, EXPERTS) or 1
    dense = cfg.get("first_k_dense_replace") or len(cfg.get("mlp_only_layers") or [])
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
        sliding_window=cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None,
        max_positions=cfg.get("max_position_embeddings", 4096), checkpoint_dtype=checkpoint_dtype(cfg),
    )
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3): low-rank q and kv projections
        h, rope, nope = cfg["hidden_size"], cfg.get("qk_rope_head_dim", 64), cfg.get("qk_nope_head_dim", 128)
        rank, q_rank, v = cfg["kv_lora_rank"], cfg.get("q_lora_rank"), cfg.get("v_head_dim", 128)
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        attn = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
        spec = replace(spec, mla_kv_dim=rank + rope, head_dim=nope + rope, attn_params=attn)
    return spec
