"""Serving-engine profiles: what differs between vLLM, SGLang, TensorRT-LLM and the bundled engine once the
GPU math is the same: default knobs, how a step is scheduled, fixed costs per step, per layer, per sequence
and per request, and how the KV pool is carved out of GPU memory.

Figures and where they come from (planning.md §3 and §9): vLLM's overheads are BLIS's trained-physics fit on
H100 (~126 µs/step, ~32 µs/layer, ~4 µs/request in the batch, API α₀ ≈ 15.6 ms/request) up to 0.7 (V0); its V1
engine (0.8 on) takes TensorRT-LLM's (`V1_COSTS`, chosen on the tuning half). SGLang's and
TensorRT-LLM's are smaller (CUDA graphs and an overlap scheduler; a C++ runtime) and are priors chosen with
rows A-C in view, as are the bundled engine's (a Python loop: more per step). `llmbench plan validate` shows
how far each lands from the published rows; calibrate on your own sweep (`plan --results`) to replace them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.ingest import INGEST_COST, INGEST_PARSE_SHARE
from llmbench.plan.model_spec import ModelSpec

GiB = 2**30
# Tail term `token drain`: the API server turns every streamed token of every running request into an SSE chunk on
# one event loop (detokenize, JSON, write), apart from the engine and in step with it, so a step of n sequences
# cannot be followed by the next sooner than n of these. Measured, not fitted: vLLM 0.32's API server on a 2-core
# AMD EPYC Zen 5, CPU seconds per output token beyond those per request over `vllm bench serve` bursts (200 x 64
# and 1,000 x 16 tokens; `benchmarks/front_end_cost.py`, two runs: medians 95 and 79 µs, their mean; the client's
# own 55-63 µs are less). No other engine's front end was measured; theirs are Python event loops too and take
# this figure as their prior.
STREAM_TOKEN_COST = 87e-6
# Tail term `expert kernels`, measured, not fitted on serving rows: AIConfigurator's H100 SXM kernel database
# (ai-dynamo/aiconfigurator 095f58a5, kernels timed under CUDA-graph replay), each engine's fused MoE kernels and
# its dense GEMMs fitted as latency = a x roofline + c (`benchmarks/kernel_database.py`): an MoE layer's routed
# experts (route, sort tokens by expert, two grouped GEMMs, combine) cost their roofline x a_moe / a_dense plus
# c_moe - 2 c_dense per MoE layer a step.
# Tail term `fp8 GEMMs`, measured the same way: each engine's per-tensor FP8 GEMMs against its bf16 GEMMs on H100,
# those whose weights stream from HBM (64 MB or more), each roofline bound fitted apart: the FP8 GEMMs' FLOPs cost
# a_flops_fp8 / a_flops_bf16 (the H200's tables: x1.34-1.41); their weight reads and fixed time are `weight reads`'.
# Tail term `weight reads`, measured the same way: each engine's GEMMs of decode shape (m <= 16, FLOPs a few per
# cent of their time) whose weights stream from HBM, fitted as latency = bytes / (f x bandwidth) + c per weight
# dtype (H100; the H200's tables: f within 4 %): a dense GEMM reads its weights at f of the GPU's bandwidth, not
# the family's MBU (0.60), and costs c a GEMM. TensorRT-LLM's are measured and not applied (FP8 FLOPs x1.25;
# weight reads bf16 0.854 / 4.9 µs, fp8 0.845 / 14.6 µs): its speed is the tuning-chosen `mfu_scale` and
# `mbu_scale`, and with the kernels' values on top its tuning rows ran slow (objective 4.48 -> 5.24 for the FP8
# factor, -> 4.59 for the weight reads); vLLM's and SGLang's had nothing but the family prior.
# Tail term `block FP8`, measured the same way: checkpoints whose FP8 weights are scaled per 128 x 128 block
# (DeepSeek's, Qwen's -FP8) run other kernels than per-tensor FP8: dense GEMMs (weights of 64 MB or more) at
# FLOPs x fb of bf16's and decode-shaped reads at their own share and fixed cost (vLLM's take 36.6 µs a GEMM: its
# activations are quantized per token group before every GEMM); routed experts at bytes x eb and FLOPs x ef of the
# dense GEMMs' efficiency (balanced routing, as `expert kernels`), plus c_moe - 2 c_dense a MoE layer.
# TensorRT-LLM's dense figures (FLOPs x1.60, reads 0.888 / 9.9 µs) are measured and not applied, as above.
# `expert kernels` on Ampere (A100s), measured the same way on AIConfigurator's A100 SXM tables (vLLM 0.14.0, SGLang
# 0.5.10, TensorRT-LLM 1.0.0; MFU 0.65 / MBU 0.76): SGLang's balanced routing directly; vLLM's and TensorRT-LLM's
# tables timed only skewed routing (power law 1.2), so their factor is that fit's x SGLang's balanced / skewed ratio
# on the A100 (1.153; on the H100, where all three timed both, 1.082 / 1.093 / 1.060) and their seconds a MoE layer
# the skewed fit's (a negative one 0). Every expert dtype takes them (block FP8 is Hopper's; FP8 and MXFP4 experts
# run weight-only kernels there, as bf16's figure stands for them on Hopper).


@dataclass(frozen=True)
class Gemms:
    """One weight format's dense GEMMs as timed on Hopper: FLOPs against bf16's share of the roofline (`fp8 GEMMs`),
    decode-shaped weight reads' share of the HBM bandwidth (0: the MBU prior) and seconds a GEMM (`weight reads`)."""

    flops: float = 1.0
    read: float = 0.0
    fixed: float = 0.0


