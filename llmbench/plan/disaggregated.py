"""Prefill/decode disaggregation as a candidate beside colocated serving, in goodput per GPU (DistServe's
measure, arXiv 2401.09670): the highest request rate a GPU sustains within the SLO.

- Colocated: one replica serves both phases; its SLO capacity (the planner's own search) over its GPUs.
- Prefill pool: the same replica sent prompts only (one output token), within the TTFT bound less the time to
  hand the prompt's KV to a decode replica over the GPU's interconnect.
- Decode pool: a replica whose steps carry decodes only: the largest batch whose step stays within the TPOT bound
  (and whose KV fits), serving batch / (step x mean output) requests per second.
- The two pools sized to the same rate: per GPU, 1 / (GPUs per prefill replica / its rate + GPUs per decode
  replica / its rate); the prefill share of GPUs follows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llmbench.plan import search
from llmbench.plan.workload import Workload
from llmbench.slo import SLO


def kv_handoff_seconds(model, mean_prompt: float) -> float:
    """The prompt's KV over the interconnect (0 where the step model has no device: a fitted one)."""
    per_token = getattr(model, "kv_bytes_per_token", None)
    link = getattr(getattr(model, "gpu", None), "link", None)
    if not per_token or link is None:
        return 0.0
    return link.latency + mean_prompt * per_token / (link.bandwidth * link.efficiency)


def decode_capacity(setup: search.SimSetup, tpot_s: float) -> tuple[float, int, float]:
    """Requests per second of a decode-only replica, its batch and its step time."""
    work, shape, model = setup.work, setup.shape, setup.model
    context = work.mean_prompt + work.mean_output / 2
    best, step = 0, 0.0
    for batch in range(1, shape.max_num_seqs + 1):
        if batch * context > shape.kv_capacity_tokens:
            break
        t = model.step_time(0.0, batch, batch * context)
        if t > tpot_s:
            break
        best, step = batch, t
    return (best / (step * work.mean_output) if best else 0.0), best, step


def compare(setup: search.SimSetup, tp: int, slo: SLO, colocated_rate: float) -> dict:
    """Colocated vs disaggregated goodput per GPU for the replica `setup` describes."""
    if slo.ttft_ms is None or slo.tpot_ms is None:
        return {"note": "disaggregation is compared under a TTFT and a TPOT bound (--slo ttft=...,tpot=...)"}
    work = setup.work
    handoff = kv_handoff_seconds(setup.model, work.mean_prompt)
    prompts_only = Workload(work.prompts, np.ones_like(work.outputs), f"{work.source}, prompts only")
    budget = slo.ttft_ms - handoff * 1000
    prefill = search.capacity(replace(setup, work=prompts_only),
                              SLO(budget, None, None, slo.attainment, "prefill pool"), max(colocated_rate, 0.1)) \
        if budget > 0 else 0.0
    decode, batch, step = decode_capacity(setup, slo.tpot_ms / 1000)
    colocated = colocated_rate / tp
    disaggregated = 1.0 / (tp / prefill + tp / decode) if prefill > 0 and decode > 0 else 0.0
    share = (1 / prefill) / (1 / prefill + 1 / decode) if prefill > 0 and decode > 0 else None
    return {"colocated_per_gpu": colocated, "disaggregated_per_gpu": disaggregated,
            "colocated_tokens_per_gpu": colocated * work.mean_output,
            "disaggregated_tokens_per_gpu": disaggregated * work.mean_output,
            "ratio": disaggregated / colocated if colocated else None,
            "prefill_replica_rate": prefill, "decode_replica_rate": decode, "decode_batch": batch,
            "decode_step_ms": step * 1000, "kv_handoff_ms": handoff * 1000, "prefill_gpu_share": share,
            "gpus_per_replica": tp}


def over_tp(replicas: dict[int, tuple[search.SimSetup, float]], slo: SLO) -> dict:
    """Colocated and disaggregated goodput per GPU with each pool at its own best tensor-parallel size
    (AIConfigurator and DistServe search the parallelism of each pool): `replicas` maps TP to the replica's
    setup and its colocated SLO capacity."""
    rows = {tp: compare(setup, tp, slo, rate) for tp, (setup, rate) in replicas.items()}
    rows = {tp: row for tp, row in rows.items() if "ratio" in row}
    if not rows:
        return {"note": "no tensor-parallel size fits both pools"}
    colocated_tp = max(rows, key=lambda tp: rows[tp]["colocated_per_gpu"])
    prefill_tp = max(rows, key=lambda tp: rows[tp]["prefill_replica_rate"] / tp)
    decode_tp = max(rows, key=lambda tp: rows[tp]["decode_replica_rate"] / tp)
    prefill = rows[prefill_tp]["prefill_replica_rate"] / prefill_tp
    decode = rows[decode_tp]["decode_replica_rate"] / decode_tp
    per_gpu = 1 / (1 / prefill + 1 / decode) if prefill > 0 and decode > 0 else 0.0
    colocated = rows[colocated_tp]["colocated_per_gpu"]
    tokens = next(iter(replicas.values()))[0].work.mean_output
    return {"by_tp": rows, "colocated_tp": colocated_tp, "prefill_tp": prefill_tp, "decode_tp": decode_tp,
            "colocated_per_gpu": colocated, "disaggregated_per_gpu": per_gpu,
            "colocated_tokens_per_gpu": colocated * tokens, "disaggregated_tokens_per_gpu": per_gpu * tokens,
            "ratio": per_gpu / colocated if colocated else None,
            "prefill_gpu_share": (1 / prefill) / (1 / prefill + 1 / decode) if per_gpu else None}
