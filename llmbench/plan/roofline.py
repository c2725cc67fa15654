"""Roofline step time, per operator: the GEMMs (bound by their FLOPs or by reading the weights) and attention
(bound by its FLOPs or by reading the KV cache) are separate kernels and their times add, tensor-parallel
all-reduces with a latency and a bandwidth per interconnect, plus the engine's fixed costs per step, layer and
sequence. Summing per operator (tail term `attention-kernel`) is what a large batch pays: its GEMMs are
compute-bound and the KV read no longer hides under them, as one max() over the whole step assumed (MLPerf
v4.1's Offline rows: median error +14 % with one max(), +8 % per operator; §9's rows unchanged).

Within each operator the two bounds meet smoothly (tail term `knee`): a kernel near its ridge point is neither
purely bandwidth- nor purely compute-bound, so its time is the p-norm of the two, between their sum (p = 1,
Hockney's `t = A + B·n`, the linear step-time fits of DistServe and Vidur) and their max (p = ∞, the plain
roofline). Under load this is what fills steps: with a flat max() a step costs the same up to the ridge, so a
replica at 90 % of its compute absorbs every burst in small, fast steps and its TPOT stays at the batch-1
floor, where real servers (MLPerf's Server runs) show steps that grow with the queue to a full token budget.
KNEE_P was chosen on the tuning half alone (planning.md §9, MLPerf v4.1 and v5.1) by the sum of each kind's
median |error| over its aim (throughput 10 %, latency 15 %, P99 25 %): among 1, 1.15, 1.3, 1.5, 2 and ∞ p = 1.15
won (4.98; ∞ 7.61) while every token was charged the LM head; with the head charged only to rows that sample
(`gemm_flops`), p = 1 won (4.44 against 4.88 for 1.15 and 5.44 for 1.3), so the two bounds add; re-checked
once MLPerf's Server rows were measured at a steady state (`mlperf.warm_up`): p = 1 again (5.19 against 5.38 and 5.89)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from llmbench.plan import cuda_graphs
from llmbench.plan.engines import PROFILES, EngineProfile, Experts
from llmbench.plan.gpus import GPU
from llmbench.plan.memory import BYTES, weight_bytes
from llmbench.plan.model_spec import ModelSpec


@dataclass(frozen=True)
class Efficiency:
    """Achieved fraction of the datasheet: MFU for compute-bound work, MBU for bandwidth-bound work."""

    mfu: float
    mbu: float
    source: str


# Per GPU family (planning.md §3, §9), then per GPU where a published row pins it down. Hopper: BLIS's H100
# roofline MFU (0.45) and Databricks' H100 MBU (60 %); rows B and C land within 17 % with them. Ampere: fitted on
# row A (vLLM 0.6 and SGLang 0.3, Llama-3.1-8B on A100-80GB), MFU 0.55 and MBU 0.68 when the roofline took one max()
# per step; re-chosen on row A once its operators sum their bounds (knee p = 1): MFU 0.65, MBU 0.76 (grid in
# benchmarks/README.md; no held-out Ampere row checks it). The A100-40GB of row D (MPT-7B, batch 1, Databricks'
# own MBU of 55 %) sits lower. Families without a published figure borrow the nearest one and say so.
FAMILIES = {
    "hopper": Efficiency(0.45, 0.60, "BLIS H100 MFU, Databricks H100 MBU; rows B, C"),
    "ampere": Efficiency(0.65, 0.76, "fitted on row A (A100-80GB, vLLM 0.6 and SGLang 0.3)"),
    "ampere-pcie": Efficiency(0.65, 0.76, "A100-80GB figures (no published A10G figure)"),
    "ada": Efficiency(0.32, 0.55, "BLIS L40S MFU; MBU borrowed from Databricks A100 (no published Ada MBU)"),
    "blackwell": Efficiency(0.45, 0.60, "H100 figures (no published B200 figure)"),
    "cdna3": Efficiency(0.45, 0.60, "H100 figures (no published CDNA 3 figure)"),
}
KNEE_P = 1.0


def _elementwise(scalar, array, a, b):
    """min or max of two figures, elementwise where either is an array (a stretch of decode steps' contexts); the
    builtin for plain numbers, which takes a tenth of numpy's time there."""
    return array(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else scalar(a, b)


def knee(bandwidth_time: float, compute_time: float, p: float = KNEE_P) -> float:
    """An operator's time from its two roofline bounds: their p-norm (p = 1 their sum, p = ∞ their max)."""
    if math.isinf(p):
        return _elementwise(max, np.maximum, bandwidth_time, compute_time)
    return (bandwidth_time**p + compute_time**p) ** (1 / p)


# The MI325X: the MI300X's datasheet peak at 1,000 W board power against 750 W, so a higher sustained clock; chosen
# on the tuning half (MLPerf v5.1's 31 MI325X runs, the only ones) by a grid registered before it ran, MFU 0.45-0.65
# x MBU 0.60-0.76: 0.50 / 0.60 won (objective 4.12 -> 3.56; benchmarks/README.md). The MI300X: public GEMM
# measurements put its achieved share of the datasheet FLOPs under the H100's; chosen on the tuning half (MLPerf v4.1
# and v5.1's 18 MI300X runs) by a grid registered before it ran, MFU 0.35-0.45 x MBU 0.52-0.68: 0.40 / 0.60 (objective
# 3.51 -> 3.27; 0.40 / 0.68 lowest by 0.011, a larger move). Fits: no held-out row runs on either.
BY_GPU = {"A100-40GB": Efficiency(0.42, 0.47, "fitted on row D (MPT-7B on A100-40GB, TTFT and batch-1 throughput)"),
          "MI300X": Efficiency(0.40, 0.60, "fitted on MLPerf v4.1 and v5.1's MI300X runs (tuning half)"),
          "MI325X": Efficiency(0.50, 0.60, "fitted on MLPerf v5.1's MI325X runs (tuning half; 1,000 W board power)")}


@dataclass(frozen=True)
class RooflineModel:
    model: ModelSpec
    gpu: GPU
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    engine: EngineProfile = PROFILES["vllm"]
    eff: Efficiency | None = None  # None: the GPU family's prior
    scale: float = 1.0  # a calibration factor on the GPU part of the step (fitted on a sweep)
    prefill_scale: float = 1.0  # one on its compute (prompt FLOPs) part, fitted on TTFT against prompt length
    knee_p: float = KNEE_P  # how the two bounds of an operator meet (math.inf: the plain roofline's max)

    @cached_property
    def efficiency(self) -> Efficiency:
        return self.eff or BY_GPU.get(self.gpu.name) or FAMILIES.get(self.gpu.family, FAMILIES["hopper"])

    @cached_property
    def weight_bytes(self) -> float:
        return weight_bytes(self.model, self.weight_dtype)

    @cached_property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(BYTES[self.kv_dtype], 1)

    @cached_property
    def peak_flops(self) -> float:
        fp8 = self.weight_dtype == "fp8" and self.gpu.fp8_flops
        return (self.gpu.fp8_flops if fp8 else self.gpu.bf16_flops) * self.tp

    @cached_property
    def attention_peak(self) -> float:
        """Attention computes in the KV cache's dtype (FlashAttention, TensorRT-LLM's FMHA): an FP8 checkpoint with a
        bf16 cache attends at the bf16 peak."""
        return self.peak_flops if self.kv_dtype == "fp8" else self.gpu.bf16_flops * self.tp

    @cached_property
    def timed_gpu(self) -> bool:
        """A GPU of the family whose GEMMs the kernel database timed (NVIDIA Hopper), replaying CUDA graphs as they
        were timed: where tail terms `fp8 GEMMs` and `weight reads` apply."""
        return self.gpu.cuda_graphs and self.gpu.family == "hopper"

    @cached_property
    def fp8_gemms(self) -> bool:
        """Whether tail term `fp8 GEMMs` applies: an FP8 checkpoint on the GPU family its kernels were timed on."""
        return self.weight_dtype == "fp8" and self.timed_gpu

    @cached_property
    def block_fp8(self) -> bool:
        """Whether tail term `block FP8` applies: FP8 weights scaled per 128 x 128 block on the timed GPU family."""
        return self.fp8_gemms and self.model.fp8_blocks

    @cached_property
    def weight_reads(self) -> tuple[float, float] | None:
        """Tail term `weight reads`: (share of the HBM bandwidth, seconds a GEMM) of the engine's dense GEMMs for
        this checkpoint's dtype on the GPU family they were timed on; None where the term does not apply."""
        if not self.timed_gpu:
            return None
        gemms = self.engine.kernels.gemms(self.weight_dtype, self.block_fp8)
        return (gemms.read, gemms.fixed) if gemms.read else None

    @cached_property
    def routed_experts(self) -> Experts:
        """Tail term `expert kernels`: the engine's fused MoE kernels as timed on an A100 for the Ampere family,
        on an H100 for every other GPU."""
        return self.engine.kernels.routed(self.block_fp8, self.gpu.family)

    @cached_property
    def graph_sizes(self) -> tuple[int, ...]:
        e = self.engine
        if not self.gpu.cuda_graphs:
            return ()
        return cuda_graphs.capture_sizes(e.graphs, e.max_num_seqs, e.max_num_batched_tokens, self.gpu.family)

    @cached_property
    def graphs_take_prompts(self) -> bool:
        return not cuda_graphs.decode_only(self.engine.graphs)

    def scaled(self, factor: float) -> RooflineModel:
        return replace(self, scale=self.scale * factor)

    def allreduce_seconds(self, tokens: float) -> float:
        """Two all-reduces per layer of tokens·hidden bf16 activations (ring: 2(TP-1)/TP of the bytes)."""
        if self.tp <= 1:
            return 0.0
        link = self.gpu.link
        per = link.latency + 2 * (self.tp - 1) / self.tp * tokens * self.model.hidden * 2 / (
            link.bandwidth * link.efficiency)
        return 2 * self.model.layers * per

    def gemm_flops(self, tokens: float, samples: float) -> float:
        """A step's GEMM FLOPs: the layers' for every token, the LM head's only for the rows that sample a token
        (a decode, a prompt's last chunk); the embedding is a lookup. Counting every parameter for every token
        charged a prompt token of a 39 M-parameter model with a 16,000-token vocabulary 1.7x its FLOPs (its
        embedding and head are 16 M), and Llama-3.1-8B's 1.15x."""
        m = self.model
        return 2 * (m.active_params - m.embedding_params) * tokens + 2 * m.vocab * m.hidden * samples

    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float | np.ndarray,
                  cached_context: float = 0.0, prefill_seqs: float = 0.0, prefill_pairs: float | None = None
                  ) -> float | np.ndarray:
        """One engine step: `prefill_tokens` new prompt tokens (attending over `cached_context` earlier
        tokens), `decode_seqs` single-token decodes over `context_tokens` of KV in total. `prefill_pairs`:
        the prefills' causal query-key pairs, each prompt's own n·(cached + n/2) summed (None: one prompt).
        Decode-only steps (no prefill) may pass an array of contexts and get an array of times, the same figures
        as one call each (the simulator's fast path times a stretch of decodes so)."""
        m = self.model
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        attn_width = m.heads * m.head_dim
        sizes, rows = self.graph_sizes, tokens
        if sizes and (not prefill_tokens or self.graphs_take_prompts):
            rows = cuda_graphs.padded(tokens, sizes)  # tail term `graph padding`
        linear_flops = self.gemm_flops(rows, decode_seqs + max(prefill_seqs, 1 if prefill_tokens else 0))
        if prefill_pairs is None:
            prefill_pairs = prefill_tokens * (cached_context + prefill_tokens / 2)
        pairs, context = prefill_pairs + context_tokens, context_tokens + cached_context
        if m.sliding_layers:  # tail term `sliding window`: those layers attend to the window's tokens only
            w, share = m.sliding_window, m.sliding_layers / m.layers
            decoded = _elementwise(min, np.minimum, context_tokens, decode_seqs * w)
            cached = min(cached_context, max(prefill_seqs, 1) * w) if prefill_tokens else 0.0
            pairs = (1 - share) * pairs + share * (min(prefill_pairs, prefill_tokens * w) + decoded)
            context = (1 - share) * context + share * (decoded + cached)
        attn_flops = 4 * m.layers * attn_width * pairs
        kv_bytes = self.kv_bytes_per_token * (context + prefill_tokens)
        routed_read = m.routed_read(tokens)  # 0 for a dense model, whose unrouted parameters are all of them
        touched = self.weight_bytes * ((m.unrouted_params + routed_read) / m.params)
        eff, e = self.efficiency, self.engine
        gpu_kernels = self.gpu.cuda_graphs  # the kernel database's terms are a GPU's, not a `--gpu-spec` CPU's
        flop_rate = eff.mfu * e.mfu_scale * self.peak_flops / self.prefill_scale
        byte_rate = eff.mbu * e.mbu_scale * self.gpu.bandwidth * self.tp
        routed_bytes = routed_flops = 0.0  # the routed experts' part of the GEMMs, as charged
        block = self.block_fp8  # tail term `block FP8`: its own factors for experts and dense GEMMs
        experts = self.routed_experts
        if m.experts > 1 and gpu_kernels:  # tail term `expert kernels`: the routed experts cost the engine's factor
            read, flops = self.weight_bytes * routed_read / m.params, 2 * m.routed_active_params * rows
            touched += (experts.bytes - 1) * read
            linear_flops += (experts.flops - 1) * flops
            routed_bytes, routed_flops = experts.bytes * read, experts.flops * flops
        if self.fp8_gemms:  # tail term `fp8 GEMMs`: the dense (not routed) GEMMs' FLOPs at the engine's factor
            linear_flops += (e.kernels.gemms("fp8", block).flops - 1) * (linear_flops - routed_flops)
        weights, reads = touched / byte_rate, self.weight_reads
        if reads:  # tail term `weight reads`: the dense GEMMs stream their weights at the engine's measured share
            dense = touched - routed_bytes
            weights += dense / (reads[0] * self.gpu.bandwidth * self.tp) - dense / byte_rate
        # per-operator roofline: the GEMMs (weights) and attention (the KV cache) are separate kernels, each
        # bound by its own compute and memory, meeting at a knee, run one after the other
        linear = knee(weights, linear_flops / flop_rate, self.knee_p)
        attention = knee(kv_bytes / byte_rate, attn_flops / (flop_rate * self.attention_peak / self.peak_flops),
                         self.knee_p)
        seqs = decode_seqs + max(prefill_seqs, 1 if prefill_tokens else 0)
        overhead = (e.step_overhead + e.layer_overhead * m.layers + e.seq_overhead * seqs
                    + (experts.layer_overhead * m.moe_layers if gpu_kernels else 0.0)
                    + (reads[1] * m.dense_gemms if reads else 0.0))
        engine = self.scale * (linear + attention + self.allreduce_seconds(rows)) + overhead
        return _elementwise(max, np.maximum, engine, e.stream_token_cost / e.api_server_count * seqs)  # `token drain`
