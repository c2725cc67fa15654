"""Self-consistency: fit the step-time model on some measured rates, predict the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmbench.plan.fit import LinearStepModel, fit_client_overhead, fit_steps
from llmbench.plan.scheduler import EngineShape
from llmbench.plan.simulator import simulate
from llmbench.plan.workload import sent_times
from llmbench.results import load_engine_steps, load_metadata, load_records, load_results


def engine_shape(folder: Path) -> EngineShape:
    config = (load_metadata(folder).get("target", {}).get("version") or {}).get("config") or {}
    if not config:
        raise ValueError(f"{folder}: the target reported no engine config (/version); not the bundled engine?")
    return EngineShape(config["max_num_seqs"], config["max_num_batched_tokens"],
                       config["num_kv_blocks"] * config["block_size"], config["block_size"])


def simulate_label(folder: Path, label: str, model: LinearStepModel, shape: EngineShape):
    """Replay a measured run's own arrivals and lengths through the simulator."""
    frame = load_records(folder, label)
    ok = frame[frame["success"]]
    return ok, simulate(sent_times(ok), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                        model, shape)


def self_check(folder: Path, calibrate: list[str], predict: list[str]) -> list[dict]:
    folder = Path(folder)
    measured = {r["label"]: r for r in load_results(folder)}
    missing = [label for label in calibrate + predict if label not in measured]
    if missing:
        from llmbench.plan.planner import PlanError

        raise PlanError(f"{', '.join(missing)} not in {folder} (it holds {', '.join(measured) or 'no results'}); "
                        "a sweep that stopped as saturated writes no later rates")
    shape = engine_shape(folder)
    steps = [s for label in calibrate for s in load_engine_steps(folder, label)]
    model = fit_steps(steps)
    gaps = []
    for label in calibrate:
        ok, res = simulate_label(folder, label, model, shape)
        gaps.append(fit_client_overhead(ok["ttft"].to_numpy(), res.ttft))
    shape = EngineShape(shape.max_num_seqs, shape.max_num_batched_tokens, shape.kv_capacity_tokens,
                        shape.block_size, 0.0, float(np.median(gaps)))
    rows = []
    for label in predict:
        _, res = simulate_label(folder, label, model, shape)
        sim = res.summary()
        real = measured[label]
        row = {"label": label, "rate": real["request_rate"]}
        for key in ("p99_ttft_ms", "p99_tpot_ms", "output_throughput"):
            row[f"measured_{key}"] = real[key]
            row[f"simulated_{key}"] = sim[key]
            row[f"error_{key}"] = (sim[key] - real[key]) / real[key] if real[key] else float("nan")
        rows.append(row)
    return rows
