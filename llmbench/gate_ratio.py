"""Ratio gates for shared, noisy runners: candidate and reference measured interleaved in one job.

A machine that drifts slows both sides alike, so the ratio candidate/reference stays put while absolute
figures wander. Each round runs the same workload against the reference, then the candidate (A B A B ...);
samples are pooled per side and the ratio of each metric gets a bootstrap interval.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmbench import datasets
from llmbench.gate import THROUGHPUTS, samples, statistic
from llmbench.runner import RunConfig, execute
from llmbench.target import Target, load_tokenizer, open_target

RATIO_FORMAT = "llmbench-ratio-baseline/1"


@dataclass
class Side:
    name: str
    base_url: str | None  # None: a bundled engine with `flags`
    flags: dict


def parse_flags(text: str) -> dict:
    """`batching=static,enable_prefix_caching=false` -> engine flags for a bundled engine."""
    flags: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"bad engine flag {part!r}: use key=value")
        low = value.lower()
        flags[key.replace("-", "_")] = True if low == "true" else False if low == "false" else value
    return flags


def measure(sides: list[Side], dataset: str, dataset_options: dict, num_prompts: int, rounds: int,
            model: str | None = None, rate: float = math.inf, seed: int = 0, ignore_eos: bool = True
            ) -> dict[str, list[tuple[list, float]]]:
    """Run the workload `rounds` times per side, alternating sides; return each side's (records, seconds)
    per round."""
    per_round: dict[str, list] = {s.name: [] for s in sides}
    with contextlib.ExitStack() as stack:
        targets: dict[str, Target] = {
            s.name: stack.enter_context(open_target(s.base_url, model, s.flags, None)) for s in sides}
        tokenizer, _, _ = load_tokenizer(None, targets[sides[0].name])
        requests, _ = datasets.build(dataset, tokenizer, num_prompts, seed, **dataset_options)
        offsets = np.zeros(len(requests)) if math.isinf(rate) else np.arange(len(requests)) / rate
        for _ in range(rounds):
            for side in sides:
                target = targets[side.name]
                cfg = RunConfig(base_url=target.base_url, model=target.model, rate=rate, seed=seed,
                                ignore_eos=ignore_eos, scrape=False)
                started = time.perf_counter()
                result = execute(cfg, requests, offsets, None)
                per_round[side.name].append(([r for r in result.records if r.success],
                                             time.perf_counter() - started))
    return per_round


def ratios(measured: dict[str, list], candidate: str, reference: str, metrics: list[str], confidence: float,
           rounds: int = 2000, seed: int = 0) -> dict[str, dict]:
    """candidate/reference for each metric. Latency percentiles get a bootstrap interval over requests;
    throughputs, whose noise is in the clock rather than in the requests, get the range of the per-round
    ratios (each round pairs one candidate run with the reference run next to it)."""
    rng = np.random.default_rng(seed)

    def pool(side: str) -> tuple[list, float]:
        return [r for recs, _ in measured[side] for r in recs], sum(d for _, d in measured[side])

    (c_records, c_dur), (r_records, r_dur) = pool(candidate), pool(reference)
    cs, rs = samples(c_records), samples(r_records)
    out = {}
    for name in metrics:
        key = "tokens" if name in THROUGHPUTS else name.split("_", 1)[1]
        point = statistic(name, cs, c_dur) / statistic(name, rs, r_dur)
        if name in THROUGHPUTS:
            per_round = [statistic(name, samples(cr), cd) / statistic(name, samples(rr), rd)
                         for (cr, cd), (rr, rd) in zip(measured[candidate], measured[reference], strict=True)]
            out[name] = {"ratio": point, "ci": [min(per_round), max(per_round)], "per_round": per_round,
                         "candidate": statistic(name, cs, c_dur), "reference": statistic(name, rs, r_dur)}
            continue
        draws = np.empty(rounds)
        for i in range(rounds):
            ci = rng.integers(0, cs[key].size, cs[key].size)
            ri = rng.integers(0, rs[key].size, rs[key].size)
            draws[i] = statistic(name, cs, c_dur, ci) / statistic(name, rs, r_dur, ri)
        alpha = (1 - confidence) / 2
        out[name] = {"ratio": point, "ci": [float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))],
                     "candidate": statistic(name, cs, c_dur), "reference": statistic(name, rs, r_dur)}
    return out


def gate(current: dict[str, dict], baseline: dict[str, dict], tolerances: dict[str, float]) -> list[dict]:
    """Fail a metric when its ratio moved the wrong way beyond tolerance and its interval excludes the
    baseline ratio."""
    rows = []
    for name, cur in current.items():
        base = baseline.get(name)
        if base is None:
            rows.append({"metric": name, "verdict": "missing", **cur})
            continue
        lower_better = name not in THROUGHPUTS
        change = (cur["ratio"] - base["ratio"]) / base["ratio"] * (1 if lower_better else -1)
        beyond = change > tolerances.get(name, 0.10)
        significant = cur["ci"][0] > base["ratio"] if lower_better else cur["ci"][1] < base["ratio"]
        rows.append({"metric": name, "baseline_ratio": base["ratio"], "ratio": cur["ratio"], "ci": cur["ci"],
                     "change": change, "tolerance": tolerances.get(name, 0.10),
                     "verdict": "regression" if beyond and significant else "pass"})
    return rows


def save(path: Path, pairs: dict[str, dict], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": RATIO_FORMAT, **meta, "pairs": pairs}, indent=1) + "\n")


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    if data.get("format") != RATIO_FORMAT:
        raise ValueError(f"{path}: not a ratio baseline ({RATIO_FORMAT})")
    return data
