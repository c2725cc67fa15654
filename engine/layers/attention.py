"""Paged attention: store this step's K/V by slot mapping, then attend through the block tables.

The model calls one `Attention` module per layer and never sees how K/V are laid out; the backend
(`torch` on the CPU, `triton` on CUDA) reads the paged cache through the same metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

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


class Attention(nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, backend: str = "torch") -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = head_dim**-0.5
        self.backend = get_backend(backend)
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KVH, D] -> [T, H, D]."""
        if self.k_cache.numel():
            self.backend.store_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        return self.backend.attend(q, k, v, self.k_cache, self.v_cache, meta, self.scale)


def get_backend(name: str):
    if name == "torch":
        from engine.layers import torch_attention

        return torch_attention
    if name == "triton":
        from engine.kernels import triton_attention

        return triton_attention
    raise ValueError(f"unknown attention backend {name!r} (torch, triton)")
