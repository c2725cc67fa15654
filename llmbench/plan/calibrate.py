"""Calibrate the roofline on any server's sweep (vLLM, SGLang, …) from its per-request records alone.

Factors are fitted on the lowest measured rates, replaying each rate's own arrivals and lengths through the
simulator: a scale on the GPU part of the step (so the simulated median TPOT equals the measured one), the
prompt's compute (TTFT against prompt length), a per-request overhead (the median TTFT the engine's steps do not
explain) and a cost per sequence in a step: each token costs the server something the GPU priors do not hold (on
a CPU server, detokenizing and streaming every token on the very cores that run the model). Where the records hold
each token's arrival, that cost is what the decode-only steps' growth against the batch (decode_gaps.py) exceeds
the model's own by, and the scale matches the pooled median TPOT; where they hold the first and last token only,
it is read from two rates or more: where the higher rate's TPOT rises faster than the model's own batching makes
it (one scale misses either end by more than 5 %), the scale matches the lowest rate's median TPOT and the
per-sequence cost the highest's.
All transfer to other rates, tensor-parallel sizes and GPUs: the scale multiplies the target GPU's own efficiency
priors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from llmbench.client_stalls import waited
from llmbench.plan.decode_gaps import DecodeCurve, decode_curve
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.request_spread import RequestSpread
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.simulator import simulate
from llmbench.plan.step_jitter import describe as describe_jitter
from llmbench.plan.step_jitter import jitter_offsets
from llmbench.plan.workload import sent_times
from llmbench.steady_state import MATERIAL_MS, MATERIAL_SHARE


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
    seq_overhead: float = 0.0  # seconds per sequence in a step beyond the engine profile's (0: not fitted)
    in_client_stalls: int = 0  # requests replayed but not fitted on: the client's own wait moved their timings
    decode_gaps: int = 0  # token gaps of decode-only steps `seq_overhead` was read from (0: from two rates' TPOT)
    spread: RequestSpread | None = None  # tail term `request spread`: what the fitted replay misses per request
    step_jitter: tuple[float, ...] = ()  # tail term `step jitter`, where asked for: the replays drew from it
    jitter_gaps: int = 0  # the quiet token gaps it was read from

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
                + (f", {self.seq_overhead * 1e6:.0f} µs more per sequence a step" if self.seq_overhead else "")
                + (f" (from {self.decode_gaps:,} token gaps of decode-only steps)" if self.decode_gaps else "")
                + f", {self.request_overhead * 1000:.1f} ms per request (median TPOT {self.measured_tpot_ms:.1f} ms "
                f"measured, {self.simulated_tpot_ms:.1f} ms simulated)"
                + ("; on its own runs the fit is off by " + ", ".join(
                    f"{label} TPOT {tpot:+.0%} TTFT {ttft:+.0%}" for label, tpot, ttft in self.residuals)
                   if len(self.residuals) > 1 else "")
                + (f"; {self.in_client_stalls} request(s) whose TTFT or TPOT the client's own stalls moved "
                   "replayed, not fitted on" if self.in_client_stalls else "")
                + (f"; {describe_jitter(self.step_jitter, self.jitter_gaps)}" if self.step_jitter else ""))

    def apply(self, roof: RooflineModel) -> RooflineModel:
        return _fitted(roof, self.scale, roof.prefill_scale * self.prefill_scale, self.seq_overhead)


def _fitted(roof: RooflineModel, scale: float, prefill_scale: float, seq_overhead: float) -> RooflineModel:
    roof = replace(roof.scaled(scale), prefill_scale=prefill_scale)
    if not seq_overhead:
        return roof
    return replace(roof, engine=replace(roof.engine, seq_overhead=roof.engine.seq_overhead + seq_overhead))


SCALE_RANGE = (1e-3, 1e4)  # wide enough for a CPU sweep against a GPU's priors, so it is never silently clamped
FAR = (0.2, 5.0)


def _runs(folder: Path, count: int) -> list[tuple[str, object]]:
    """The `count` lowest unsaturated finite rates, each as (label, its successful requests). A rate measured
    in several runs (`--append`: rate-2, rate-2-run2, ...) is one rate: its runs' requests pooled, each run
    replayed on its own arrivals (the records' `label`), and saturated if any of its runs was."""
    from llmbench.results import load_records, load_results, runs_by_rate

    runs = []
    for rate, results in runs_by_rate(load_results(folder)).items():
        if math.isinf(rate) or any(r.get("saturated") for r in results):
            continue
        frames = [_marked(f, r) for f, r in ((load_records(folder, r["label"]), r) for r in results) if not f.empty]
        ok = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        ok = ok[ok["success"]] if not ok.empty else ok
        if len(ok) >= 5:
            label = results[0]["label"] + (f" x{len(results)}" if len(results) > 1 else "")
            runs.append((label, ok))
        if len(runs) == count:
            break
    return runs


def _marked(frame: pd.DataFrame, result: dict) -> pd.DataFrame:
    """The run's records with `in_client_stall`: a request whose TTFT or TPOT the client's own stalls (its rate
    JSON's `client_stall_intervals`) moved materially (10 % and 10 ms, as the run's stall note judges a
    percentile). It stays in every replay (the server served it; its send is when the server received it) and
    out of every figure fitted on (`timed`). A 120 ms stall inside a 200-token stream moves its TPOT by half a
    millisecond: that request is fitted on."""
    stalls = result.get("client_stall_intervals") or []
    workers = frame.get("worker")
    first = frame["start"] + frame["ttft"].fillna(0.0)
    ttft_wait = waited(frame["start"], first, stalls, workers)
    tpot_wait = waited(first, frame["end"], stalls, workers) / np.maximum(frame["output_tokens"].fillna(1) - 1, 1)

    def moved(wait: np.ndarray, value: pd.Series) -> np.ndarray:
        return wait > np.maximum(MATERIAL_SHARE * (value.fillna(np.inf) - wait), MATERIAL_MS / 1000)

    return frame.assign(in_client_stall=moved(ttft_wait, frame["ttft"]) | moved(tpot_wait, frame["tpot"]))


def timed(ok: pd.DataFrame) -> pd.DataFrame:
    """The requests whose timings are the server's alone."""
    return ok[~ok["in_client_stall"]] if "in_client_stall" in ok else ok


def calibrate(folder: Path, roof: RooflineModel, shape: EngineShape, rates: int,
              per_sequence: bool = True, step_jitter: bool = False) -> Calibration:
    """`per_sequence`: fit the cost per sequence in a step, from the decode-only steps' token gaps or where the
    higher rate's TPOT rises (False: one scale on the pooled median TPOT, as before that term). `step_jitter`:
    every replay's steps draw from the decode-only gaps' spread (tail term `step jitter`), where the records
    hold it."""
    runs = _runs(Path(folder), rates)
    if not runs:
        raise ValueError(f"{folder}: no unsaturated finite rate with at least 5 successful requests to calibrate on")
    measured_tpot = float(np.median(np.concatenate([timed(ok)["tpot"].dropna().to_numpy() for _, ok in runs])))
    curve = _curve(Path(folder), runs) if per_sequence or step_jitter else None
    jitter = jitter_offsets(curve.offsets) if step_jitter and curve is not None else ()
    base = replace(shape, client_overhead=0.0, step_jitter=jitter)

    def replay(model: RooflineModel, which=runs):
        for _, pooled in which:
            for _, ok in pooled.groupby("label", sort=False):
                res = simulate(sent_times(ok), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(), model,
                               base)
                keep = ~ok["in_client_stall"].to_numpy()
                yield ok[keep], res.only(keep)

    def tpot(model: RooflineModel, which=runs) -> float:
        return float(np.median(np.concatenate([res.tpot for _, res in replay(model, which)])))

    def bisect(grows_past, low: float, high: float, within: float = 1e-3) -> float:
        """In log space until the bracket is `within` wide: 14 halvings of SCALE_RANGE, each a replay of every
        run. A fixed 24 went on to a millionth, far inside the runs' own noise: stopping at 0.1 % took Z6's
        evaluation (benchmarks/README.md) from 154 to 117 s and the calibration tests from 135 to 100 s."""
        while high > low * (1 + within):
            mid = (low * high) ** 0.5
            low, high = (mid, high) if not grows_past(mid) else (low, mid)
        return (low * high) ** 0.5

    def bracket(grows_past, start: float, bounds: tuple[float, float]):
        """The doubling around `start` where `grows_past` flips. The TTFT slope rises with the prompt's compute
        only up to where the run saturates (past it queueing swamps the prompt length and the slope falls), so a
        bisection over the whole range can step past that peak and run off to its end (a prompt compute x270
        where x1 was true); the slope is searched from the last fit outwards instead."""
        if grows_past(start):
            high, low = start, start / 2
            while low > bounds[0] and grows_past(low):
                high, low = low, low / 2
            return grows_past, max(low, bounds[0]), high
        low, high = start, start * 2
        while high < bounds[1] and not grows_past(high):
            low, high = high, high * 2
        return grows_past, low, min(high, bounds[1])

    prefill, per_seq = 1.0, 0.0
    scale = bisect(lambda x: tpot(_fitted(roof, x, prefill, per_seq)) >= measured_tpot, *SCALE_RANGE)
    slope = _ttft_slope(runs[:1])
    lowest, highest = runs[:1], runs[-1:]
    low_tpot, high_tpot = (float(timed(ok)["tpot"].median()) for _, ok in (runs[0], runs[-1]))
    one_scale = [tpot(_fitted(roof, scale, prefill, 0.0), [run]) / float(timed(run[1])["tpot"].median()) - 1
                 for run in (runs[0], runs[-1])] if per_sequence and len(runs) > 1 else [0.0]
    rises = high_tpot > low_tpot and max(map(abs, one_scale)) > ONE_SCALE_TOLERANCE
    for _ in range(ROUNDS):  # each factor adds to every step, so each fit moves the others: alternate
        before = (scale, prefill, per_seq)
        if slope is not None and slope > 0:  # the prompt's compute apart from the decode's memory traffic
            prefill = bisect(*bracket(lambda x, s=scale, q=per_seq: _ttft_slope(
                list(replay(_fitted(roof, s, x, q), runs[:1])), simulated=True) >= slope, prefill, PREFILL_RANGE),
                within=3e-3)
        if per_sequence and curve is not None:  # the decode-only gaps' slope on the batch, past the model's own
            per_seq = max(curve.slope() - curve.slope(
                lambda n, context, m=_fitted(roof, scale, prefill, 0.0): m.step_time(0, n, context)), 0.0)
            scale = bisect(lambda x, p=prefill, q=per_seq: tpot(_fitted(roof, x, p, q)) >= measured_tpot,
                           *SCALE_RANGE)
        elif rises:
            if tpot(_fitted(roof, scale, prefill, SEQ_RANGE[0]), highest) < high_tpot:
                per_seq = bisect(lambda x, s=scale, p=prefill: tpot(_fitted(roof, s, p, x), highest) >= high_tpot,
                                 *SEQ_RANGE)
            else:
                per_seq = 0.0
            scale = bisect(lambda x, p=prefill, q=per_seq: tpot(_fitted(roof, x, p, q), lowest) >= low_tpot,
                           *SCALE_RANGE)
        else:
            scale = bisect(lambda x, p=prefill, q=per_seq: tpot(_fitted(roof, x, p, q)) >= measured_tpot,
                           *SCALE_RANGE)
        if all(abs(a - b) <= 0.01 * max(abs(b), 1e-12) for a, b in zip((scale, prefill, per_seq), before,
                                                                        strict=True)):
            break
    model = _fitted(roof, scale, prefill, per_seq)
    pairs = [list(replay(model, [run])) for run in runs]  # per rate, its runs: (measured, replayed)
    fitted = [[res for _, res in rate] for rate in pairs]
    sim_tpot = float(np.median(np.concatenate([r.tpot for rate in fitted for r in rate])))
    sim_ttft = float(np.median(np.concatenate([r.ttft for rate in fitted for r in rate])))
    measured_ttft = float(np.median(np.concatenate([timed(ok)["ttft"].to_numpy() for _, ok in runs])))
    overhead = max(measured_ttft - sim_ttft, 0.0)
    residuals = tuple((label, float(np.median(np.concatenate([r.tpot for r in rate])) / ok["tpot"].median() - 1),
                       float((np.median(np.concatenate([r.ttft for r in rate])) + overhead) / ok["ttft"].median() - 1))
                      for (label, ok), rate in zip(((label, timed(ok)) for label, ok in runs), fitted, strict=True))
    both = [pair for rate in pairs for pair in rate]
    spread = RequestSpread.from_replay(
        np.concatenate([ok["ttft"].to_numpy(dtype=float) for ok, _ in both]),
        np.concatenate([res.ttft for _, res in both]) + overhead,
        np.concatenate([ok["tpot"].to_numpy(dtype=float)[res.multi_token] for ok, res in both]),
        np.concatenate([res.tpot for _, res in both]))
    return Calibration(scale, overhead, tuple(label for label, _ in runs), measured_tpot * 1000, sim_tpot * 1000,
                       prefill, residuals, per_seq, sum(int(ok["in_client_stall"].sum()) for _, ok in runs),
                       curve.gaps if per_sequence and curve is not None else 0, spread, jitter,
                       len(curve.offsets) if jitter else 0)


def _curve(folder: Path, runs: list) -> DecodeCurve | None:
    """The decode-only token gaps of the runs calibrated on, from the requests whose timings are the server's."""
    keep = {label: set(run.loc[~run["in_client_stall"], "index"]) for _, ok in runs
            for label, run in ok.groupby("label", sort=False)}
    return decode_curve(folder, list(keep), keep)


PREFILL_RANGE = (1e-3, 1e3)
ROUNDS = 8  # alternate the fits until no factor moves by 1 %
SEQ_RANGE = (1e-7, 1.0)  # seconds per sequence a step; below the floor it is not fitted (0)
# one scale that follows both ends' median TPOT this closely needs no per-sequence cost: a steady server whose TPOT
# rose by the measurement's noise alone (a loaded client) must not be given one
ONE_SCALE_TOLERANCE = 0.05


def _ttft_slope(runs: list, simulated: bool = False) -> float | None:
    """Seconds of TTFT per prompt token at the lowest rate (least squares): the prompt's compute, which a
    median TPOT (memory-bound decode) cannot tell. `runs`: (label, frame) measured, or (frame, result)."""
    if simulated:
        prompts = np.concatenate([ok["prompt_len"].to_numpy() for ok, _ in runs])
        ttfts = np.concatenate([res.ttft for _, res in runs])
    else:
        prompts = np.concatenate([timed(ok)["prompt_len"].to_numpy() for _, ok in runs])
        ttfts = np.concatenate([timed(ok)["ttft"].to_numpy() for _, ok in runs])
    if len(prompts) < 10 or np.std(prompts) <= 0:
        return None
    return float(np.polyfit(prompts.astype(float), ttfts.astype(float), 1)[0])
