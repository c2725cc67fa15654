"""Engine and sampling settings as small dataclasses.

Every engine setting is stated once, here: its type (a `Literal` lists the choices), default, help text and
bounds. `engine.serve` derives its command-line flags from these fields, and `__post_init__` checks every
value against the same bounds, so a flag, its check and its default cannot drift apart.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Literal

CPU_KV_AUTO_BYTES = 4 * 2**30  # kv_cache_memory "auto" on the CPU: vLLM's VLLM_CPU_KVCACHE_SPACE default


def setting(default, help: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
            cli: bool = True):
    """A field with what its flag and its check need: help text, inclusive bounds (`low_open`: low excluded)."""
    return field(default=default, metadata={"help": help, "low": low, "high": high, "low_open": low_open,
                                            "cli": cli})


def parse_bytes(text: str | int | None) -> int | None:
    """`512MiB`, `2GiB`, `1000000` -> bytes; `auto` (or None) -> None."""
    if text is None or isinstance(text, int):
        return text
    low = text.strip().lower()
    if low == "auto":
        return None
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    number, factor = low, 1
    for unit, size in units.items():
        if low.endswith(unit):
            number, factor = low[: -len(unit)], size
            break
    try:
        return int(float(number) * factor)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 512MiB, 2GiB, 1000000, auto)") from None


def format_bytes(n: int | None) -> str:
    if n is None:
        return "auto"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass
class EngineConfig:
    model: str | None = setting(None, "Local HF checkpoint folder (default: the bundled `llmbench-tiny` model).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting(
        "auto", "Weights, activations and the KV cache; auto: bfloat16 where this machine computes it faster "
                "(timed at load on a CPU with AMX or AVX512-BF16, always on CUDA), else float32.")
    device: str = setting("cpu", "cpu, cuda or cuda:N.")
    block_size: int = setting(16, "Tokens per KV block.", low=1)
    kv_cache_memory: int | None = setting(
        512 * 2**20, "KV pool size: bytes, or with KiB/MiB/GiB. 'auto': on CUDA what --gpu-memory-utilization "
        f"leaves after a profiling forward, on the CPU {format_bytes(CPU_KV_AUTO_BYTES)} (vLLM's CPU default).")
    gpu_memory_utilization: float = setting(0.9, "CUDA, with --kv-cache-memory auto: the fraction of the GPU "
                                                 "the engine may fill.", low=0, high=1, low_open=True)
    max_num_seqs: int = setting(256, "Sequences in one step.", low=1)
    max_num_batched_tokens: int = setting(2048, "Tokens in one step (the chunked-prefill budget).", low=1)
    max_model_len: int | None = setting(None, "Context length (default: the checkpoint's).", low=1)
    enable_chunked_prefill: bool = setting(True, "Split long prompts over steps to keep decodes flowing.")
    enable_prefix_caching: bool = setting(True, "Reuse the KV blocks of identical prompt prefixes.")
    batching: Literal["continuous", "static"] = setting("continuous", "static: admit a new batch only when "
                                                                      "the running one has finished.")
    kv_layout: Literal["paged", "contiguous"] = setting("paged", "contiguous: reserve max_model_len per "
                                                                 "sequence (the waste paging removes).")
    attention_backend: Literal["auto", "torch", "triton"] = setting("auto", "auto: triton on CUDA, torch "
                                                                            "on the CPU.")
    enforce_eager: bool = setting(False, "CUDA: do not capture decode steps in CUDA graphs.")
    num_lookahead_slots: int = setting(0, "Slots reserved per decode step for speculative tokens.", low=0,
                                       cli=False)
    speculative_model: str | None = setting(None, "Draft checkpoint folder sharing the target's tokenizer, or "
                                                  "'ngram' for prompt lookup.")
    num_speculative_tokens: int = setting(0, "k: tokens proposed per step.", low=0, high=128)
    prompt_lookup_min: int = setting(1, "ngram: shortest n-gram matched.", low=1)
    prompt_lookup_max: int = setting(4, "ngram: longest n-gram matched.", low=1)
    speculative_disable_by_batch_size: int | None = setting(None, "No speculation in steps with more sequences "
                                                                  "than this.", low=1)
    quantization: Literal["int8", "int4", "awq", "gptq"] | None = setting(
        None, "int8/int4: quantize at load; awq/gptq: a pre-quantized checkpoint (detected from config.json).")
    quantization_group_size: Literal[32, 64, 128, 256] = setting(128, "int4: weights per scale.")
    quantization_kernel: Literal["auto", "packed", "dense"] = setting(
        "auto", "auto: time torch's packed int kernels against dequantized fp matmul at load, keep the faster.")
    cpu_linear: Literal["auto", "torch", "onednn"] = setting(
        "auto", "auto: fp32/bf16 linears through oneDNN with pre-packed weights when that is faster on this CPU.")
    cpu_gemv: Literal["auto", "on", "off"] = setting(
        "auto", "auto: steps of few rows through a C++ kernel reading a second copy of the linear weights in order, "
                "up to the row count where it is timed faster at load (weights larger than the last-level cache and at "
                "most 1/8 of the RAM); on: up to 256 rows untimed.")
    cpu_attention: Literal["auto", "sdpa", "cpp"] = setting(
        "auto", "CPU decode attention: the C++ paged kernel (built on first use) or gather + SDPA.")
    cpu_prefill_attention: Literal["auto", "sdpa", "tiled"] = setting(
        "auto", "CPU prefill attention: query tiles of plain matmuls or torch's SDPA; auto: timed at load.")
    cpu_layers: Literal["auto", "torch", "cpp"] = setting(
        "auto", "CPU RMSNorm, rotary and SiLU * up: one C++ pass each (built on first use) or torch's ops.")
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = setting("auto", "fp8: e4m3, twice the "
                                                                                     "tokens of a 16-bit pool.")
    k_scale_constant: float = setting(200.0, "fp8 KV without checkpoint scales: k_scale = amax|k| / this, on the "
                                             "first forward.", low=0, low_open=True)
    v_scale_constant: float = setting(100.0, "... and v_scale = amax|v| / this.", low=0, low_open=True)
    seed: int = setting(0, "Seed of unseeded sampling.")
    stats_window: int = setting(4096, "Per-step statistics kept in a ring buffer.", low=1, cli=False)

    def __post_init__(self) -> None:
        self.kv_cache_memory = parse_bytes(self.kv_cache_memory)
        for f in fields(self):
            check(f.name, getattr(self, f.name))
        if self.speculative_model and not 1 <= self.num_speculative_tokens <= 128:
            raise ValueError("speculative decoding needs num_speculative_tokens between 1 and 128")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("need prompt_lookup_min <= prompt_lookup_max")
        if self.speculative_model:
            self.num_lookahead_slots = max(self.num_lookahead_slots, self.num_speculative_tokens)


@cache
def field_types() -> dict[str, tuple[type, tuple, bool]]:
    """Per EngineConfig field: (base type, Literal choices or (), whether None is allowed)."""
    out = {}
    for name, hint in typing.get_type_hints(EngineConfig).items():
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
            else (hint,)
        optional = type(None) in args
        (base,) = [a for a in args if a is not type(None)]
        choices = typing.get_args(base) if typing.get_origin(base) is Literal else ()
        out[name] = (type(choices[0]) if choices else base, choices, optional)
    return out


def check(name: str, value) -> None:
    """Raise ValueError when `value` is outside what EngineConfig's field `name` allows."""
    kind, choices, optional = field_types()[name]
    if value is None:
        if not optional:
            raise ValueError(f"{name} must be set")
        return
    if choices and value not in choices:
        raise ValueError(f"unknown {name} {value!r} ({', '.join(map(str, choices))})")
    meta = next(f.metadata for f in fields(EngineConfig) if f.name == name)
    low, high = meta.get("low"), meta.get("high")
    if low is not None and (value <= low if meta.get("low_open") else value < low):
        raise ValueError(f"{name} must be {'above' if meta.get('low_open') else 'at least'} {low:g}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be at most {high:g}, got {value}")