@dataclass(frozen=True)
class Experts:
    """Routed experts' fused MoE kernels against the roofline: their bytes' and FLOPs' factors and seconds a MoE
    layer a step (tail term `expert kernels`)."""

    bytes: float = 1.0
    flops: float = 1.0
    layer_overhead: float = 0.0


@dataclass(frozen=True)
class Kernels:
    """An engine's kernels as measured: dense GEMMs per weight format, routed experts per FP8 scaling."""

    bf16: Gemms = Gemms()
    fp8: Gemms = Gemms()
    fp8_block: Gemms = Gemms()  # FP8 scaled per 128 x 128 block (tail term `block FP8`)
    experts: Experts = Experts()
    block_experts: Experts = Experts()
    ampere_experts: Experts = Experts()  # routed experts as timed on the A100

    def gemms(self, weight_dtype: str, block: bool = False) -> Gemms:
        if weight_dtype == "fp8":
            return self.fp8_block if block else self.fp8
        return self.bf16 if weight_dtype in ("bf16", "fp16") else Gemms()

    def routed(self, block: bool = False, family: str = "hopper") -> Experts:
        if family == "ampere":
            return self.ampere_experts
        return self.block_experts if block else self.experts


KERNELS = {
    "vllm": Kernels(Gemms(1.0, 0.878, 3.7e-6), Gemms(1.62, 0.860, 9.7e-6), Gemms(1.40, 1.071, 36.6e-6),
                    Experts(1.16, 1.16, 23.0e-6), Experts(1.06, 2.18, 31.5e-6), Experts(1.55, 1.55, 2.2e-6)),
    "sglang": Kernels(Gemms(1.0, 0.854, 4.0e-6), Gemms(1.48, 0.828, 7.3e-6), Gemms(1.31, 0.843, 6.7e-6),
                      Experts(1.18, 1.18, 11.9e-6), Experts(1.01, 1.85, 17.7e-6), Experts(1.32, 1.32, 15.0e-6)),
    "trtllm": Kernels(experts=Experts(1.12, 1.12, 26.9e-6), block_experts=Experts(1.12, 2.09, 38.9e-6),
                      ampere_experts=Experts(1.44, 1.44, 0.0)),
}


# vLLM's fixed costs up to 0.7 (V0), and wherever V0 runs later (VLLM_USE_V1=0): BLIS's fit
V0_COSTS = {"step_overhead": 126e-6, "layer_overhead": 32e-6, "seq_overhead": 4e-6, "request_overhead": 15.6e-3}


