"""`--dtype auto`: bf16 where this machine computes it faster than fp32, fp32 elsewhere (bf16 on CUDA).

On a CPU, bf16 runs on AMX tiles or AVX512-BF16 (Intel Sapphire Rapids and later, AMD Zen 4). On an AMX Xeon a
bf16 GEMM of the small model's shapes is 3-5x fp32's at the 64-256 rows serving batches, and the KV cache in
bf16 halves the bytes a decode reads; without those instructions torch emulates bf16 and it is 3-6x slower
(an AVX2 EPYC: ../shared/reference/peers.md). So the flags decide whether bf16 is a candidate, and timing the
model's own widest linear at load decides whether it wins, against the fp32 path the engine would take
(oneDNN packed or F.linear, whichever is faster), as the oneDNN choice itself is timed. A model too narrow
to gain (the tiny one) stays fp32.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.kernel_timing import median_seconds

BF16_FLAGS = ("amx_bf16", "avx512_bf16")
MARGIN = 1.2  # bf16 must beat fp32 by this much: it also costs accuracy
MIN_HIDDEN = 256  # narrower models are call-overhead bound: bf16 cannot win by the margin (tiny: 1.08x)
ROWS = (1, 64, 256)
_DECIDED: dict[tuple[int, int], tuple[str, str]] = {}  # one timing per shape per process: engines agree


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def resolve(requested: str, device: torch.device, hidden: int, intermediate: int,
            quantized: bool = False) -> tuple[str, str]:
    """The dtype to run in and why (said in /version and the start-up line)."""
    if requested != "auto":
        return requested, "as asked (--dtype)"
    if device.type == "cuda":
        return "bfloat16", "auto on CUDA: bfloat16"
    if quantized:
        return "float32", "auto: float32 (quantized linears dequantize to, or run packed against, float32)"
    isa = [f for f in BF16_FLAGS if f in cpu_flags()]
    if not isa:
        return "float32", "auto: this CPU has no bf16 instructions (AMX-BF16 or AVX512-BF16), so float32"
    if hidden < MIN_HIDDEN:
        return "float32", f"auto: float32 (hidden size {hidden} is too narrow for bf16 to win)"
    key = (intermediate, hidden)
    if key not in _DECIDED:
        _DECIDED[key] = _timed(hidden, intermediate, isa)
    return _DECIDED[key]


def _timed(hidden: int, intermediate: int, isa: list[str]) -> tuple[str, str]:
    from engine.layers.onednn_linear import OneDNNLinear

    linear = nn.Linear(hidden, intermediate, bias=False)
    weight_bf16 = linear.weight.detach().bfloat16()
    fp32_paths = [lambda x: F.linear(x, linear.weight)]
    if torch.backends.mkldnn.is_available():
        fp32_paths.append(OneDNNLinear(linear))
    with torch.inference_mode():
        fp32 = min(sum(median_seconds(fn, torch.randn(rows, hidden)) for rows in ROWS) for fn in fp32_paths)
        bf16 = sum(median_seconds(lambda x: F.linear(x, weight_bf16), torch.randn(rows, hidden).bfloat16())
                   for rows in ROWS)
    chosen = "bfloat16" if bf16 * MARGIN < fp32 else "float32"
    return chosen, (f"auto: {chosen} (bfloat16 {bf16 * 1e3:.3f} ms vs float32 {fp32 * 1e3:.3f} ms on "
                    f"[{intermediate}x{hidden}], 1 + 64 + 256 rows, medians; {', '.join(isa)})")
