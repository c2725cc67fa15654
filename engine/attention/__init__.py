"""Attention backends side by side: `torch_backend` (CPU, and the oracle of every kernel test) and
`triton_backend` (CUDA), each with `store_kv` and `attend` over the same `AttentionMetadata`."""

from __future__ import annotations


def get_backend(name: str):
    """The backend module by name, imported on first use (Triton is not needed on the CPU)."""
    if name == "torch":
        from engine.attention import torch_backend

        return torch_backend
    if name == "triton":
        from engine.attention import triton_backend

        return triton_backend
    raise ValueError(f"unknown attention backend {name!r} (torch, triton)")
