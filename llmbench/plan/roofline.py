"""Roofline step time: compute-bound prefill, bandwidth-bound decode, plus per-step overheads."""

from __future__ import annotations

from dataclasses import dataclass

from llmbench.plan.catalog import GPU, ModelSpec
from llmbench.plan.memory import BYTES, weight_bytes


@dataclass(frozen=True)
class Efficiency:
    """Priors from published measurements (BLIS's roofline defaults and trained overheads, Databricks' MBU);
    calibrate on your own sweeps."""

    mfu: float = 0.45  # BLIS roofline default, H100 prefill
    mbu: float = 0.60  # Databricks: 55-60 % on A100/H100 (MBU)
    step_overhead: float = 126e-6  # BLIS trained physics: ~126 us per step
    layer_overhead: float = 32e-6  # ~32 us per layer
    seq_overhead: float = 4e-6  # ~4 us per request in the batch


@dataclass(frozen=True)
class RooflineModel:
    model: ModelSpec
    gpu: GPU
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    eff: Efficiency = Efficiency()

    @property
    def peak_flops(self) -> float:
        fp8 = self.weight_dtype == "fp8" and self.gpu.fp8_flops
        return (self.gpu.fp8_flops if fp8 else self.gpu.bf16_flops) * self.tp

    def step_time(self, prefill_tokens: float, decode_seqs: float, context_tokens: float,
                  cached_context: float = 0.0, prefill_seqs: float = 0.0) -> float:
        """One engine step: `prefill_tokens` new prompt tokens (attending over `cached_context` earlier
        tokens), `decode_seqs` single-token decodes over `context_tokens` of KV in total. (`prefill_seqs`
        does not change a roofline's cost.)"""
        m = self.model
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        attn_width = m.heads * m.head_dim
        flops = 2 * m.active_params * tokens
        flops += 4 * m.layers * attn_width * (prefill_tokens * (cached_context + prefill_tokens / 2) + context_tokens)
        kv_bytes = m.kv_bytes_per_token(BYTES[self.kv_dtype], 1) * (context_tokens + cached_context + prefill_tokens)
        touched = weight_bytes(m, self.weight_dtype) * (m.params_read(tokens) / m.params)
        bytes_moved = touched + kv_bytes
        compute = flops / (self.eff.mfu * self.peak_flops)
        memory = bytes_moved / (self.eff.mbu * self.gpu.bandwidth * self.tp)
        comm = 0.0
        if self.tp > 1:
            per_allreduce = 2 * (self.tp - 1) / self.tp * tokens * m.hidden * 2 / self.gpu.link_bandwidth
            comm = 2 * m.layers * per_allreduce
        seqs = decode_seqs + (1 if prefill_tokens else 0)
        overhead = self.eff.step_overhead + self.eff.layer_overhead * m.layers + self.eff.seq_overhead * seqs
        return max(compute, memory) + comm + overhead
