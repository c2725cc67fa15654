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
    prefill_scale: float = 1.0  # the compute part's own factor (1: not fitted)
    residuals: tuple[tuple[str, float, float], ...] = ()  # per run: label, median TPOT and TTFT fitted/measured - 1

    @property
    def misfit(self) -> float:
        """How far the fitted model is from the runs it was fitted on (the largest relative miss): a floor under
        any prediction it makes, since no model of load explains a server that was slower at the lower rate."""
        if len(self.residuals) < 2:  # one run: nothing to disagree with
            return 0.0
        return max(max(abs(tpot), abs(ttft)) for _, tpot, ttft in self.residuals)

    @property
    def far(self) -> bool:
        return not FAR[0] <= self.scale <= FAR[1]

    def describe(self) -> str:
        return (f"calibrated on {', '.join(self.labels)}: GPU time x{self.scale:.2f} against the priors"
                + (f", prompt compute x{self.prefill_scale:.2f} more" if self.prefill_scale != 1.0 else "")
                + f", {self.request_overhead * 1000:.1f} ms per request (median TPOT {self.measured_tpot_ms:.1f} ms "
                f"measured, {self.simulated_tpot_ms:.1f} ms simulated)"
                + ("; on its own runs the fit is off by " + ", ".join(
                    f"{label} TPOT {tpot:+.0%} TTFT {ttft:+.0%}" for label, tpot, ttft in self.residuals)
                   if len(self.residuals) > 1 else ""))

    def apply(self, roof: RooflineModel) -> RooflineModel:
        return replace(roof.scaled(self.scale), prefill_scale=roof.prefill_scale * self.prefill_scale)


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

    def replay(model: RooflineModel, which=runs):
        for _, ok in which:
            yield ok, simulate(ok["scheduled"].to_numpy(), ok["prompt_len"].to_numpy(),
                               ok["output_tokens"].to_numpy(), model, base)

    def simulated(scale: float, prefill: float) -> tuple[float, float]:
        results = [res for _, res in replay(replace(roof.scaled(scale), prefill_scale=prefill))]
        return (float(np.median(np.concatenate([r.tpot for r in results]))),
                float(np.median(np.concatenate([r.ttft for r in results]))))

    def bisect(grows_past, low: float, high: float, steps: int = 24) -> float:
        for _ in range(steps):  # in log space, to 0.5 % after 24 halvings of SCALE_RANGE
            mid = (low * high) ** 0.5
            low, high = (mid, high) if not grows_past(mid) else (low, mid)
        return (low * high) ** 0.5

    prefill = 1.0
    scale = bisect(lambda x: simulated(x, prefill)[0] >= measured_tpot, *SCALE_RANGE)
    slope = _ttft_slope(runs[:1])
    if slope is not None and slope > 0:  # the prompt's compute apart from the decode's memory traffic
        for _ in range(ROUNDS):  # the compute part adds to every step, so each fit moves the other's
            before = (scale, prefill)
            prefill = bisect(lambda x, s=scale: _ttft_slope(list(replay(replace(roof.scaled(s), prefill_scale=x),
                                                                     runs[:1])), simulated=True) >= slope,
                             *PREFILL_RANGE, steps=16)
            scale = bisect(lambda x, p=prefill: simulated(x, p)[0] >= measured_tpot, *SCALE_RANGE)
            if abs(scale / before[0] - 1) < 0.01 and abs(prefill / before[1] - 1) < 0.01:
                break
    fitted = [res for _, res in replay(replace(roof.scaled(scale), prefill_scale=prefill))]
    sim_tpot = float(np.median(np.concatenate([r.tpot for r in fitted])))
    sim_ttft = float(np.median(np.concatenate([r.ttft for r in fitted])))
    measured_ttft = float(np.median(np.concatenate([ok["ttft"].to_numpy() for _, ok in runs])))
    overhead = max(measured_ttft - sim_ttft, 0.0)
    residuals = tuple((label, float(np.median(res.tpot) / ok["tpot"].median() - 1),
                       float((np.median(res.ttft) + overhead) / ok["ttft"].median() - 1))
                      for (label, ok), res in zip(runs, fitted, strict=True))
    return Calibration(scale, overhead, tuple(label for label, _ in runs), measured_tpot * 1000, sim_tpot * 1000,
                       prefill, residuals)


PREFILL_RANGE = (1e-3, 1e3)
ROUNDS = 8  # alternate the two fits until neither factor moves by 1 %


def _ttft_slope(runs: list, simulated: bool = False) -> float | None:
    """Seconds of TTFT per prompt token at the lowest rate (least squares): the prompt's compute, which a
    median TPOT (memory-bound decode) cannot tell. `runs`: (label, frame) measured, or (frame, result)."""
    if simulated:
        prompts = np.concatenate([ok["prompt_len"].to_numpy() for ok, _ in runs])
        ttfts = np.concatenate([res.ttft for _, res in runs])
    else:
        prompts = np.concatenate([ok["prompt_len"].to_numpy() for _, ok in runs])
        ttfts = np.concatenate([ok["ttft"].to_numpy() for _, ok in runs])
    if len(prompts) < 10 or np.std(prompts) <= 0:
        return None
    return float(np.polyfit(prompts.astype(float), ttfts.astype(float), 1)[0])
