"""Write this step's K/V into the paged cache by slot mapping (vLLM's reshape_and_cache).

One program per token: it copies the token's [KVH, D] keys and values to slot s, that is block s // bs,
offset s % bs. Padding tokens carry slot −1 and are skipped. An fp8 cache stores x / scale.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, k_scale_ptr, v_scale_ptr,
              stride_kt, stride_vt, ROW: tl.constexpr, ROW_P: tl.constexpr, FP8: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t)
    if slot >= 0:
        offs = tl.arange(0, ROW_P)
        mask = offs < ROW
        k = tl.load(k_ptr + t * stride_kt + offs, mask=mask)
        v = tl.load(v_ptr + t * stride_vt + offs, mask=mask)
        if FP8:
            k = k.to(tl.float32) / tl.load(k_scale_ptr)
            v = v.to(tl.float32) / tl.load(v_scale_ptr)
        tl.store(k_cache_ptr + slot * ROW + offs, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + slot * ROW + offs, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
             v_scale: torch.Tensor | None = None) -> None:
    """k/v [T, KVH, D]; caches [num_blocks, block_size, KVH, D] (contiguous)."""
    tokens = k.shape[0]
    if tokens == 0:
        return
    k, v = k.reshape(tokens, -1), v.reshape(tokens, -1)
    row = k.shape[1]
    fp8 = k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    one = torch.ones((), dtype=torch.float32, device=k.device)
    _write_kv[(tokens,)](k, v, k_cache, v_cache, slot_mapping, k_scale if fp8 else one, v_scale if fp8 else one,
                         k.stride(0), v.stride(0), ROW=row, ROW_P=triton.next_power_of_2(row), FP8=fp8)
