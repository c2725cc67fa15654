"""Models the planner knows (planning.md §8, and the models published benchmarks run), and the lookup that also
takes any Hugging Face `config.json` of a supported layout (model_config.py reads it)."""

from __future__ import annotations

from dataclasses import dataclass
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
        from llmbench.plan.model_config import model_from_config

        return model_from_config(path if path.name == "config.json" else path / "config.json")
    key = name_or_path.lower()
    for prefix in PREFIXES:
        key = key.removeprefix(prefix)
    key = key.replace("-instruct", "").replace("meta-", "").replace("-v0.1", "").replace("-hf", "")
    key = ALIASES.get(key, key)
    if key in MODELS:
        return MODELS[key]
    raise KeyError(f"unknown model {name_or_path!r}; known: {', '.join(MODELS)}, or a path to a config.json")
