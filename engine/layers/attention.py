"""Paged attention: store this step's K/V by slot mapping, then attend through the block tables.

The model calls one `Attention` module per layer and never sees how K/V are laid out; the backend
(`torch` on the CPU, `triton` on CUDA) reads the paged cache through the same metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class AttentionMetadata:
    """Describes a flat batch: sequence i owns query rows cu_seqlens_q[i]:cu_seqlens_q[i+1]."""

    query_lens: list[int]
    context_lens: list[int]  # tokens in the cache after this step, per sequence
    cu_seqlens_q: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32, = context_lens
    block_tables: torch.Tensor  # [B, max_blocks] int32, padded with 0
    slot_mapping: torch.Tensor  # [T] int64, -1 = do not store
    cu_q: list[int]  # cu_seqlens_q on the host
    decode_seqs: torch.Tensor  # indices of sequences with one query token, batched together
    decode_token_rows: torch.Tensor  # their rows in the flat batch
    prefill_seqs: list[int]  # the others, attended one by one
    decode_kernel: str = "sdpa"  # torch backend on the CPU: "cpp" = the C++ paged decode kernel
    cache: dict = field(default_factory=dict)  # per-step values a backend derives once for all layers


class Attention(nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, backend: str = "torch") -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = head_dim**-0.5
        self.backend = get_backend(backend)
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)
        # fp8 KV: per-layer scales, from the checkpoint (k_scale/v_scale) or set on the first forward
        self.register_buffer("k_scale", torch.tensor(0.0))
        self.register_buffer("v_scale", torch.tensor(0.0))
        self.scale_constants: tuple[float, float] | None = None  # (K, V): scale = amax / constant

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KVH, D] -> [T, H, D]."""
        if self.scale_constants is not None:
            self.calibrate(k, v)
        if self.k_cache.numel():
            self.backend.store_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping, self.k_scale, self.v_scale)
        return self.backend.attend(q, k, v, self.k_cache, self.v_cache, meta, self.scale, self.k_scale,
                                   self.v_scale)

    def calibrate(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """vLLM's calculate_kv_scales: once, k_scale = amax|k| / 200 and v_scale = amax|v| / 100."""
        ck, cv = self.scale_constants
        tiny = torch.finfo(torch.float32).tiny
        self.k_scale.copy_((k.detach().abs().amax().float() / ck).clamp_min(tiny))
        self.v_scale.copy_((v.detach().abs().amax().float() / cv).clamp_min(tiny))
        self.scale_constants = None


def get_backend(name: str):
    if name == "torch":
        from engine.layers import torch_attention

        return torch_attention
    if name == "triton":
        from engine.kernels import triton_attention

        return triton_attention
    raise ValueError(f"unknown attention backend {name!r} (torch, triton)")
