"""What the planner knows of a model: its shape (layers, widths, heads, experts, MLA), and the counts it derives
from it: parameters, those a step reads, KV bytes a token."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


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
    sliding_layers: int = 0  # layers attending to the last `sliding_window` tokens only (gpt-oss: every other)
    max_positions: int = 4096
    checkpoint_dtype: str = "bf16"  # the weights as the published checkpoint ships them: the default --weight-dtype
    fp8_blocks: bool = False  # FP8 weights scaled per 128 x 128 block, not per tensor (tail term `block FP8`)

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
        moe_layers = self.moe_layers
        norms = 2 * h * (2 if self.linear_bias else 1)
        per_dense = attn + dense_mlp + norms
        per_moe = attn + moe_mlp + norms
        return self.embedding_params + (self.layers - moe_layers) * per_dense + moe_layers * per_moe + h

    @cached_property
    def kv_groups(self) -> tuple[int, int]:
        """vLLM V1's hybrid KV cache groups, (full-attention, sliding-window): the layers of each attention type in
        groups of one size, the smaller type's count, or the larger's where that is under 1.5x it
        (vllm/v1/core/kv_cache_utils.py, `_get_kv_cache_groups_uniform_page_size`); (1, 0) when all attend in full."""
        full, sliding = self.layers - self.sliding_layers, self.sliding_layers
        if not sliding or not full:
            return (1, 0) if not sliding else (0, 1)
        size = max(full, sliding) if max(full, sliding) < 1.5 * min(full, sliding) else min(full, sliding)
        return -(-full // size), -(-sliding // size)

    @cached_property
    def routed_expert_params(self) -> float:
        """Parameters of the routed experts (0 for a dense model): the part a step reads only where routed."""
        if self.experts <= 1:
            return 0.0
        return self.moe_layers * self.experts * self.ffn_matrices * self.hidden * (self.moe_ffn or self.ffn)

    @property
    def dense_gemms(self) -> int:
        """GEMM launches a step outside the routed experts: QKV, output, gate-up and down a dense layer; QKV and
        output a MoE layer."""
        return 4 * (self.layers - self.moe_layers) + 2 * self.moe_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts > 1 else 0

    @cached_property
    def routed_active_params(self) -> float:
        """Parameters of the routed experts one token runs through (top_k of them in every MoE layer)."""
        if self.experts <= 1:
            return 0.0
        return self.moe_layers * min(self.top_k, self.experts) * self.ffn_matrices * self.hidden * (
            self.moe_ffn or self.ffn)

    def routed_read(self, tokens: float) -> float:
        """Routed-expert parameters a step of `tokens` tokens reads: the expected share hit by tokens·top_k
        routings, 1 - (1 - k/E)^tokens (nearly all of them by 8 tokens)."""
        if self.experts <= 1:
            return 0.0
        hit = 1.0 - (1.0 - min(self.top_k, self.experts) / self.experts) ** max(tokens, 1.0)
        return min(self.routed_expert_params, self.params) * hit

    @cached_property
    def unrouted_params(self) -> float:
        """Parameters every step reads: all but the routed experts (a step reads those its tokens hit, `routed_read`)."""
        return self.params - min(self.routed_expert_params, self.params)

    def kv_bytes_per_token(self, kv_bytes: float, tp: int = 1) -> float:
        """Per GPU: 2·L·max(n_kv/TP, 1)·d_h·b (GQA heads replicated when n_kv < TP); MLA: L·(rank+rope)·b."""
        if self.mla_kv_dim:
            return self.layers * self.mla_kv_dim * kv_bytes
        return 2 * self.layers * max(self.kv_heads / tp, 1) * self.head_dim * kv_bytes
