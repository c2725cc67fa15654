"""The attention layer: store this step's K/V by slot mapping, then attend through the block tables.

The model calls one `Attention` module per layer and never sees how K/V are laid out; the backend
(`engine.attention`: torch on the CPU, Triton on CUDA) reads the paged cache through the same metadata.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.attention import get_backend
from engine.attention.metadata import AttentionMetadata


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
