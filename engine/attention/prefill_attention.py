"""CPU prefill attention, two ways: torch's SDPA, or query tiles of plain matmuls where that is faster.

torch's CPU flash-attention kernel reached 44-126 GFLOP/s in bf16 on an AMD Zen 5 for prompts of 128-2,048 tokens,
at most a seventh of what the same machine's bf16 GEMM does. Cut into tiles of `TILE` queries, with the query heads
that share a KV head stacked (GQA), each tile is two large GEMMs, scores @ K^T over every key it may see and
probabilities @ V, plus one softmax; only the diagonal block needs a mask. Each tile holds its whole score row, so
nothing is rescaled as in flash attention, at the cost of [KVH, G x TILE, keys] scores in memory (8 MiB for 2,048
keys in fp32; long contexts take fewer queries a tile, under SCORE_BYTES). Where it is faster is timed at load
against SDPA on the model's own head shape, at prompt lengths from a short chat turn to a long document, as every
other kernel choice here is: the engine takes it for prefills whose context is at least the shortest length from
which it keeps winning.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from engine.kernels import cpu_kernels
from engine.kernels.kernel_timing import time_ratios

TILE = 128
SCORE_BYTES = 64 * 2**20  # a tile's scores at most: 128 queries of 32 heads over 32k bf16 keys would take 256 MiB
LENGTHS = (128, 256, 512, 1024, 2048)
_DECIDED: dict[tuple, tuple[int | None, str]] = {}  # one timing per head shape and dtype per process: engines agree


def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q: [n, H, D] for the last n of the ctx positions in k/v: [ctx, KVH, D], causal -> [n, H, D]."""
    n, heads, dim = q.shape
    ctx, kv_heads = k.shape[0], k.shape[1]
    group = heads // kv_heads
    k_t = k.to(q.dtype).permute(1, 2, 0)  # [KVH, D, ctx]
    v_h = v.to(q.dtype).transpose(0, 1)  # [KVH, ctx, D]
    out = torch.empty_like(q)
    offset = ctx - n
    tile_rows = max(16, min(TILE, SCORE_BYTES // (heads * ctx * q.element_size())))
    fused = q.device.type == "cpu" and cpu_kernels.loaded()
    for s in range(0, n, tile_rows):
        e = min(s + tile_rows, n)
        rows, keys = e - s, offset + e
        tile = (q[s:e] * scale).view(rows, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(kv_heads, -1, dim)
        scores = torch.matmul(tile, k_t[:, :, :keys])
        if fused:  # one pass where masked_fill_ + softmax take two, each over the whole tile (4x on a bf16 tile)
            cpu_kernels.causal_softmax_(scores.view(kv_heads * group, rows, keys), offset + s)
            probs = scores
        else:
            scores = scores.view(kv_heads, group, rows, keys)
            scores[..., offset + s:keys].masked_fill_(_future(q.device)[:rows, :rows], float("-inf"))
            probs = torch.softmax(scores, dim=-1).view(kv_heads, group * rows, keys)
        out[s:e] = torch.matmul(probs, v_h[:, :keys]).view(kv_heads, group, rows, dim).permute(2, 0, 1, 3) \
            .reshape(rows, heads, dim)
    return out


@functools.cache
def _future(device: torch.device) -> torch.Tensor:
    """Which keys of a tile's own diagonal block lie after each query (made once, not per tile and layer)."""
    return torch.ones(TILE, TILE, dtype=torch.bool, device=device).triu_(1)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """The same through torch's SDPA. The leading batch dimension matters: without it torch's CPU SDPA takes the
    math path, 3-5x slower than its flash kernel for prompts of 500-1500 tokens."""
    ctx, n = k.shape[0], q.shape[0]
    pos = torch.arange(ctx, device=q.device)
    mask = None if ctx == n else pos[None, :] <= pos[ctx - n:, None]
    k, v = k.to(q.dtype).transpose(0, 1)[None], v.to(q.dtype).transpose(0, 1)[None]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k, v, attn_mask=mask, is_causal=mask is None,
                                         scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


def tiled_from(heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> tuple[int | None, str]:
    """The shortest context from which `tiled` beats `sdpa` on this head shape and dtype (None: at no length),
    and the figures behind it. Tiled wins at long contexts, where its two GEMMs are large, and can lose on a short
    prompt, where it is a dozen small ops against one call; so the rule is the longest run of winning lengths
    ending at the longest one timed, and lengths are timed from the longest down until one loses (bf16 on a CPU
    without bf16 instructions: its matmuls are emulated, the 2,048-token tiles alone take 3.4 s a call on an
    AVX2 EPYC, and timing every length added 35 s to start-up for a choice the longest one settles)."""
    key = (heads, kv_heads, head_dim, dtype)
    if key not in _DECIDED:
        split = [heads, kv_heads, kv_heads]
        scale = head_dim**-0.5
        start, timed = None, []
        for n in reversed(LENGTHS):
            x = torch.randn(n, heads + 2 * kv_heads, head_dim, dtype=dtype)
            with torch.inference_mode():
                ratio, _ = time_ratios(lambda x: tiled(*x.split(split, 1), scale),
                                       lambda x: sdpa(*x.split(split, 1), scale), [x])
            timed.insert(0, (n, ratio))
            if ratio >= 1:
                break
            start = n
        _DECIDED[key] = (start, f"tiled takes {' / '.join(f'{r:.2f}' for _, r in timed)}x SDPA's time at "
                         f"{' / '.join(str(n) for n, _ in timed)} tokens ({heads} heads / {kv_heads} KV heads of "
                         f"{head_dim}, {str(dtype).removeprefix('torch.')}, medians)")
    return _DECIDED[key]