@dataclass(frozen=True)
class EngineProfile:
    name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool  # split prompts into chunks that fill a step's token budget beside the decodes
    step_overhead: float  # seconds per step
    layer_overhead: float  # seconds per layer per step (kernel launches)
    seq_overhead: float  # seconds per sequence in the step
    request_overhead: float  # seconds added to TTFT and E2E (HTTP, tokenization, first detokenization)
    kv_accounting: str  # "profile": u·M − W − activation peak − other; "static": u·M − W − other; "free": u·(M − W − A − other)
    other_memory: float  # bytes per GPU outside weights, activations and KV (CUDA context, allocator, graphs)
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    scheduler_steps: int = 1  # vLLM 0.6 multi-step scheduling: new requests join every k steps
    long_prefill_token_threshold: int = 0  # vLLM's cap on one request's tokens a step (0: none)
    lone_prefill_uncapped: bool = False  # vLLM 0.31 on: the cap spares a request alone in the scheduler
    decode_target: tuple[int, int, int, int, int] | None = None  # AMD's MLPerf V0 scheduler patch (scheduler.py)
    prefill_kv_free: float = 0.0  # the ROCm fork's VLLM_SCHED_PREFILL_KVC_FREEPCT / 100 (V0; scheduler.py)
    reserve_output: bool = False  # admit a request only with KV for its whole output (no preemption)
    prefix_caching: bool = True
    cached_preemption: bool = False  # vLLM V1: a preempted request's blocks stay in the prefix cache (kv_pool.py)
    hybrid_kv: bool = False  # vLLM 0.10+: a KV group per attention type, windowed ones hold the window (kv_pool.py)
    whole_prompt_admission: bool = False  # vLLM 0.19+: a waiting request's whole sequence must fit (scheduler.py)
    sparse_window_cache: bool = False  # vLLM 0.23+: sliding groups cache only a hit's possible ends (kv_pool.py)
    prefix_junction: bool = False  # vLLM 0.26+: ... and a re-admitted request's one-group hit end (kv_pool.py)
    start_null_block: bool = False  # vLLM 0.29+: its start-up check sets the null block aside (memory.py)
    mfu_scale: float = 1.0  # the engine's kernels against the GPU family's prior (TensorRT-LLM's FP8 GEMMs)
    mbu_scale: float = 1.0
    defaults: str = ""  # which version's defaults these are, when they depend on it (vLLM)
    stream_token_cost: float = STREAM_TOKEN_COST  # front-end seconds per streamed token (tail term `token drain`)
    api_server_count: int = 1  # vLLM's --api-server-count: front-end processes sharing the token drain
    ingest_cost: float = INGEST_COST  # the API server's seconds a request (tail term `front-end ingest`)
    ingest_parse_share: float = INGEST_PARSE_SHARE
    # without chunked prefill: "separate" (SGLang, vLLM 0.6: a step prefills or decodes) or "whole" (TensorRT-LLM's
    # in-flight batching: whole prompts beside the decodes, within the token budget)
    unchunked: Literal["separate", "whole"] = "separate"
    kernels: Kernels = Kernels()  # as timed (Hopper; routed experts also on the A100): the kernel-database terms
    # whose CUDA-graph capture list pads its steps (tail term `graph padding`, cuda_graphs.py); "": none
    graphs: Literal["", "vllm", "vllm-v0", "sglang", "llmbench", "trtllm-bench"] = ""

    def shape(self, kv_tokens: int, prefix_hit_rate: float = 0.0, model: ModelSpec | None = None) -> EngineShape:
        """The simulator's view of this engine with a KV pool of `kv_tokens` (a full-attention model's worth) for
        `model`, whose windowed layers get their own KV groups under vLLM's hybrid manager."""
        hybrid = self.hybrid_kv and model is not None and model.sliding_layers > 0
        whole = not self.chunked_prefill and self.unchunked == "whole"
        return EngineShape(self.max_num_seqs, self.max_num_batched_tokens, kv_tokens, self.block_size,
                           prefix_hit_rate if self.prefix_caching else 0.0, self.request_overhead,
                           self.chunked_prefill or whole, self.scheduler_steps, self.reserve_output,
                           whole_prompts=whole, long_prefill_cap=self.long_prefill_token_threshold,
                           cap_lone_prefill=not self.lone_prefill_uncapped, decode_target=self.decode_target,
                           prefill_kv_free=self.prefill_kv_free, ingest_cost=self.ingest_cost / self.api_server_count,
                           ingest_parse_share=self.ingest_parse_share,
                           keep_preempted=self.cached_preemption and self.prefix_caching,
                           kv_groups=model.kv_groups if hybrid else (1, 0),
                           window=model.sliding_window if hybrid else 0, admit_whole=self.whole_prompt_admission,
                           sparse_window=hybrid and self.sparse_window_cache,
                           junction=hybrid and self.sparse_window_cache and self.prefix_junction)

    def with_knobs(self, **knobs) -> EngineProfile:
        """The profile with the user's engine flags (None: keep the profile's default)."""
        return replace(self, **{k: v for k, v in knobs.items() if v is not None})


