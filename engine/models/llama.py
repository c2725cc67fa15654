"""The Llama family (Llama 2/3, Qwen2, Mistral) over a flat batch of tokens.

Prefill chunks of several sequences and single-token decodes share one forward: rows are tokens, and
the attention metadata says which rows belong to which sequence. q/k/v and gate/up are each fused into
one matmul at load time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention.metadata import AttentionMetadata
from engine.kernels import cpu_kernels
from engine.layers.attention import Attention
from engine.layers.norm import RMSNorm
from engine.layers.rotary import RotaryEmbedding
from engine.loader import ModelConfig


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary: RotaryEmbedding, backend: str) -> None:
        super().__init__()
        self.h, self.kvh, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, (self.h + 2 * self.kvh) * self.d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.h * self.d, cfg.hidden_size, bias=False)
        self.rotary = rotary
        self.attn = Attention(self.h, self.kvh, self.d, backend)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).split([self.h * self.d, self.kvh * self.d, self.kvh * self.d], dim=-1)
        q, k = self.rotary(positions, q.view(-1, self.h, self.d), k.view(-1, self.kvh, self.d))
        out = self.attn(q, k, v.view(-1, self.kvh, self.d), meta)
        return self.o_proj(out.flatten(1))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)
        self.cpu_kernel = False  # set by the model runner where engine.kernels.cpu_kernels is built

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cpu_kernel:
            return self.down_proj(cpu_kernels.silu_and_mul(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary: RotaryEmbedding, backend: str) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg, rotary, backend)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor,
                meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's MLP output, the residual stream before it): the next norm adds the two."""
        if residual is None:
            residual, x = x, self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x, residual = self.post_attention_layernorm(self.self_attn(x, positions, meta), residual)
        return self.mlp(x), residual


class LlamaForCausalLM(nn.Module):
    # checkpoint name -> (fused parameter, shard index)
    packed = {
        "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, cfg: ModelConfig, backend: str = "torch") -> None:
        super().__init__()
        self.cfg = cfg
        rotary = RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, rotary, backend) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                logits_rows: torch.Tensor) -> torch.Tensor:
        """Logits (float32) for the rows in `logits_rows` only."""
        x, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            x, residual = layer(x, residual, positions, meta)
        x, _ = self.norm(x[logits_rows], residual[logits_rows])
        return self.lm_head(x).float()

    def attention_layers(self) -> list[Attention]:
        return [layer.self_attn.attn for layer in self.layers]

    def shard_sizes(self, fused: str) -> list[int]:
        cfg = self.cfg
        if fused == "qkv_proj":
            return [cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim]
        return [cfg.intermediate_size, cfg.intermediate_size]

    def checkpoint_to_param(self, name: str) -> tuple[str, int | None]:
        """Map a HF tensor name to (our parameter name, shard index or None)."""
        name = name.removeprefix("model.")
        if name.endswith(("self_attn.k_scale", "self_attn.v_scale")):
            return name.replace("self_attn.", "self_attn.attn."), None
        for part, (fused, shard) in self.packed.items():
            if f".{part}." in name:
                return name.replace(f".{part}.", f".{fused}."), shard
        return name, None
