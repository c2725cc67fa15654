"""Weight-only quantized linear layers: int8 per output channel, int4 in groups along the input.

Weights are held as integers with float scales (and, for int4, integer zero points): W = (q − z) · s.
How the matmul runs depends on the machine, and is chosen once per model by timing both on the model's
own shapes (`choose_path`):

- `packed`: torch's packed kernels (`_weight_int8pack_mm`, `_weight_int4pack_mm_for_cpu` on CPU,
  `_weight_int4pack_mm` on CUDA) with bf16 activations. On CPUs with AVX-512-BF16/AMX they beat an
  fp32 matmul; on AVX2-only CPUs they are several times slower (engine.md §6).
- `dense`: dequantize once at load into the compute dtype and use F.linear; the checkpoint and disk
  stay small, the memory at rest does not.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from engine.kernels.kernel_timing import time_ratios

log = logging.getLogger(__name__)
INNER_K_TILES = 2
ROWS = (1, 16, 64, 256)  # a decode tail to a full batch, each weighed the same (kernel_timing.time_ratios)
_DECIDED: dict[tuple, tuple[str, str]] = {}  # one timing per shape per process: engines agree


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per output row (gpt-fast): q int8 [N, K], scales [N]."""
    w = w.float()
    scales = (w.abs().amax(dim=1) / 127.5).clamp_min(torch.finfo(torch.float32).eps)
    q = (w / scales[:, None]).round().clamp(-128, 127).to(torch.int8)
    return q, scales


def quantize_int4(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric in groups of `group` inputs with integer zero points (AutoAWQ's rule):
    q uint8 [N, K] in 0..15, z [N, K/G], s [N, K/G]."""
    n, k = w.shape
    if k % group:
        raise ValueError(f"int4 needs the input size {k} to be a multiple of the group size {group}")
    g = w.float().reshape(n, k // group, group)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)
    s = ((hi - lo) / 15).clamp_min(1e-5)
    z = (-lo / s).round().clamp(0, 15)
    q = ((g / s[..., None]).round() + z[..., None]).clamp(0, 15)
    return q.reshape(n, k).to(torch.uint8), z, s


def dequantize(q: torch.Tensor, z: torch.Tensor | None, s: torch.Tensor) -> torch.Tensor:
    if z is None:
        return q.float() * s[:, None]
    group = q.shape[1] // z.shape[1]
    return (q.float() - z.repeat_interleave(group, dim=1)) * s.repeat_interleave(group, dim=1)


class QuantLinear(nn.Module):
    def __init__(self, q: torch.Tensor, z: torch.Tensor | None, s: torch.Tensor, bias: torch.Tensor | None,
                 dtype: torch.dtype, path: str = "dense", perm: torch.Tensor | None = None) -> None:
        """q [N, K]; int8 when z is None (s [N]), else int4 values with z/s [N, K/G]. `perm`: q's columns
        are inputs perm[0], perm[1], … (GPTQ desc_act)."""
        super().__init__()
        self.register_buffer("perm", perm)
        self.bits = 8 if z is None else 4
        self.out_features, self.in_features = q.shape
        self.group = None if z is None else q.shape[1] // z.shape[1]
        self.bias = None if bias is None else nn.Parameter(bias.to(dtype), requires_grad=False)
        self.path = path
        self.weight_bytes = q.numel() * self.bits // 8 + s.numel() * 2 + (0 if z is None else z.numel() // 2)
        if path == "dense":
            self.register_buffer("weight", dequantize(q, z, s).to(dtype))
            return
        self.act_dtype = torch.bfloat16
        if z is None:
            self.register_buffer("qweight", q.to(torch.int8))
            self.register_buffer("scales", s.to(self.act_dtype))
            return
        scales_and_zeros = torch.stack([s.T, ((8 - z) * s).T], dim=-1).contiguous()  # (q − z)s = (q − 8)s + (8 − z)s
        self.register_buffer("scales_and_zeros", scales_and_zeros.to(self.act_dtype))
        if q.device.type == "cuda":
            q8 = q.to(torch.uint8)
            packed = torch.ops.aten._convert_weight_to_int4pack((q8[:, ::2] << 4) | q8[:, 1::2], INNER_K_TILES)
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), INNER_K_TILES)
        self.register_buffer("qweight", packed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.perm is not None:
            x = x.index_select(-1, self.perm)
        if self.path == "dense":
            return F.linear(x, self.weight, self.bias)
        xa = x.to(self.act_dtype)
        if self.bits == 8:
            y = torch.ops.aten._weight_int8pack_mm(xa, self.qweight, self.scales)
        elif x.device.type == "cuda":
            y = torch.ops.aten._weight_int4pack_mm(xa, self.qweight, self.group, self.scales_and_zeros)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(xa, self.qweight, self.group, self.scales_and_zeros)
        y = y.to(x.dtype)
        return y if self.bias is None else y + self.bias


def choose_path(q: torch.Tensor, z: torch.Tensor | None, s: torch.Tensor, dtype: torch.dtype,
                device: torch.device) -> tuple[str, str]:
    """Time packed against dense on this layer's shape from a decode tail to a full batch; return the faster
    path and the figures behind the choice."""
    key = (tuple(q.shape), z is None, dtype, device.type)
    if key not in _DECIDED:
        _DECIDED[key] = _time_paths(q, z, s, dtype, device)
    return _DECIDED[key]


def _time_paths(q: torch.Tensor, z: torch.Tensor | None, s: torch.Tensor, dtype: torch.dtype,
                device: torch.device) -> tuple[str, str]:
    dense = QuantLinear(q, z, s, None, dtype, "dense")
    try:
        packed = QuantLinear(q, z, s, None, dtype, "packed")
        with torch.inference_mode():
            packed(torch.zeros(1, q.shape[1], dtype=dtype, device=device))
    except (RuntimeError, NotImplementedError) as err:
        return "dense", f"packed kernels unavailable here ({str(err).splitlines()[0]})"
    with torch.inference_mode():
        mean, ratios = time_ratios(packed, dense, [torch.randn(rows, q.shape[1], dtype=dtype, device=device)
                                                   for rows in ROWS])
    why = (f"packed takes {mean:.2f}x dense's time on [{q.shape[0]}x{q.shape[1]}] (geometric mean of medians at "
           f"{' / '.join(map(str, ROWS))} rows: {' / '.join(f'{r:.2f}' for r in ratios)}), cpu capability "
           f"{torch.backends.cpu.get_cpu_capability() if device.type == 'cpu' else device.type}")
    return ("packed" if mean < 1 else "dense"), why
