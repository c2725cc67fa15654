"""Paged attention over a flat mixed batch, in the spirit of vLLM's unified Triton kernel.

Prefill chunks (with or without cached context) and single-token decodes go through one kernel. A
program takes a tile of up to BLOCK_Q consecutive queries of one sequence, for one KV head, and packs
those queries × the GQA group into BLOCK_M rows (tl.dot needs at least 16). It walks the sequence's
K/V blocks through the block table with an online softmax (running max, running sum, rescaled
accumulator), masking keys after each query's position. K/V are read from the cache only: the step's
own K/V were written there first. An fp8 cache is dequantized with the layer's scales on load.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def attend_block(q, k_cache_ptr, v_cache_ptr, offs, kv_mask, allowed, k_scale_ptr, v_scale_ptr, scale, m_i, l_i,
                 acc, FP8: tl.constexpr):
    """One K/V block of the online softmax: load (dequantizing fp8), score the `allowed` pairs, rescale the
    running max, sum and accumulator. Shared by the unified and the split-KV decode kernels."""
    k = tl.load(k_cache_ptr + offs, mask=kv_mask, other=0.0)
    v = tl.load(v_cache_ptr + offs, mask=kv_mask, other=0.0)
    if FP8:
        k = k.to(tl.float32) * tl.load(k_scale_ptr)
        v = v.to(tl.float32) * tl.load(v_scale_ptr)
    s = tl.dot(q, tl.trans(k.to(q.dtype))).to(tl.float32) * scale
    s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype)).to(tl.float32)
    return m_new, l_i, acc


@triton.jit
def _unified_attention(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_tables_ptr, seq_lens_ptr, cu_q_ptr, tile_seq_ptr,
    tile_start_ptr, k_scale_ptr, v_scale_ptr, scale,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_cs, stride_ch, stride_bt,
    G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, FP8: tl.constexpr,
):
    tile = tl.program_id(0)
    kvh = tl.program_id(1)
    seq = tl.load(tile_seq_ptr + tile)
    q_start = tl.load(tile_start_ptr + tile)
    q_begin = tl.load(cu_q_ptr + seq)
    q_end = tl.load(cu_q_ptr + seq + 1)
    ctx = tl.load(seq_lens_ptr + seq)

    rows = tl.arange(0, BLOCK_M)
    tok = q_start + rows // G
    head = kvh * G + rows % G
    valid = (rows // G < BLOCK_Q) & (tok < q_end)
    qpos = ctx - (q_end - q_begin) + (tok - q_begin)
    d = tl.arange(0, HEAD_DIM_P)
    dmask = d < HEAD_DIM
    q = tl.load(q_ptr + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=valid[:, None] & dmask[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_P], dtype=tl.float32)
    last = tl.minimum(q_start + BLOCK_Q, q_end) - 1
    kv_len = ctx - (q_end - q_begin) + (last - q_begin) + 1
    slots = tl.arange(0, BLOCK_SIZE)
    for j in range(0, tl.cdiv(kv_len, BLOCK_SIZE)):
        block = tl.load(block_tables_ptr + seq * stride_bt + j)
        kpos = j * BLOCK_SIZE + slots
        offs = block * stride_cb + slots[:, None] * stride_cs + kvh * stride_ch + d[None, :]
        kv_mask = (kpos < kv_len)[:, None] & dmask[None, :]
        allowed = (kpos[None, :] <= qpos[:, None]) & valid[:, None]
        m_i, l_i, acc = attend_block(q, k_cache_ptr, v_cache_ptr, offs, kv_mask, allowed, k_scale_ptr, v_scale_ptr,
                                     scale, m_i, l_i, acc, FP8)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(out_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=valid[:, None] & dmask[None, :])


def tile_shape(group: int) -> tuple[int, int]:
    """(BLOCK_M rows, BLOCK_Q queries) for a GQA group of `group` query heads per KV head."""
    block_m = max(16, triton.next_power_of_2(group))
    return block_m, block_m // group


def tiles(cu_q: list[int], block_q: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence, first query row) of every tile: ceil(query_len / BLOCK_Q) tiles per sequence."""
    seqs, starts = [], []
    for i in range(len(cu_q) - 1):
        for start in range(cu_q[i], cu_q[i + 1], block_q):
            seqs.append(i)
            starts.append(start)
    return (torch.tensor(seqs, dtype=torch.int32, device=device),
            torch.tensor(starts, dtype=torch.int32, device=device))


def unified_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, cu_seqlens_q: torch.Tensor,
                      tile_seq: torch.Tensor, tile_start: torch.Tensor, scale: float,
                      k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """q/out [T, H, D]; caches [num_blocks, block_size, KVH, D]; block_tables [B, W] int32."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    group = num_heads // num_kv_heads
    block_m, block_q = tile_shape(group)
    fp8 = k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    _unified_attention[(len(tile_seq), num_kv_heads)](
        q, k_cache, v_cache, out, block_tables, seq_lens, cu_seqlens_q, tile_seq, tile_start, k_scale, v_scale,
        scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), block_tables.stride(0),
        G=group, BLOCK_M=block_m, BLOCK_Q=block_q, BLOCK_SIZE=block_size, HEAD_DIM=head_dim,
        HEAD_DIM_P=max(16, triton.next_power_of_2(head_dim)), FP8=fp8,
    )
