"""Weights, KV bytes and usable KV memory per replica (vLLM's budget: u·M − weights − activations − other)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmbench.plan.catalog import GPU, GiB, ModelSpec

# int8: per-channel scales are negligible; int4: one fp16 scale and one 4-bit zero per group of 128
BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.5 / 128}
OTHER_PER_GPU = 3.5 * GiB  # AIC systems/*.yaml other_mem: CUDA context, allocator slack, graphs
NCCL_PER_GPU = {1: 0.0, 2: 342e6, 4: 392e6, 8: 392e6}  # AIC NCCL budgets by TP degree


@dataclass(frozen=True)
class MemoryPlan:
    tp: int
    weights_per_gpu: float
    activation_per_gpu: float
    other_per_gpu: float
    kv_per_gpu: float  # usable for the KV cache, bytes
    kv_bytes_per_token: float  # per GPU
    kv_tokens: int  # capacity of the replica
    fits: bool

    def concurrent_requests(self, mean_tokens_per_request: float) -> int:
        return int(self.kv_tokens // max(mean_tokens_per_request, 1))


def weight_bytes(model: ModelSpec, weight_dtype: str) -> float:
    """Quantized formats keep embeddings and the LM head in bf16, as vLLM checkpoints do."""
    b = BYTES[weight_dtype]
    if b >= 2:
        return model.params * b
    return (model.params - model.embedding_params) * b + model.embedding_params * 2


def plan_memory(model: ModelSpec, gpu: GPU, tp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                utilization: float = 0.9, max_num_batched_tokens: int = 8192) -> MemoryPlan:
    weights = weight_bytes(model, weight_dtype) / tp
    activation = max_num_batched_tokens * (2 * model.ffn / tp + 4 * model.hidden) * 2  # bf16 peak of one step
    other = OTHER_PER_GPU + NCCL_PER_GPU.get(tp, 392e6)
    kv = utilization * gpu.memory - weights - activation - other
    per_token = model.kv_bytes_per_token(BYTES[kv_dtype], tp)
    tokens = int(max(kv, 0) // per_token) if kv > 0 else 0
    return MemoryPlan(tp, weights, activation, other, kv, per_token, tokens, kv > 0 and tokens > 0)


def smallest_tp(model: ModelSpec, gpu: GPU, min_tokens: int, **kwargs) -> MemoryPlan | None:
    """The smallest power-of-two TP (1..8) whose KV pool holds at least `min_tokens`."""
    for tp in (1, 2, 4, 8):
        if model.heads % tp:
            continue
        plan = plan_memory(model, gpu, tp, **kwargs)
        if plan.fits and plan.kv_tokens >= min_tokens:
            return plan
    return None


def describe_misfit(model: ModelSpec, gpu: GPU, min_tokens: int, **kwargs) -> str:
    plan = plan_memory(model, gpu, 8, **kwargs)
    return (f"{model.name} does not fit {gpu.name} at any TP up to 8: at TP8 each GPU holds "
            f"{plan.weights_per_gpu / GiB:.1f} GiB of weights + {plan.activation_per_gpu / GiB:.1f} GiB activations + "
            f"{plan.other_per_gpu / GiB:.1f} GiB other, leaving {plan.kv_per_gpu / GiB:.1f} GiB of the "
            f"{gpu.memory / GiB:.0f} GiB for KV ({plan.kv_tokens} tokens; needs {min_tokens}, one max-length request)")


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b))
