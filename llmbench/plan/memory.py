"""Weights, KV bytes and usable KV memory per replica, accounted as the engine does.

vLLM ("profile"): KV = u·M − weights − activation peak − other, the peak measured by a profiling run; it is
set by the sampler's fp32 logits of `max_num_seqs` rows (`vllm_activation_peak`), not by the batched tokens,
which reproduces planning.md row E and three other published peaks within 2 %. SGLang ("static"): KV = mem_fraction_static·M − weights − other; activations live in the rest.
TensorRT-LLM ("free"): KV = free_gpu_memory_fraction · (M − weights − activations − other).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmbench.plan.engines import PROFILES, EngineProfile
from llmbench.plan.gpus import GPU, GiB
from llmbench.plan.model_spec import ModelSpec

# int8: per-channel scales are negligible; int4: one fp16 scale and one 4-bit zero per group of 128
# MXFP4 (gpt-oss): 4-bit values and one 8-bit scale per 32 (OCP microscaling)
BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.5 / 128,
         "mxfp4": 4.25 / 8}
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
    """Quantized formats keep embeddings and the LM head in bf16, as vLLM checkpoints do; MXFP4 (gpt-oss) only
    the routed experts of an MoE model, the rest in bf16 as its checkpoints ship."""
    b = BYTES[weight_dtype]
    if b >= 2:
        return model.params * b
    quantized = model.params - model.embedding_params
    if weight_dtype == "mxfp4" and model.experts > 1:
        quantized = model.routed_expert_params
    return quantized * b + (model.params - quantized) * 2


SAMPLER_PEAK = 9.7  # fp32 logits of max_num_seqs rows, times the copies vLLM's sampler warm-up holds


def activation_peak(model: ModelSpec, tokens: int, tp: int) -> float:
    """A forward pass over `tokens`: fp32 logits of every token and the FFN's widest activations (the
    TensorRT-LLM engine build's estimate)."""
    ffn = (model.moe_ffn or model.ffn) if model.experts > 1 and not model.dense_layers else model.ffn
    widest = (2 if model.gated_ffn else 1) * ffn / tp + 4 * model.hidden
    return tokens * (4 * model.vocab + 2 * widest)


def vllm_activation_peak(model: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """vLLM's profiled peak: logits only for the sampled positions (max_num_seqs rows), in fp32, with the
    sampler's warm-up copies; the forward's own activations are smaller and freed before it. Fitted on row E
    (Llama-3.1-8B on H100, 1024 sequences: 4.76 GiB), it gives the other published peaks within 2%
    (llm-d-benchmark config_explorer: Qwen3-0.6B 5.56 GiB, Llama-70B TP2 4.84, gpt-oss-20b 7.38)."""
    return SAMPLER_PEAK * min(max_num_seqs, max_num_batched_tokens) * model.vocab * 4


def plan_memory(model: ModelSpec, gpu: GPU, tp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                engine: EngineProfile = PROFILES["vllm"]) -> MemoryPlan:
    weights = weight_bytes(model, weight_dtype) / tp
    acct = engine.kv_accounting
    activation = {"profile": lambda: vllm_activation_peak(model, engine.max_num_seqs, engine.max_num_batched_tokens),
                  "free": lambda: activation_peak(model, engine.max_num_batched_tokens, tp),
                  "static": lambda: 0.0}[acct]()
    other = engine.other_memory + NCCL_PER_GPU.get(tp, 392e6)
    u = engine.gpu_memory_utilization
    kv = u * (gpu.memory - weights - activation - other) if acct == "free" else u * gpu.memory - weights - activation - other
    per_token = model.kv_bytes_per_token(BYTES[kv_dtype], tp)
    tokens = int(kv // per_token) if kv > 0 else 0
    return MemoryPlan(tp, weights, activation, other, kv, per_token, tokens, kv > 0 and tokens > 0)


def vllm_kv_needed(model: ModelSpec, max_len: int, engine: EngineProfile) -> int:
    """KV tokens (a full-attention model's worth) vLLM asks for at start-up, one request of `max_len` tokens, or it
    refuses to start (V1 `check_enough_kv_cache_memory`, V0 `raise_if_cache_size_invalid`): a full-attention layer's
    blocks for all of them; under the hybrid manager (0.10+) a sliding-window layer's for at most its window less
    one and a step's tokens, plus one block (`SlidingWindowSpec.max_memory_usage_bytes`); from 0.29 one block of the
    pool more, its null block."""
    bs = engine.block_size
    full = -(-max_len // bs) * bs
    hybrid = engine.hybrid_kv and model.sliding_layers and model.sliding_window
    null = bs / (sum(model.kv_groups) if hybrid else 1) if engine.start_null_block else 0
    if not hybrid:
        return full + math.ceil(null)
    window = (-(-min(model.sliding_window - 1 + engine.max_num_batched_tokens, max_len) // bs) + 1) * bs
    sliding = model.sliding_layers
    return math.ceil(((model.layers - sliding) * full + sliding * window) / model.layers + null)


def vllm_longest_len(model: ModelSpec, kv_tokens: int, engine: EngineProfile, limit: int) -> int:
    """The longest --max-model-len (up to `limit`) vLLM starts with in a pool of `kv_tokens`, as its own estimate
    (`estimate_max_model_len`) bisects it; 0 when none does."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if vllm_kv_needed(model, mid, engine) <= kv_tokens else (low, mid - 1)
    return low


def smallest_tp(model: ModelSpec, gpu: GPU, min_tokens: int, **kwargs) -> MemoryPlan | None:
    """The smallest power-of-two TP (1..8) whose KV pool holds at least `min_tokens`."""
    for tp in (1, 2, 4, 8):
        if model.heads % tp:
            continue
        plan = plan_memory(model, gpu, tp, **kwargs)
        if plan.fits and plan.kv_tokens >= min_tokens:
            return plan
    return None


def describe_misfit(model: ModelSpec, gpu: GPU, min_tokens: int, tp: int = 8, **kwargs) -> str:
    plan = plan_memory(model, gpu, tp, **kwargs)
    return (f"{model.name} does not fit {gpu.name} at {'any TP up to 8' if tp == 8 else f'TP{tp}'}: at TP{tp} each "
            f"GPU holds {plan.weights_per_gpu / GiB:.1f} GiB of weights + {plan.activation_per_gpu / GiB:.1f} GiB "
            f"activations + {plan.other_per_gpu / GiB:.1f} GiB other, leaving {plan.kv_per_gpu / GiB:.1f} GiB of the "
            f"{gpu.memory / GiB:.0f} GiB for KV ({plan.kv_tokens} tokens; needs {min_tokens}, one max-length request)")


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b))
