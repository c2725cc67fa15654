"""RMSNorm, computed in float32 like the reference implementation (one C++ pass on the CPU when built).

Given the residual stream too, it first adds the branch output into it and returns both (vLLM's fused add +
norm): on the CPU that is one pass in place, where the add and the norm each read and write the activation."""

from __future__ import annotations

import torch
from torch import nn

from engine.kernels import cpu_kernels


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps
        self.cpu_kernel = False  # set by the model runner where engine.kernels.cpu_kernels is built

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """norm(x); with `residual`: (norm(x + residual), x + residual)."""
        if residual is None:
            return self._norm(x)
        if self.cpu_kernel and x.is_contiguous() and residual.is_contiguous():
            cpu_kernels.add_rms_norm_(x, residual, self.weight, self.eps)
            return x, residual
        residual = x + residual
        return self._norm(residual), residual

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.cpu_kernel:
            return cpu_kernels.rms_norm(x, self.weight, self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)
