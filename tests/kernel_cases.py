"""Random paged-attention batches shared by the kernel tests and scripts/gpu_check.py (no pytest needed)."""

from __future__ import annotations

import random

import torch

from engine.attention.metadata import AttentionMetadata

BLOCK = 16
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def make_batch(specs: list[tuple[int, int]], heads: int, kv_heads: int, dim: int, dtype: torch.dtype,
               seed: int, num_blocks: int = 40, device: str = "cpu"):
    """specs: (cached tokens before the step, tokens this step) per sequence, with random block tables."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    free = list(range(num_blocks))
    rng.shuffle(free)
    tables, positions = [], []
    for cached, new in specs:
        need = -(-(cached + new) // BLOCK)
        tables.append([free.pop() for _ in range(need)])
        positions.append(list(range(cached, cached + new)))
    width = max(len(t) for t in tables)
    table = torch.zeros(len(specs), width, dtype=torch.int32)
    for i, t in enumerate(tables):
        table[i, : len(t)] = torch.tensor(t)
    slots = [tables[i][p // BLOCK] * BLOCK + p % BLOCK for i, pos in enumerate(positions) for p in pos]
    query_lens = [n for _, n in specs]
    context_lens = [c + n for c, n in specs]
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    decode = [i for i, n in enumerate(query_lens) if n == 1]
    meta = AttentionMetadata(
        query_lens=query_lens, context_lens=context_lens, cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(context_lens, dtype=torch.int32), block_tables=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64), cu_q=cu, decode_seqs=torch.tensor(decode, dtype=torch.long),
        decode_token_rows=torch.tensor([cu[i] for i in decode], dtype=torch.long),
        prefill_seqs=[i for i, n in enumerate(query_lens) if n != 1])
    tokens = cu[-1]
    q = torch.randn(tokens, heads, dim, generator=g).to(dtype)
    k = torch.randn(tokens, kv_heads, dim, generator=g).to(dtype)
    v = torch.randn(tokens, kv_heads, dim, generator=g).to(dtype)
    k_cache = torch.randn(num_blocks, BLOCK, kv_heads, dim, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks, BLOCK, kv_heads, dim, generator=g).to(dtype)
    if device != "cpu":
        meta = to_device(meta, device)
        q, k, v, k_cache, v_cache = (t.to(device) for t in (q, k, v, k_cache, v_cache))
    return q, k, v, k_cache, v_cache, meta


def to_device(meta: AttentionMetadata, device: str) -> AttentionMetadata:
    for name in ("cu_seqlens_q", "seq_lens", "block_tables", "slot_mapping", "decode_seqs", "decode_token_rows"):
        setattr(meta, name, getattr(meta, name).to(device))
    return meta


MIXED = [(0, 21), (35, 9), (40, 1), (17, 1), (15, 18), (0, 1), (5, 1)]  # fresh prefill, chunks mid-block, decodes


