"""Split-KV decode attention for long contexts (two stages, after LightLLM / SGLang / vLLM).

With one query per sequence a decode batch gives few programs; for long contexts each sequence's K/V is
cut into NUM_SPLITS ranges that run in parallel. Stage 1 writes, per (sequence, head, split), the
partial output normalised within the split and its log-sum-exp; stage 2 merges the splits weighted by
exp(lse − max lse).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.paged_attention import attend_block


@triton.jit
def _decode_split(
    q_ptr, k_cache_ptr, v_cache_ptr, part_ptr, lse_ptr, block_tables_ptr, seq_lens_ptr, rows_ptr, seqs_ptr,
    k_scale_ptr, v_scale_ptr, scale,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt, stride_pb, stride_ph, stride_ps,
    stride_lb, stride_lh,
    G: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEAD_DIM_P: tl.constexpr, NUM_SPLITS: tl.constexpr, FP8: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    row = tl.load(rows_ptr + b)
    seq = tl.load(seqs_ptr + b)
    ctx = tl.load(seq_lens_ptr + seq)
    per_split = tl.cdiv(tl.cdiv(ctx, NUM_SPLITS), BLOCK_SIZE) * BLOCK_SIZE
    start = split * per_split
    end = tl.minimum(start + per_split, ctx)

    h = tl.arange(0, BLOCK_H)
    hmask = h < G
    head = kvh * G + h
    d = tl.arange(0, HEAD_DIM_P)
    dmask = d < HEAD_DIM
    q = tl.load(q_ptr + row * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=hmask[:, None] & dmask[None, :], other=0.0)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM_P], dtype=tl.float32)
    slots = tl.arange(0, BLOCK_SIZE)
    for j in range(start // BLOCK_SIZE, tl.cdiv(end, BLOCK_SIZE)):
        block = tl.load(block_tables_ptr + seq * stride_bt + j)
        kpos = j * BLOCK_SIZE + slots
        offs = block * stride_cb + slots[:, None] * stride_cs + kvh * stride_ch + d[None, :]
        kv_mask = (kpos < end)[:, None] & dmask[None, :]
        allowed = (kpos >= start)[None, :] & (kpos < end)[None, :] & hmask[:, None]
        m_i, l_i, acc = attend_block(q, k_cache_ptr, v_cache_ptr, offs, kv_mask, allowed, k_scale_ptr, v_scale_ptr,
                                     scale, m_i, l_i, acc, FP8)
    part = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log(tl.where(l_i == 0.0, 1.0, l_i)))
    tl.store(part_ptr + b * stride_pb + head[:, None] * stride_ph + split * stride_ps + d[None, :], part,
             mask=hmask[:, None] & dmask[None, :])
    tl.store(lse_ptr + b * stride_lb + head * stride_lh + split, lse, mask=hmask)


@triton.jit
def _decode_merge(part_ptr, lse_ptr, out_ptr, rows_ptr, stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
                  stride_ot, stride_oh, HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr,
                  NUM_SPLITS: tl.constexpr, SPLITS_P: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    row = tl.load(rows_ptr + b)
    sp = tl.arange(0, SPLITS_P)
    lse = tl.load(lse_ptr + b * stride_lb + head * stride_lh + sp, mask=sp < NUM_SPLITS, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, axis=0))
    weight = weight / tl.sum(weight, axis=0)
    d = tl.arange(0, HEAD_DIM_P)
    parts = tl.load(part_ptr + b * stride_pb + head * stride_ph + sp[:, None] * stride_ps + d[None, :],
                    mask=(sp < NUM_SPLITS)[:, None] & (d < HEAD_DIM)[None, :], other=0.0)
    out = tl.sum(parts * weight[:, None], axis=0)
    tl.store(out_ptr + row * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


def split_kv_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, rows: torch.Tensor, seqs: torch.Tensor,
                    scale: float, k_scale: torch.Tensor, v_scale: torch.Tensor, num_splits: int = 8) -> None:
    """Attention for the decode rows `rows` (query rows of sequences `seqs`), written into out[rows]."""
    batch = len(rows)
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    group = num_heads // num_kv_heads
    head_dim_p = max(16, triton.next_power_of_2(head_dim))
    part = torch.empty(batch, num_heads, num_splits, head_dim_p, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, num_heads, num_splits, dtype=torch.float32, device=q.device)
    fp8 = k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    _decode_split[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, part, lse, block_tables, seq_lens, rows, seqs, k_scale, v_scale, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        G=group, BLOCK_H=max(16, triton.next_power_of_2(group)), BLOCK_SIZE=block_size, HEAD_DIM=head_dim,
        HEAD_DIM_P=head_dim_p, NUM_SPLITS=num_splits, FP8=fp8,
    )
    _decode_merge[(batch, num_heads)](
        part, lse, out, rows, part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        out.stride(0), out.stride(1), HEAD_DIM=head_dim, HEAD_DIM_P=head_dim_p, NUM_SPLITS=num_splits,
        SPLITS_P=triton.next_power_of_2(num_splits),
    )