PROFILES = {
    "vllm": EngineProfile("vllm", 256, 8192, True, **V0_COSTS, kv_accounting="profile", other_memory=0.13 * GiB,
                          graphs="vllm", kernels=KERNELS["vllm"]),
    "sglang": EngineProfile("sglang", 1024, 8192, False, 60e-6, 12e-6, 2e-6, 3e-3, "static", 0.5 * GiB,
                            gpu_memory_utilization=0.88, graphs="sglang", kernels=KERNELS["sglang"]),
    # context chunking is off unless asked for (ExecutorConfig/TrtGptModelOptionalParams enableChunkedContext=false,
    # the LLM API's enable_chunked_prefill=False); trtllm-bench turns it on by default
    "trtllm": EngineProfile("trtllm", 2048, 8192, False, 60e-6, 8e-6, 2e-6, 5e-3, "free", 0.5 * GiB,
                            reserve_output=True, mfu_scale=1.3, mbu_scale=1.1, unchunked="whole",
                            kernels=KERNELS["trtllm"]),
    "llmbench": EngineProfile("llmbench", 256, 2048, True, 1.5e-3, 32e-6, 10e-6, 5e-3, "profile", 0.5 * GiB,
                              graphs="llmbench", kernels=KERNELS["vllm"]),
    # LMDeploy's TurboMind (TurbomindEngineConfig defaults: max_batch_size 128, max_prefill_token_num 8192 per
    # iteration, cache_max_entry_count 0.8 of the memory left free, blocks of 64 tokens, prefix caching off); a
    # C++ engine, so TensorRT-LLM's fixed costs; no published row checks it
    "lmdeploy": EngineProfile("lmdeploy", 128, 8192, True, 60e-6, 8e-6, 2e-6, 5e-3, "free", 0.5 * GiB,
                              gpu_memory_utilization=0.8, block_size=64, prefix_caching=False,
                              kernels=KERNELS["trtllm"]),
}


LATEST_VLLM = (0, 32)
V1 = (0, 8)  # vLLM's V1 engine, with defaults that depend on the GPU, from 0.8 on
ASYNC_OUTPUT = (0, 6)  # vLLM 0.6.0: asynchronous output processing, the object cache, the fast sampler path
# Tail term `host per sequence`: before 0.6.0 vLLM's scheduler, input preparation, sampler and output processing ran
# in step with the GPU ("many components (e.g., scheduler and output processor) execute in a synchronous manner that
# blocks GPU execution", output processing "with the overhead increasing as batch sizes grew": vLLM's v0.6.0 post,
# 2024-09-05), so every running sequence adds its host work to the step, where BLIS's fit charges 4 µs. Vidur's
# profile of a vLLM-derived engine on an A100 host (microsoft/vidur 0633efae, data/profiling/a100/cpu_overheads.csv,
# Llama-2-7B TP1, medians linear in the batch) puts it at 37 µs without output processing and 100 µs with it.
# Chosen on the tuning half (MLPerf v4.1's MI300X runs, the only ones before 0.6) by a grid registered before it ran,
# {4, 16, 37, 64, 100, 160} µs: 100 lowest (objective 3.60 -> 3.46), 64 within 0.05 of it and the smaller move
# (3.51; benchmarks/README.md). A fit: no held-out row runs a vLLM before 0.6.
PRE_ASYNC_SEQ_OVERHEAD = 64e-6
HYBRID_KV = (0, 10)  # V1's hybrid KV cache manager, on by default (PyPI sdists: in 0.9.1, not 0.9.0; versions here
# are major.minor, so from 0.10, the first to serve gpt-oss)
WHOLE_PROMPT = (0, 19)  # scheduler_reserve_full_isl, on by default (vllm-project/vllm#37307; 0.18.1 has no such gate)
JUNCTION = (0, 26)  # shared_prefix_boundary: sparse groups keep a junction's tail too (PyPI sdists: 0.26.0, not 0.25.0)
SPARSE_WINDOW = (0, 23)  # sliding groups cache only reachable blocks (PyPI sdists: reachable_block_mask from 0.23.0)
NULL_BLOCK_CHECK = (0, 29)  # the start-up check plans against the pool less its null block (PyPI sdists: 0.29.0 on)
LONE_PREFILL = (0, 31)  # --long-prefill-token-threshold spares a lone request (vllm-project/vllm#57951)
# V1's fixed costs: TensorRT-LLM's (its decode steps replay CUDA graphs and its engine core runs apart from the API
# server), not BLIS's fit. Chosen on the tuning half once source I (inference-sim's vLLM 0.14 on an H100) joined
# it, among {BLIS's, these} x {MBU as TensorRT-LLM's x1.1, or not}: objective 4.34 with BLIS's, 4.26 with these,
# 4.30 / 4.35 with the MBU raised; I's latencies +48 % -> +27 % (benchmarks/README.md).
V1_COSTS = {"step_overhead": 60e-6, "layer_overhead": 8e-6, "seq_overhead": 2e-6, "request_overhead": 5e-3}


