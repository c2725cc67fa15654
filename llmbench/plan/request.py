"""What `llmbench plan` is asked: the question, the workload, the engine and the GPUs (PlanRequest), the error
a plan that cannot be made raises, and the sizing rule from a per-replica rate to replicas."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from llmbench.plan.workload import Workload
from llmbench.slo import SLO


class PlanError(ValueError):
    """A plan that cannot be made; the message carries the numbers behind it."""


DEFAULT_MODEL, DEFAULT_GPU = "llama-3.1-8b", "H100-SXM"


def params_text(count: float) -> str:
    """8.0 B, 39 M: a bundled model is not "0.0 B"."""
    return f"{count / 1e9:.1f} B" if count >= 1e9 else f"{count / 1e6:.0f} M"


@dataclass
class PlanRequest:
    slo: SLO
    workload: Workload | None = None  # None: the --results folder's requests
    qps: float | None = None
    concurrency: int | None = None
    max_throughput: bool = False
    at_rate: float | None = None
    results: Path | None = None
    gpu: str | None = None  # None: DEFAULT_GPU without --results; with them, the sweep must say (or be fitted)
    gpu_spec: Path | None = None
    measured_gpu: str | None = None  # where the --results sweep ran, when it is not --gpu
    measured_tp: int | None = None
    calibration_rates: int = 2  # the --results sweep's lowest unsaturated rates the model is calibrated on
    request_spread: bool = False  # tail term `request spread` (request_spread.py) in a calibrated plan's percentiles;
    # off: its registered rounds (Z9, Z10 in benchmarks/README.md) put it at 12 and 14 of 16 within 15 % against 13, 15
    step_jitter: bool = False  # tail term `step jitter` (step_jitter.py) in a plan on the measured server itself;
    # off: its registered round (Z11) put it at 15 of 16 within 15 % as the replay, median |error| 4.09 against 3.99 %
    model: str | None = None  # None: DEFAULT_MODEL, or the served model's config.json beside --results
    weight_dtype: str | None = None  # None: the format the model's checkpoint ships (ModelSpec.checkpoint_dtype)
    kv_dtype: str = "bf16"
    engine: str = "vllm"
    knobs: dict = field(default_factory=dict)  # EngineProfile fields the user set
    burst_headroom: float = 0.2
    spares: int = 1
    gpus_per_replica: int | None = None
    gpus: int | None = None  # the whole fleet, for --at-rate/--concurrency/--max-throughput
    price_per_hour: float | None = None
    prefix_hit_rate: float | None = None  # None: 0, or with --results the measured server's own (measured.py)
    search_knobs: bool = True
    seeds: tuple[int, ...] = (0, 1, 2)
    requests_per_sim: int = 600
    num_requests: int | None = None  # --num-prompts: the run asked about has exactly this many requests
    concurrency_under: bool = False  # --max-concurrency-under: the highest concurrency within `slo`
    disaggregated: bool = False  # compare prefill/decode pools with colocated serving (goodput per GPU)

    @property
    def mode(self) -> str:
        if self.concurrency_under:
            return "max-concurrency"
        if self.at_rate is not None:
            return "at-rate"
        if self.concurrency is not None:
            return "concurrency"
        if self.max_throughput:
            return "max-throughput"
        return "qps" if self.qps is not None else "capacity"


def replicas_for(qps: float, per_replica: float, headroom: float, spares: int) -> int:
    if per_replica <= 0:
        raise PlanError("the per-replica rate is zero: nothing meets the SLO")
    return int(math.ceil(qps * (1 + headroom) / per_replica)) + spares
