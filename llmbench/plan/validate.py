"""Self-consistency: fit the step-time model on some measured rates, predict the others.

A rate measured in several runs (`sweep --append` in rounds: rate-1, rate-1-run2, ...) is one measurement of it:
its runs' requests pooled, each run replayed on its own arrivals. On a 2-core VM two sweeps of the same rates,
seeds and code an hour apart moved a 90 s run's P99 TPOT by -47 to +45 % and its P99 TTFT by -15 to +32 %, so a
single run cannot check a 15 % target; each figure therefore carries its measurement's 90 % bootstrap range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmbench.plan.drift import SpeedTrace, fit_drift, run_pauses, run_speeds, run_swings
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.fit import LinearStepModel, fit_client_overhead, fit_steps
from llmbench.plan.simulator import SimResult, simulate
from llmbench.plan.workload import sent_times
from llmbench.results import load_engine_steps, load_metadata, load_records, load_results, runs_by_rate

DRAWS = 9
KEYS = ("p99_ttft_ms", "p99_tpot_ms", "output_throughput")


def engine_shape(folder: Path) -> EngineShape:
    config = (load_metadata(folder).get("target", {}).get("version") or {}).get("config") or {}
    if not config:
        raise ValueError(f"{folder}: the target reported no engine config (/version); not the bundled engine?")
    return EngineShape(config["max_num_seqs"], config["max_num_batched_tokens"],
                       config["num_kv_blocks"] * config["block_size"], config["block_size"])


def simulate_label(folder: Path, label: str, model: LinearStepModel, shape: EngineShape,
                   drift: SpeedTrace | None = None):
    """Replay a measured run's own arrivals and lengths through the simulator."""
    frame = load_records(folder, label)
    ok = frame[frame["success"]]
    return ok, simulate(sent_times(ok), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                        model, shape, drift=drift)


def bootstrap_range(values: np.ndarray, q: float, draws: int = 2000) -> tuple[float, float]:
    """The q-th percentile's 90 % bootstrap range over `values`, relative to it: how finely the run pins the
    figure down (the P99 of 100 requests rests on its slowest one or two)."""
    point = np.percentile(values, q)
    rng = np.random.default_rng(0)
    low, high = np.percentile(np.percentile(rng.choice(values, (draws, len(values))), q, axis=1), [5, 95])
    return float(low / point - 1), float(high / point - 1)


def _runs(results: dict[str, dict], label: str) -> list[str]:
    """`label` and the other runs of its rate, in the order they were written."""
    rate = float(results[label]["request_rate"])
    return [r["label"] for r in runs_by_rate(results.values())[rate]]


def _figures(ttft: np.ndarray, tpot: np.ndarray, tokens: float, seconds: float) -> dict:
    return {"p99_ttft_ms": float(np.percentile(ttft, 99) * 1000), "p99_tpot_ms": float(np.percentile(tpot, 99) * 1000),
            "output_throughput": tokens / seconds if seconds else 0.0}


def _pooled(sims: list[SimResult]) -> dict:
    return _figures(np.concatenate([s.ttft for s in sims]), np.concatenate([s.tpot for s in sims]),
                    sum(s.output_tokens for s in sims), sum(s.duration for s in sims))


def self_check(folder: Path, calibrate: list[str], predict: list[str], drift: bool = False, draws: int = DRAWS
               ) -> list[dict]:
    """Fit on the `calibrate` rates' steps (every run of each), replay the `predict` rates' runs; with `drift`,
    each figure is the median over `draws` traces of the calibration runs' speed drift (tail term `speed
    drift`: the measured run is one such draw, and the median is the guess with the least expected |error|)."""
    folder = Path(folder)
    results = {r["label"]: r for r in load_results(folder)}
    missing = [label for label in calibrate + predict if label not in results]
    if missing:
        from llmbench.plan.planner import PlanError

        raise PlanError(f"{', '.join(missing)} not in {folder} (it holds {', '.join(results) or 'no results'}); "
                        "a sweep that stopped as saturated writes no later rates")
    shape = engine_shape(folder)
    fitted_on = [run for label in calibrate for run in _runs(results, label)]
    steps = [load_engine_steps(folder, run) for run in fitted_on]
    model = fit_steps([s for run in steps for s in run])
    speed = fit_drift(steps, model) if drift else None

    def traces() -> list[SpeedTrace | None]:
        return [speed.trace(seed) for seed in range(draws)] if speed else [None]

    gaps = []
    for run in fitted_on:
        ok = load_records(folder, run)
        ok = ok[ok["success"]]
        simulated = np.median([np.median(simulate_label(folder, run, model, shape, t)[1].ttft) for t in traces()])
        gaps.append(fit_client_overhead(ok["ttft"].to_numpy(), np.array([simulated])))
    shape = EngineShape(shape.max_num_seqs, shape.max_num_batched_tokens, shape.kv_capacity_tokens,
                        shape.block_size, 0.0, float(np.median(gaps)))
    rows = []
    for label in predict:
        runs = _runs(results, label)
        frames = [load_records(folder, run) for run in runs]
        ok = [f[f["success"]] for f in frames]
        ttft = np.concatenate([f["ttft"].to_numpy(dtype=float) for f in ok])
        tpot = np.concatenate([f["tpot"].dropna().to_numpy(dtype=float) for f in ok])
        real = _figures(ttft, tpot, sum(results[r]["total_output_tokens"] for r in runs),
                        sum(results[r]["duration"] for r in runs))
        sims = [_pooled([simulate_label(folder, run, model, shape, t)[1] for run in runs]) for t in traces()]
        measured = [load_engine_steps(folder, run) for run in runs]
        row = {"label": label, "rate": results[label]["request_rate"], "runs": len(runs),
               "each_run": [{key: results[r][key] for key in KEYS} for r in runs],
               "range_p99_ttft_ms": bootstrap_range(ttft, 99), "range_p99_tpot_ms": bootstrap_range(tpot, 99),
               "speeds": run_speeds(measured, model),
               "speed_swings": run_swings(measured, model),
               "longest_pauses_s": [max((lost for _, lost in run_pauses(s, model)), default=0.0) for s in measured],
               "client_stalled": [bool(results[r].get("client_stall_material")) for r in runs]}
        for key in KEYS:
            sim = float(np.median([s[key] for s in sims]))
            row[f"measured_{key}"] = real[key]
            row[f"simulated_{key}"] = sim
            row[f"error_{key}"] = (sim - real[key]) / real[key] if real[key] else float("nan")
        rows.append(row)
    return rows
