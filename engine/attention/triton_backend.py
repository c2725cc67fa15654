"""The Triton attention backend: the same two calls as engine.attention.torch_backend, on the paged
cache directly (no gathering of pages into contiguous tensors).

Mixed batches go through the unified kernel. A batch of decodes only whose longest context reaches
SPLIT_KV_MIN_CONTEXT takes the split-KV decode kernel, which keeps the GPU busy when there are few
sequences and long contexts.
"""

from __future__ import annotations

import torch

from engine.attention.metadata import AttentionMetadata
from engine.kernels.cache_write import write_kv
from engine.kernels.decode_attention import split_kv_decode
from engine.kernels.paged_attention import tile_shape, tiles, unified_attention

SPLIT_KV_MIN_CONTEXT = 2048


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
             v_scale: torch.Tensor | None = None) -> None:
    write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           meta: AttentionMetadata, scale: float, k_scale: torch.Tensor | None = None,
           v_scale: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(q)
    one = torch.ones((), dtype=torch.float32, device=q.device)
    k_scale = one if k_scale is None else k_scale
    v_scale = one if v_scale is None else v_scale
    decode_only = not meta.prefill_seqs
    if decode_only and max(meta.context_lens) >= SPLIT_KV_MIN_CONTEXT:
        split_kv_decode(q, k_cache, v_cache, out, meta.block_tables, meta.seq_lens, meta.decode_token_rows,
                        meta.decode_seqs, scale, k_scale, v_scale)
        return out
    group = q.shape[1] // k_cache.shape[2]
    key = ("tiles", group)
    if key not in meta.cache:  # built once per step, shared by every layer
        meta.cache[key] = tiles(meta.cu_q, tile_shape(group)[1], q.device)
    tile_seq, tile_start = meta.cache[key]
    unified_attention(q, k_cache, v_cache, out, meta.block_tables, meta.seq_lens, meta.cu_seqlens_q, tile_seq,
                      tile_start, scale, k_scale, v_scale)
    return out


def unified_attention_only(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                           scale: float) -> torch.Tensor:
    """The unified kernel whatever the batch (for timing it beside the split-KV kernel)."""
    out = torch.empty_like(q)
    group = q.shape[1] // k_cache.shape[2]
    tile_seq, tile_start = tiles(meta.cu_q, tile_shape(group)[1], q.device)
    one = torch.ones((), dtype=torch.float32, device=q.device)
    unified_attention(q, k_cache, v_cache, out, meta.block_tables, meta.seq_lens, meta.cu_seqlens_q, tile_seq,
                      tile_start, scale, one, one)
    return out
