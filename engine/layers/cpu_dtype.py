"""`--dtype auto`: bf16 where this machine computes it faster than fp32, fp32 elsewhere (bf16 on CUDA).

On a CPU, bf16 runs on AMX tiles or AVX512-BF16 (Intel Sapphire Rapids and later, AMD Zen 4). On an AMX Xeon a
bf16 GEMM of the small model's shapes is 3-5x fp32's at the 64-256 rows serving batches, and the KV cache in
bf16 halves the bytes a decode reads; without those instructions torch emulates bf16 and it is 3-6x slower
(an AVX2 EPYC: ../shared/reference/peers.md). So the flags decide whether bf16 is a candidate, and timing the
model's own widest linear at load decides whether it wins, each dtype through the path the engine would take
in it (oneDNN packed or F.linear, whichever is faster), as the oneDNN choice itself is timed. A model too narrow
to gain (the tiny one) stays fp32.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.kernels.kernel_timing import time_ratios

BF16_FLAGS = ("amx_bf16", "avx512_bf16")
MARGIN = 1.2  # bf16 must beat fp32 by this much: it also costs accuracy
MIN_HIDDEN = 256  # narrower models are call-overhead bound: bf16 cannot win by the margin (tiny: 1.08x)
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
    """bf16 against fp32, each through the path the engine would then take (oneDNN packed or F.linear, itself
    chosen by timing), as the geometric mean of per-batch-size ratios: summed, the 256-row timing alone decides."""
    from engine.layers.onednn_linear import ROWS, OneDNNLinear, packed_is_faster

    fp32 = nn.Linear(hidden, intermediate, bias=False)
    bf16 = nn.Linear(hidden, intermediate, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        bf16.weight.copy_(fp32.weight)
    paths = [OneDNNLinear(layer) if packed_is_faster(layer)[0] else (lambda x, w=layer.weight: F.linear(x, w))
             for layer in (bf16, fp32)]
    inputs = [torch.randn(rows, hidden) for rows in ROWS]
    with torch.inference_mode():
        mean, ratios = time_ratios(paths[0], paths[1], [x.bfloat16() for x in inputs], inputs)
    chosen = "bfloat16" if mean * MARGIN < 1 else "float32"
    return chosen, (f"auto: {chosen} (bfloat16 takes {mean:.2f}x float32's time on [{intermediate}x{hidden}], "
                    f"geometric mean of medians at {' / '.join(map(str, ROWS))} rows: "
                    f"{' / '.join(f'{r:.2f}' for r in ratios)}; {', '.join(isa)})")
