"""Calibrate the roofline on any server's sweep (vLLM, SGLang, …) from its per-request records alone.

Two factors are fitted on the lowest measured rates, replaying each rate's own arrivals and lengths through
the simulator: a scale on the GPU part of the step (so the simulated median TPOT equals the measured one)
and a per-request overhead (the median TTFT the engine's steps do not explain). Both transfer to other rates,
tensor-parallel sizes and GPUs: the scale multiplies the target GPU's own efficiency priors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from llmbench.plan.roofline import RooflineModel
from llmbench.plan.scheduler import EngineShape
from llmbench.plan.simulator import simulate


@dataclass(frozen=True)
class Calibration:
    """`scale` outside FAR (a factor of 5 either way) means the device described is not the one measured."""

    scale: float  # simulated GPU time x scale = measured
    request_overhead: float  # seconds
    labels: tuple[str, ...]
    measured_tpot_ms: float
    simulated_tpot_ms: float

    @property
    def far(self) -> bool:
        return not FAR[0] <= self.scale <= FAR[1]

    def describe(self) -> str:
        return (f"calibrated on {', '.join(self.labels)}: GPU time x{self.scale:.2f} against the priors, "
                f"{self.request_overhead * 1000:.1f} ms per request (median TPOT {self.measured_tpot_ms:.1f} ms "
                f"measured, {self.simulated_tpot_ms:.1f} ms simulated)")


SCALE_RANGE = (1e-3, 1e4)  # wide enough for a CPU sweep against a GPU's priors, so it is never silently clamped
FAR = (0.2, 5.0)


def _runs(folder: Path, count: int) -> list[tuple[str, object]]:
    from llmbench.results import load_records, load_results

    runs = []
    for result in sorted((r for r in load_results(folder) if r.get("request_rate") != "inf"),
                         key=lambda r: float(r["request_rate"])):
        if result.get("saturated"):
            continue
        frame = load_records(folder, result["label"])
        ok = frame[frame["success"]] if not frame.empty else frame
        if len(ok) >= 5:
            runs.append((result["label"], ok))
        if len(runs) == count:
            break
    return runs


def calibrate(folder: Path, roof: RooflineModel, shape: EngineShape, rates: int = 2) -> Calibration:
    runs = _runs(Path(folder), rates)
    if not runs:
        raise ValueError(f"{folder}: no unsaturated finite rate with at least 5 successful requests to calibrate on")
    measured_tpot = float(np.median(np.concatenate([ok["tpot"].dropna().to_numpy() for _, ok in runs])))
    base = replace(shape, client_overhead=0.0)

    def simulated(scale: float) -> tuple[float, float]:
        tpots, ttfts = [], []
        for _, ok in runs:
            res = simulate(ok["scheduled"].to_numpy(), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                           roof.scaled(scale), base)
            tpots.append(res.tpot)
            ttfts.append(res.ttft)
        return float(np.median(np.concatenate(tpots))), float(np.median(np.concatenate(ttfts)))

    low, high = SCALE_RANGE
    for _ in range(24):  # TPOT grows with the scale: bisect in log space (to 0.5 %)
        mid = (low * high) ** 0.5
        if simulated(mid)[0] < measured_tpot:
            low = mid
        else:
            high = mid
    scale = (low * high) ** 0.5
    sim_tpot, sim_ttft = simulated(scale)
    measured_ttft = float(np.median(np.concatenate([ok["ttft"].to_numpy() for _, ok in runs])))
    return Calibration(scale, max(measured_ttft - sim_ttft, 0.0), tuple(label for label, _ in runs),
                       measured_tpot * 1000, sim_tpot * 1000)
