"""The CPU attention backend: gather pages, then scaled_dot_product_attention (or tiled matmuls for prefills).

Decodes go through the C++ paged kernel (`engine.kernels.cpu_kernels`) when it is built, and otherwise are
batched into SDPA calls over padded contexts; a prefill chunk with no cached context attends to its own
fresh K/V, and one continuing after cached context gathers that context first. The gather + SDPA path is
also the oracle the Triton and C++ kernels are tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention import prefill_attention
from engine.attention.metadata import AttentionMetadata
from engine.kernels import cpu_kernels
from engine.kernels.cpu_kernels import paged_decode

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
             v_scale: torch.Tensor | None = None) -> None:
    if cache_kernel(k, v, k_cache):
        cpu_kernels.store_kv_(k, v, k_cache, v_cache, slot_mapping)
        return
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        k, v, slot_mapping = k[keep], v[keep], slot_mapping[keep]
    for x, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        flat = cache.view(-1, *cache.shape[2:])
        if cache.dtype in FP8:  # stored as x / scale; index_copy_ has no fp8 kernel, the bytes are copied
            x = (x.float() / scale).to(cache.dtype)
            flat, x = flat.view(torch.uint8), x.view(torch.uint8)
        flat.index_copy_(0, slot_mapping, x.to(flat.dtype))


def cache_kernel(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether the C++ store applies: its library loaded, a cache of k's own dtype (not fp8), rows it can copy."""
    return (k.device.type == "cpu" and cpu_kernels.loaded() and k_cache.dtype == k.dtype == v.dtype
            and k.dim() == 3 and all(x.stride(2) == 1 and x.stride(1) == x.shape[2] for x in (k, v)))


def fp8_scales(cache: torch.Tensor, k_scale: torch.Tensor | None, v_scale: torch.Tensor | None
               ) -> tuple[float, float]:
    """An fp8 cache holds K/s_k and V/s_v. Rather than rescale every gathered page, s_k joins the softmax
    scale (q·(s_k k) = s_k (q·k)) and s_v multiplies the output (P (s_v V) = s_v (P V))."""
    if cache.dtype in FP8:
        return float(k_scale), float(v_scale)
    return 1.0, 1.0


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """[num_blocks, bs, KVH, D] through one block table -> [length, KVH, D]."""
    bs = cache.shape[1]
    return gather_blocks(cache, block_table[: (length + bs - 1) // bs]).flatten(0, 1)[:length]


def gather_blocks(cache: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """cache[tables] for a [..., n] table of block ids; index_select is several times faster on CPU."""
    rows = cache.view(cache.shape[0], -1).index_select(0, tables.reshape(-1).long())
    return rows.view(*tables.shape, *cache.shape[1:])


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           meta: AttentionMetadata, scale: float, k_scale: torch.Tensor | None = None,
           v_scale: torch.Tensor | None = None) -> torch.Tensor:
    ks, vs = fp8_scales(k_cache, k_scale, v_scale)
    if meta.decode_kernel == "cpp" and not meta.prefill_seqs:  # decodes only: rows are the sequences
        return _decode_cpp(q, k_cache, v_cache, meta, scale * ks, vs)
    out = torch.empty_like(q)
    cu = meta.cu_q
    if len(meta.decode_seqs):
        rows = meta.decode_token_rows
        if meta.decode_kernel == "cpp":
            out[rows] = _decode_cpp(q[rows], k_cache, v_cache, meta, scale * ks, vs)
        else:
            out[rows] = _decode(q[rows], k_cache, v_cache, meta, meta.decode_seqs, scale, ks, vs)
    for i in meta.prefill_seqs:
        s, e = cu[i], cu[i + 1]
        tiled = meta.tiled_prefill_from is not None and meta.context_lens[i] >= meta.tiled_prefill_from
        prefill = prefill_attention.tiled if tiled else prefill_attention.sdpa
        if meta.context_lens[i] == e - s:
            out[s:e] = prefill(q[s:e], k[s:e], v[s:e], scale)
        else:
            kk = gather_kv(k_cache, meta.block_tables[i], meta.context_lens[i])
            vv = gather_kv(v_cache, meta.block_tables[i], meta.context_lens[i])
            out[s:e] = prefill(q[s:e], kk, vv, scale * ks) * vs
    return out


DECODE_BUCKET = 32


def _decode_cpp(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                scale: float, v_scale: float) -> torch.Tensor:
    if "decode_tables" not in meta.cache:  # once per step, shared by every layer
        meta.cache["decode_tables"] = meta.block_tables[meta.decode_seqs].contiguous()
        meta.cache["decode_lens"] = meta.seq_lens[meta.decode_seqs].contiguous()
    return paged_decode(q, k_cache, v_cache, meta.cache["decode_tables"], meta.cache["decode_lens"], scale, v_scale)


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
            rows: torch.Tensor, scale: float, ks: float = 1.0, vs: float = 1.0) -> torch.Tensor:
    """One query per sequence: [B, H, D]. Sequences are sorted by context length and attended in buckets,
    so padding to the longest context stays small when lengths vary (ShareGPT)."""
    if len(rows) <= DECODE_BUCKET:
        return _decode_bucket(q, k_cache, v_cache, meta, rows, scale, ks, vs)
    order = torch.argsort(meta.seq_lens[rows])
    out = torch.empty_like(q)
    for start in range(0, len(rows), DECODE_BUCKET):
        idx = order[start : start + DECODE_BUCKET]
        out[idx] = _decode_bucket(q[idx], k_cache, v_cache, meta, rows[idx], scale, ks, vs)
    return out


def _decode_bucket(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                   rows: torch.Tensor, scale: float, ks: float = 1.0, vs: float = 1.0) -> torch.Tensor:
    lens = meta.seq_lens[rows]
    bs = k_cache.shape[1]
    max_len = int(lens.max())
    tables = meta.block_tables[rows, : (max_len + bs - 1) // bs]
    kk = gather_blocks(k_cache, tables).flatten(1, 2)  # [B, L, KVH, D]
    vv = gather_blocks(v_cache, tables).flatten(1, 2)
    mask = (torch.arange(kk.shape[1], device=kk.device)[None, :] < lens[:, None])[:, None, None, :]
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2), kk.transpose(1, 2).to(q.dtype), vv.transpose(1, 2).to(q.dtype),
        attn_mask=mask, scale=scale * ks, enable_gqa=True,
    )
    return out.squeeze(2) if vs == 1.0 else out.squeeze(2) * vs

