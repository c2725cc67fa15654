"""Serving-engine profiles: what differs between vLLM, SGLang, TensorRT-LLM and the bundled engine once the
GPU math is the same: default knobs, how a step is scheduled, fixed costs per step, per layer, per sequence
and per request, and how the KV pool is carved out of GPU memory.

Figures and where they come from (planning.md §3 and §9): vLLM's overheads are BLIS's trained-physics fit on
H100 (~126 µs/step, ~32 µs/layer, ~4 µs/request in the batch, API α₀ ≈ 15.6 ms/request). SGLang's and
TensorRT-LLM's are smaller (CUDA graphs and an overlap scheduler; a C++ runtime) and are priors chosen with
rows A-C in view, as are the bundled engine's (a Python loop: more per step). `llmbench plan validate` shows
how far each lands from the published rows; calibrate on your own sweep (`plan --results`) to replace them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmbench.plan.scheduler import EngineShape

GiB = 2**30


@dataclass(frozen=True)
class EngineProfile:
    name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool  # mix decodes and prefill chunks in one step (else a step is one or the other)
    step_overhead: float  # seconds per step
    layer_overhead: float  # seconds per layer per step (kernel launches)
    seq_overhead: float  # seconds per sequence in the step
    request_overhead: float  # seconds added to TTFT and E2E (HTTP, tokenization, first detokenization)
    kv_accounting: str  # "profile": u·M − W − activation peak − other; "static": u·M − W − other; "free": u·(M − W − A − other)
    other_memory: float  # bytes per GPU outside weights, activations and KV (CUDA context, allocator, graphs)
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    scheduler_steps: int = 1  # vLLM 0.6 multi-step scheduling: new requests join every k steps
    reserve_output: bool = False  # admit a request only with KV for its whole output (no preemption)
    prefix_caching: bool = True
    mfu_scale: float = 1.0  # the engine's kernels against the GPU family's prior (TensorRT-LLM's FP8 GEMMs)
    mbu_scale: float = 1.0

    def shape(self, kv_tokens: int, prefix_hit_rate: float = 0.0) -> EngineShape:
        """The simulator's view of this engine with a KV pool of `kv_tokens`."""
        return EngineShape(self.max_num_seqs, self.max_num_batched_tokens, kv_tokens, self.block_size,
                           prefix_hit_rate if self.prefix_caching else 0.0, self.request_overhead,
                           self.chunked_prefill, self.scheduler_steps, self.reserve_output)

    def with_knobs(self, **knobs) -> EngineProfile:
        """The profile with the user's engine flags (None: keep the profile's default)."""
        return replace(self, **{k: v for k, v in knobs.items() if v is not None})


PROFILES = {
    "vllm": EngineProfile("vllm", 256, 8192, True, 126e-6, 32e-6, 4e-6, 15.6e-3, "profile", 0.13 * GiB),
    "sglang": EngineProfile("sglang", 1024, 8192, False, 60e-6, 12e-6, 2e-6, 3e-3, "static", 0.5 * GiB,
                            gpu_memory_utilization=0.88),
    "trtllm": EngineProfile("trtllm", 2048, 8192, True, 60e-6, 8e-6, 2e-6, 5e-3, "free", 0.5 * GiB,
                            reserve_output=True, mfu_scale=1.3, mbu_scale=1.1),
    "llmbench": EngineProfile("llmbench", 256, 2048, True, 1.5e-3, 32e-6, 10e-6, 5e-3, "profile", 0.5 * GiB),
}


def profile(name: str) -> EngineProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(PROFILES)}") from None