MAX_STOPS, MAX_STOP_CHARS, MAX_STOP_TOKEN_IDS, MAX_LOGPROBS = 64, 1024, 1024, 20


class ParamError(ValueError):
    """A sampling parameter out of bounds; `param` names it (the OpenAI error's `param`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


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
        """The one validation of a request's sampling parameters (the HTTP layer only checks JSON types and
        turns a `ParamError` into a 400 naming the field): a bad value fails its own request, never a step."""
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        finite = all(isinstance(v, int | float) and math.isfinite(v) for v in (self.temperature, self.top_p,
                                                                                 self.min_p))
        checks = [
            (finite, "temperature", "temperature, top_p and min_p must be finite numbers"),
            (self.n >= 1, "n", "n must be at least 1"),
            (not finite or self.temperature >= 0, "temperature", "temperature must be non-negative"),
            (not finite or 0 < self.top_p <= 1, "top_p", "top_p must be in (0, 1]"),
            (self.top_k >= -1, "top_k", "top_k must be -1, 0 or positive"),
            (not finite or 0 <= self.min_p <= 1, "min_p", "min_p must be in [0, 1]"),
            (self.max_tokens is None or self.max_tokens >= 1, "max_tokens", "max_tokens must be at least 1"),
            (self.min_tokens >= 0, "min_tokens", "min_tokens must be non-negative"),
            (self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS, "logprobs",
             f"logprobs must be between 0 and {MAX_LOGPROBS}"),
            (self.seed is None or 0 <= self.seed < 2**63, "seed", "seed must be in [0, 2**63)"),
            (isinstance(self.stop, list) and all(isinstance(x, str) for x in self.stop), "stop",
             "stop must be a string or a list of strings"),
            (len(self.stop) <= MAX_STOPS and all(len(x) <= MAX_STOP_CHARS for x in self.stop), "stop",
             f"at most {MAX_STOPS} stop strings of at most {MAX_STOP_CHARS} characters"),
            (isinstance(self.stop_token_ids, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                           for t in self.stop_token_ids), "stop_token_ids",
             "stop_token_ids must be a list of non-negative integers"),
            (len(self.stop_token_ids) <= MAX_STOP_TOKEN_IDS, "stop_token_ids",
             f"at most {MAX_STOP_TOKEN_IDS} stop_token_ids"),
        ]
        for ok, param, message in checks:
            if not ok:
                raise ParamError(param, message)

    @property
    def max_stop_len(self) -> int:
        return max((len(x) for x in self.stop), default=0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