def profile(name: str, gpu=None, max_model_len: int | None = None) -> EngineProfile:
    """`vllm`, `vllm@0.6.3`, `sglang`, ...: the engine's profile with the defaults that version picks on that
    GPU (vLLM's change between versions and with the card); the profile's `defaults` says which were used."""
    base, _, version = name.partition("@")
    if base not in PROFILES:
        raise KeyError(f"unknown engine {base!r}; known: {', '.join(PROFILES)} (vllm@VERSION for an older vLLM)")
    if base != "vllm":
        if version:  # a published setup names its version; only vLLM's defaults change with it
            return replace(PROFILES[base], defaults=f"{base} {version}: the {base} profile, the same for every "
                                                    "version (only vLLM's defaults are modelled per version)")
        return PROFILES[base]
    return replace(PROFILES[base], **vllm_defaults(_version(version) if version else LATEST_VLLM, gpu, max_model_len))


def _version(text: str) -> tuple[int, int]:
    try:
        parts = [int(p) for p in text.lstrip("v").split(".")[:2]]
    except ValueError:
        raise KeyError(f"bad vLLM version {text!r}: use e.g. vllm@0.6.3 or vllm@0.11") from None
    return (parts + [0])[0], (parts + [0])[1]


def vllm_defaults(version: tuple[int, int], gpu=None, max_model_len: int | None = None) -> dict:
    """vLLM's defaults for max_num_seqs, max_num_batched_tokens and chunked prefill (vllm/engine/arg_utils.py):
    V1 (0.8+) on a card of 70 GiB or more other than an A100 takes 1024 sequences and 8192 tokens a step,
    elsewhere 256 and 2048, with chunked prefill on; V0 takes 256 sequences and, prefill-first, a step as long
    as the model's context (at least 2048 tokens); before 0.6, with its host work per sequence in step with the GPU
    (tail term `host per sequence`)."""
    name = f"vLLM {version[0]}.{version[1]}"
    if version < V1:
        tokens = max(max_model_len or 2048, 2048)
        knobs = {"max_num_seqs": 256, "max_num_batched_tokens": tokens, "chunked_prefill": False, "graphs": "vllm-v0",
                 "defaults": f"{name} (V0): --max-num-seqs 256, --max-num-batched-tokens {tokens}, no chunked prefill"}
        if version < ASYNC_OUTPUT:
            knobs["seq_overhead"] = PRE_ASYNC_SEQ_OVERHEAD
            knobs["defaults"] += (f"; host per sequence {PRE_ASYNC_SEQ_OVERHEAD * 1e6:.0f} µs a step (its scheduler and "
                                  "output processing ran in step with the GPU until 0.6.0)")
        return knobs
    big = gpu is not None and gpu.memory >= 70 * GiB and "A100" not in gpu.name
    seqs, tokens = (1024, 8192) if big else (256, 2048)
    on = f" on {gpu.name}" if gpu is not None else ""
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens, "chunked_prefill": True, "graphs": "vllm",
            "lone_prefill_uncapped": version >= LONE_PREFILL, "cached_preemption": True,
            "hybrid_kv": version >= HYBRID_KV, "whole_prompt_admission": version >= WHOLE_PROMPT,
            "sparse_window_cache": version >= SPARSE_WINDOW, "prefix_junction": version >= JUNCTION,
            "start_null_block": version >= NULL_BLOCK_CHECK,
            **V1_COSTS,
            "defaults": f"{name} (V1){on}: --max-num-seqs {seqs}, --max-num-batched-tokens {tokens}, chunked prefill"}
