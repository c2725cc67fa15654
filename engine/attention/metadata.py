"""What an attention backend needs to know about a flat batch of prefill chunks and decodes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


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
    tiled_prefill_from: int | None = None  # torch backend on the CPU: prefills with this much context or more
    # take engine.attention.prefill_attention.tiled, the others SDPA
    cache: dict = field(default_factory=dict)  # per-step values a backend derives once for all layers
