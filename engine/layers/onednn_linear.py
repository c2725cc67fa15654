"""fp32 and bf16 linear layers through oneDNN with weights packed once at load (torch's own mkldnn ops).

On a CPU with AVX-512 a pre-packed oneDNN GEMM runs about 2.3x faster than F.linear's default path at
the batch sizes serving uses (measured here: ~500 vs ~210 GFLOP/s for 16-2048 rows), because the weight
is laid out for the kernel once instead of on every call. In bf16 on an AMX Xeon F.linear re-lays the
weight into AMX tiles on every call: packed once, the small model's decode GEMMs ran 1.2-2.3x faster at
1-256 rows (vLLM-CPU packs its bf16 weights for oneDNN the same way). Whether it wins is timed at load on
the model's own largest layer in its own dtype, so a CPU where it does not keeps F.linear.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from engine.kernels.kernel_timing import time_ratios
from engine.layers import gemv_linear

log = logging.getLogger(__name__)
PACKED_DTYPES = (torch.float32, torch.bfloat16)
ROWS = (1, 16, 64, 256)  # a decode tail to a full batch
_DECIDED: dict[tuple[int, int, torch.dtype], tuple[bool, str]] = {}  # one timing per shape per process: engines agree


class OneDNNLinear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)


def packed_is_faster(linear: nn.Linear) -> tuple[bool, str]:
    """Whether OneDNNLinear beats F.linear on this layer's shape and dtype here, and the figures behind it
    (timed once per shape and dtype per process)."""
    dtype = linear.weight.dtype
    key = (linear.out_features, linear.in_features, dtype)
    if key in _DECIDED:
        return _DECIDED[key]
    if not torch.backends.mkldnn.is_available():
        return False, "oneDNN not available"
    try:
        packed = OneDNNLinear(linear)
        with torch.inference_mode():
            mean, ratios = time_ratios(packed, lambda x: F.linear(x, linear.weight),
                                       [torch.randn(rows, linear.in_features, dtype=dtype) for rows in ROWS])
    except (RuntimeError, NotImplementedError) as err:
        return False, f"oneDNN packing failed: {str(err).splitlines()[0]}"
    _DECIDED[key] = (mean < 1, f"oneDNN takes {mean:.2f}x F.linear's time on [{linear.out_features}x"
                     f"{linear.in_features}] {str(dtype).removeprefix('torch.')} (geometric mean of medians at "
                     f"{' / '.join(map(str, ROWS))} rows: {' / '.join(f'{r:.2f}' for r in ratios)})")
    return _DECIDED[key]


def pack_model(model: nn.Module, force: bool = False, few_rows: str = "off") -> str:
    """Swap every plain fp32 or bf16 nn.Linear (not a tied LM head) for OneDNNLinear if that is faster here
    (or `force`), and put the few-row kernel of gemv_linear.py in front of every linear (`few_rows`: "auto" up to
    the row count where it is timed faster, "on" up to its largest timed count, "off"); return what was decided
    and why."""
    if not torch.backends.mkldnn.is_available():
        return "F.linear (oneDNN not available)"
    tied = getattr(getattr(model, "cfg", None), "tie_word_embeddings", False)
    every = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is nn.Linear and child.weight.dtype in PACKED_DTYPES]
    linears = [entry for entry in every if not (entry[1] == "lm_head" and tied)]
    if not every:
        return "F.linear (no fp32 or bf16 linear layers)"
    probe = max((child for *_, child in linears if child is not getattr(model, "lm_head", None)),
                key=lambda m: m.weight.numel(), default=every[0][2])
    faster, why = packed_is_faster(probe) if linears else (False, "only a tied LM head")
    path, inner = f"F.linear ({why})", {}
    if faster or force:
        try:
            inner = {id(child): OneDNNLinear(child) for *_, child in linears}
            path = f"oneDNN packed ({why})"
        except (RuntimeError, NotImplementedError) as err:  # bf16 without AVX512BW or AVX-NE-CONVERT (an AVX2 EPYC)
            path = f"F.linear (oneDNN cannot pack these weights here: {str(err).splitlines()[0]})"
    rows, note = gemv_linear.choose_rows([(inner.get(id(child), child), child) for *_, child in every], few_rows)
    for parent, name, child in every:
        layer = inner.get(id(child), child)
        if rows and gemv_linear.supports(child):
            layer = gemv_linear.GemvLinear(layer, child.weight, child.bias, rows)
        if layer is not child:
            setattr(parent, name, layer)
    return path + note
