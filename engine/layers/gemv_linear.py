"""Linear layers for CPU steps of few rows: the C++ kernel of `cpu_gemv.cpp` up to a row count timed at load,
the layer's own path (oneDNN or F.linear) above it.

A decode step at low load, or the drain of a batch, multiplies one to a few rows by every weight: it is bound by
reading them. oneDNN's packed GEMM read the small model's bf16 weights at ~13 GB/s at 1-4 rows on a Zen 4 that
reads ~32 GB/s; a layout read in order streams them at ~30 GB/s (benchmarks/README.md). The layout is a second
copy of each weight, so it is made only where the linear weights are a small share of the machine's memory, and
only where it wins: timed against the layer's own path at 1, 2, 4, ... rows, it takes the rows up to the first
count where it loses, and times no larger count (they cost the most and decide nothing: 9 of the 11 s it took to
load the small model on a 2-core Zen 3).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.kernels import cpu_kernels
from engine.kernels.kernel_timing import time_ratios

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # a decode tail to a full batch of decodes
TILES = 4  # vectors of output columns per block, as in cpu_gemv.cpp
MEMORY_SHARE = 1 / 8  # the second copy only while all linear weights take at most this share of the RAM
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
_DECIDED: dict[tuple, tuple[int, str]] = {}  # one timing per model shape and path per process: engines agree


def width(dtype: torch.dtype) -> int:
    """Output columns per vector of the kernel for `dtype` on this machine (0: none)."""
    return cpu_kernels.gemv_width(dtype) if dtype in (torch.float32, torch.bfloat16) else 0


def pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] -> blocks of TILES x width output columns, each block's K weights in order (bf16 in pairs of K, as
    vdpbf16ps reads them); N padded with zeros to whole blocks."""
    n, k = weight.shape
    w = width(weight.dtype)
    cols = TILES * w
    padded = F.pad(weight.detach(), (0, 0, 0, -n % cols)).contiguous()
    if weight.dtype == torch.bfloat16:
        return padded.view(-1, TILES, w, k // 2, 2).permute(0, 3, 1, 2, 4).contiguous()
    return padded.view(-1, TILES, w, k).permute(0, 3, 1, 2).contiguous()


def supports(linear: nn.Linear) -> bool:
    return width(linear.weight.dtype) > 0 and (linear.weight.dtype != torch.bfloat16 or linear.in_features % 2 == 0)


class GemvLinear(nn.Module):
    """`inner` (the layer's own path) with the few-row kernel for steps of at most `rows` rows."""

    def __init__(self, inner: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None, rows: int) -> None:
        super().__init__()
        self.inner, self.rows = inner, rows
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.register_buffer("gemv_weight", pack(weight))
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] > self.rows:
            return self.inner(x)
        y = cpu_kernels.gemv(flat.contiguous(), self.gemv_weight, self.out_features)
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


def rows_limit(layers: list[tuple[nn.Module, nn.Linear]]) -> tuple[int, str]:
    """Up to how many rows the kernel beats each layer's own path (`(path, linear)` pairs), timed over all the
    layers in turn as a step runs them (their weights together outgrow the caches, as in a step; one layer
    alone is timed from L3), and the figures. 0: not faster at one row."""
    dtype, device = layers[0][1].weight.dtype, layers[0][1].weight.device
    key = (dtype, tuple((type(path).__name__, tuple(linear.weight.shape)) for path, linear in layers))
    if key not in _DECIDED:
        _DECIDED[key] = _time_rows(layers, dtype, device)
    return _DECIDED[key]


def _time_rows(layers: list[tuple[nn.Module, nn.Linear]], dtype: torch.dtype, device: torch.device
               ) -> tuple[int, str]:
    probes = [(GemvLinear(path, linear.weight, linear.bias, max(ROWS)), path, linear) for path, linear in layers]
    inputs = {rows: {m.in_features: torch.randn(rows, m.in_features, dtype=dtype, device=device) for _, m in layers}
              for rows in ROWS}

    def gemv_step(x: torch.Tensor) -> torch.Tensor:
        return [gemv(inputs[len(x)][linear.in_features]) for gemv, _, linear in probes][-1]

    def own_step(x: torch.Tensor) -> torch.Tensor:
        return [own(inputs[len(x)][linear.in_features]) for _, own, linear in probes][-1]

    limit, ratios = 0, []
    with torch.inference_mode():
        for rows in ROWS:  # in order, up to the first loss: the larger counts cost the most and decide nothing
            ratios += time_ratios(gemv_step, own_step, [torch.empty(rows, 0, device=device)])[1]
            if ratios[-1] >= 1:
                break
            limit = rows
    dtype_name = str(dtype).removeprefix("torch.")
    return limit, (f"C++ GEMV takes {' / '.join(f'{r:.2f}' for r in ratios)}x their time at "
                   f"{' / '.join(map(str, ROWS[:len(ratios)]))} rows over the {len(layers)} layers, {dtype_name}")


def choose_rows(layers: list[tuple[nn.Module, nn.Linear]], mode: str) -> tuple[int, str]:
    """The row count up to which the kernel replaces each layer's own path (`(path, linear)` pairs; 0: nowhere)
    and why, as a note for `linear_path`. `mode`: "auto" timed, "on" up to the largest count timed, "off"."""
    if mode == "off":
        return 0, ""
    layers = [(path, linear) for path, linear in layers if supports(linear)]
    if not layers:
        return 0, "; no few-row kernel for this dtype here"
    fits, share = memory_allows([linear for _, linear in layers])
    if not fits:
        return 0, f"; no few-row kernel: its copy of the weights would double {share}"
    weights, cache = sum(m.weight.numel() * m.weight.element_size() for _, m in layers), last_level_cache()
    if mode == "auto" and weights <= cache:
        return 0, (f"; no few-row kernel: the {weights / 2**20:.1f} MiB of linear weights fit the "
                   f"{cache / 2**20:.0f} MiB last-level cache, so a step does not stream them")
    if mode == "on":
        return max(ROWS), f"; steps of <= {max(ROWS)} rows: C++ GEMV (as asked; {share})"
    rows, why = rows_limit(layers)
    if not rows:
        return 0, f"; no few-row kernel ({why})"
    return rows, f"; steps of <= {rows} rows: C++ GEMV, a second copy of the weights ({share}; {why})"


def last_level_cache() -> int:
    """Bytes of the largest CPU cache (0 where the kernel does not say). Weights that fit it are not read from
    memory, and reading them in order from memory is all the kernel saves: on the tiny model (4.3 MiB) it timed
    0.99x F.linear's time at one row, and the kink it put in the step cost at its row limit took the planner's
    self-check P99 TPOT error from -16..-27 % to -32..-56 %."""
    sizes = []
    for entry in CPU_CACHES.glob("index*/size"):
        text = entry.read_text().strip()
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=0)


def memory_allows(linears: list[nn.Linear]) -> tuple[bool, str]:
    total = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    share = f"{total / 2**20:.1f} MiB of linear weights, {total / ram:.1%} of {ram / 2**30:.0f} GiB RAM"
    return total <= MEMORY_SHARE * ram, share
