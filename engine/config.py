"""Engine and sampling settings as small dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class EngineConfig:
    model: str | None = None  # folder of a HF checkpoint; None = the bundled `small` model
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    block_size: int = 16
    kv_cache_memory: int | None = 512 * 2**20  # bytes for the KV pool (CPU, or CUDA when set)
    gpu_memory_utilization: float = 0.9  # CUDA, when kv_cache_memory is None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # default: the checkpoint's max_position_embeddings
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    batching: Literal["continuous", "static"] = "continuous"
    kv_layout: Literal["paged", "contiguous"] = "paged"
    attention_backend: Literal["auto", "torch", "triton"] = "auto"
    enforce_eager: bool = False  # CUDA: no CUDA-graph capture of decode steps
    num_lookahead_slots: int = 0  # reserved per decode step for speculative tokens
    speculative_model: str | None = None  # a checkpoint folder sharing the tokenizer, or "ngram"
    num_speculative_tokens: int = 0  # k
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4
    speculative_disable_by_batch_size: int | None = None  # no speculation in steps with more sequences
    quantization: str | None = None  # int8 | int4 (at load) | awq | gptq (pre-quantized checkpoints)
    quantization_group_size: int = 128  # int4
    quantization_kernel: Literal["auto", "packed", "dense"] = "auto"  # auto: the faster on this machine
    cpu_linear: Literal["auto", "torch", "onednn"] = "auto"  # auto: oneDNN-packed fp32 linears when faster
    cpu_attention: Literal["auto", "sdpa", "cpp"] = "auto"  # CPU decodes; auto: the C++ paged kernel if it builds
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    k_scale_constant: float = 200.0  # fp8 KV scales computed on the first forward: amax / constant
    v_scale_constant: float = 100.0
    seed: int = 0
    stats_window: int = 4096  # per-step stats kept in a ring buffer

    def __post_init__(self) -> None:
        checks = [
            (self.block_size > 0, "block_size must be positive"),
            (self.max_num_seqs > 0, "max_num_seqs must be positive"),
            (self.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive"),
            (self.batching in ("continuous", "static"), f"unknown batching mode {self.batching!r}"),
            (self.kv_layout in ("paged", "contiguous"), f"unknown kv_layout {self.kv_layout!r}"),
            (self.dtype in ("float32", "bfloat16", "float16"), f"unsupported dtype {self.dtype!r}"),
            (0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization must be in (0, 1]"),
            (not self.speculative_model or 1 <= self.num_speculative_tokens <= 128,
             "speculative decoding needs num_speculative_tokens between 1 and 128"),
            (self.quantization in (None, "int8", "int4", "awq", "gptq"),
             f"unknown quantization {self.quantization!r} (int8, int4, awq, gptq)"),
            (self.quantization_group_size in (32, 64, 128, 256), "quantization_group_size must be 32, 64, 128 or 256"),
            (self.quantization_kernel in ("auto", "packed", "dense"),
             f"unknown quantization_kernel {self.quantization_kernel!r} (auto, packed, dense)"),
            (self.cpu_attention in ("auto", "sdpa", "cpp"),
             f"unknown cpu_attention {self.cpu_attention!r} (auto, sdpa, cpp)"),
            (self.kv_cache_dtype in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
             f"unknown kv_cache_dtype {self.kv_cache_dtype!r} (auto, fp8, fp8_e4m3, fp8_e5m2)"),
            (1 <= self.prompt_lookup_min <= self.prompt_lookup_max,
             "need 1 <= prompt_lookup_min <= prompt_lookup_max"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.speculative_model:
            self.num_lookahead_slots = max(self.num_lookahead_slots, self.num_speculative_tokens)


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1 = off
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = 16  # None = up to max_model_len
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # top-N logprobs per generated token

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        checks = [
            (self.n >= 1, "n must be at least 1"),
            (self.temperature >= 0, "temperature must be non-negative"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (self.top_k >= -1, "top_k must be -1, 0 or positive"),
            (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
            (self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be at least 1"),
            (self.min_tokens >= 0, "min_tokens must be non-negative"),
            (self.logprobs is None or self.logprobs >= 0, "logprobs must be non-negative"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
