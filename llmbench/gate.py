"""Regression gates: fail only when a metric is worse beyond its tolerance *and* significantly so.

Inputs are runs: an llmbench results folder (per-request samples from the records), an llmbench result
JSON, a vLLM `--save-result` JSON (with `--save-detailed` it carries samples), or a baseline file written by
`--update-baseline`. Percentile metrics get bootstrap confidence intervals from the samples; with summaries
only, the gate says it is threshold-only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from llmbench import client_stalls, prefix_reuse
from llmbench.metrics import output_tokens, tpot
from llmbench.records import read_records
from llmbench.results import label_for, result_files

BASELINE_FORMAT = "llmbench-baseline/1"
MAX_SAMPLES = 2000
DEFAULT_TOLERANCES = {"p99_ttft": 0.10, "p99_tpot": 0.10, "output_throughput": 0.05}
THROUGHPUTS = ("output_throughput", "request_throughput", "total_token_throughput")
STAT_RE = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|ttfo)$")
REASONING_TOLERANCE = ("p99_ttfo", 0.10)  # gated by default when both runs streamed reasoning
UNLIKE = 0.15  # shares of prompt tokens found cached this far apart make two runs unlike


class GateInputError(ValueError):
    """Nothing comparable: exit code 2."""


@dataclass
class Run:
    """One load level of one run: its summary metrics and, when known, per-request samples (ms)."""

    label: str
    metrics: dict
    samples: dict[str, np.ndarray] = field(default_factory=dict)  # ttft, tpot, itl, e2el (ms); tokens
    duration: float | None = None
    model: str | None = None
    dataset: str | None = None
    without_stalls: dict[str, np.ndarray] | None = None  # the samples with the client's own stalls taken out


def parse_tolerances(text: str | None) -> dict[str, float]:
    """`p99_ttft=10%,p99_tpot=10%,output_throughput=5%` -> fractions."""
    if not text:
        return dict(DEFAULT_TOLERANCES)
    out = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise ValueError(f"bad tolerance {part!r}: use METRIC=PCT%")
        if name not in THROUGHPUTS and not STAT_RE.match(name):
            raise ValueError(f"unknown metric {name!r}: use e.g. p99_ttft, median_tpot, mean_e2el, output_throughput")
        value = value.strip()
        frac = float(value.rstrip("%")) / 100 if value.endswith("%") else float(value)
        if frac < 0:
            raise ValueError(f"tolerance for {name} must be non-negative")
        out[name] = frac
    return out


# -- reading runs -----------------------------------------------------------------------------------
def load_runs(path: Path | str) -> dict[str, Run]:
    path = Path(path)
    if not path.exists():
        raise GateInputError(f"{path}: no such file or folder")
    if path.is_dir():
        return _from_folder(path) if result_files(path) else _from_foreign(path)
    if path.suffix == ".jsonl":
        return _from_foreign(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise GateInputError(f"{path}: not JSON ({err.msg})") from None
    if isinstance(data, dict) and data.get("format") == BASELINE_FORMAT:
        return {label: _from_baseline(label, run, data) for label, run in data["runs"].items()}
    if isinstance(data, dict) and "completed" in data and "aiperf_version" not in data:
        return {_label(data): _from_result(data)}
    return _from_foreign(path)


def _from_foreign(path: Path) -> dict[str, Run]:
    from llmbench.foreign import ForeignFormatError, as_results_folder

    try:
        return _from_folder(as_results_folder(path))
    except ForeignFormatError:
        raise GateInputError(f"{path}: neither a results folder, a result JSON (vLLM or llmbench), a baseline, "
                             "nor another tool's results (SGLang, guidellm, AIPerf, inference-perf)") from None


def _label(data: dict) -> str:
    """The label of a result that carries none (vLLM's): from its rate and concurrency cap."""
    rate = data.get("request_rate", "inf")
    return label_for(math.inf if rate is None or str(rate) == "inf" else float(rate), data.get("max_concurrency"))


def _from_folder(folder: Path) -> dict[str, Run]:
    from llmbench.results import load_results, records_path

    runs = {}
    for data in load_results(folder):
        run = _from_result(data)
        path = records_path(folder, data)
        if path.is_file():
            records = [r for r in read_records(path) if not r.warmup and r.success]
            run.samples = samples(records)
            run.without_stalls = _without_stalls(records, data.get("client_stall_intervals"))
        runs[data.get("label") or _label(data)] = run
    if not runs:
        raise GateInputError(f"{folder}: no results in this folder")
    return runs


def _without_stalls(records: list, stalls: list | dict | None) -> dict[str, np.ndarray] | None:
    """The run's samples with the client's own stalls taken out of the requests they touched (None where none
    did): the smallest latencies the server can have given (client_stalls.without_stalls)."""
    hit = {id(r) for r in client_stalls.spanning(records, stalls)} if stalls else set()
    if not hit:
        return None
    own = client_stalls.by_worker(stalls)
    return samples([client_stalls.without_stalls(r, own.get(r.worker, [])) if id(r) in hit else r for r in records])


def samples(records) -> dict[str, np.ndarray]:
    return {
        "ttft": np.array([r.ttft * 1000 for r in records]),
        "tpot": np.array([t * 1000 for r in records if (t := tpot(r)) is not None]),
        "itl": np.array([g * 1000 for r in records for g in r.itl]),
        "e2el": np.array([r.latency * 1000 for r in records]),
        "tokens": np.array([output_tokens(r) for r in records], dtype=float),
    } | ({"ttfo": np.array([r.ttfo * 1000 for r in records if r.ttfo is not None])}
         if any(r.reasoning_tokens for r in records) else {})


def _from_result(data: dict) -> Run:
    run = Run(data.get("label") or _label(data), data, duration=data.get("duration"), model=data.get("model_id"),
              dataset=data.get("dataset") or data.get("dataset_name"))
    ttfts, itls = data.get("ttfts"), data.get("itls")  # vLLM --save-detailed (seconds)
    if ttfts:
        ok = [i for i, t in enumerate(ttfts) if t and t > 0]
        run.samples["ttft"] = np.array([ttfts[i] * 1000 for i in ok])
        if itls:
            run.samples["itl"] = np.array([g * 1000 for i in ok for g in itls[i]])
            lat = [ttfts[i] + sum(itls[i]) for i in ok]
            run.samples["e2el"] = np.array([x * 1000 for x in lat])
            outs = data.get("output_lens") or []
            if len(outs) == len(ttfts):
                run.samples["tpot"] = np.array([(lat[j] - ttfts[i]) / (outs[i] - 1) * 1000
                                                for j, i in enumerate(ok) if outs[i] > 1])
                run.samples["tokens"] = np.array([outs[i] for i in ok], dtype=float)
    return run


def _from_baseline(label: str, run: dict, data: dict) -> Run:
    def arrays(key: str) -> dict[str, np.ndarray] | None:
        return {k: np.asarray(v, dtype=float) for k, v in run[key].items()} if run.get(key) else None

    return Run(label, run["metrics"], arrays("samples") or {}, run.get("duration"), data.get("model"),
               data.get("dataset"), arrays("samples_without_stalls"))


def write_baseline(runs: dict[str, Run], path: Path | str, seed: int = 0) -> Path:
    """A small file to commit: summaries plus at most MAX_SAMPLES samples per metric, 0.1 ms resolution."""
    rng = np.random.default_rng(seed)
    keep = ["completed", "failed", "duration", *THROUGHPUTS] + \
        [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el", "ttfo") for s in ("mean", "median", "p90", "p99")]
    out = {"format": BASELINE_FORMAT, "model": None, "dataset": None, "runs": {}}
    for label, run in runs.items():
        out["model"], out["dataset"] = run.model, run.dataset
        samples = _kept(run.samples, rng)
        scale = (len(samples.get("tokens", [])) / run.samples["tokens"].size) if "tokens" in run.samples and \
            run.samples["tokens"].size else 1.0
        out["runs"][label] = {"metrics": {k: run.metrics.get(k) for k in keep if k in run.metrics},
                              "samples": samples, "duration": (run.duration or 0) * scale}
        if run.without_stalls:
            out["runs"][label]["samples_without_stalls"] = _kept(run.without_stalls, rng)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    return path


def _kept(samples: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, list[float]]:
    out = {}
    for name, values in samples.items():
        if values.size > MAX_SAMPLES:
            values = rng.choice(values, MAX_SAMPLES, replace=False)
        out[name] = [round(float(v), 1) for v in values]
    return out


# -- comparing ----------------------------------------------------------------------------------------
@dataclass
class Check:
    label: str
    metric: str
    baseline: float | None
    current: float | None
    change: float | None  # relative, signed so that positive is worse
    tolerance: float
    ci: tuple[float, float] | None  # bootstrap interval of the relative change (worse = positive)
    verdict: str  # pass | regression | inconclusive | missing
    method: str  # bootstrap | threshold-only
    detectable: float | None = None  # the smallest regression these run sizes could call significant
    needed: int | None = None  # requests per run that would detect the tolerance, when it is not detectable now
    why: str | None = None  # what made the check inconclusive, where not the run sizes


def statistic(name: str, samples: dict[str, np.ndarray], duration: float | None, idx=None) -> float | None:
    if name in THROUGHPUTS:
        tokens = samples.get("tokens")
        if tokens is None or not duration or name != "output_throughput":
            return None
        values = tokens if idx is None else tokens[idx]
        return float(values.sum() / duration)
    stat, metric = STAT_RE.match(name).groups()
    values = samples.get(metric)
    if values is None or values.size == 0:
        return None
    if idx is not None:
        values = values[idx]
    if stat == "mean":
        return float(values.mean())
    if stat == "median":
        return float(np.median(values))
    return float(np.percentile(values, float(stat[1:])))


def summary_value(name: str, metrics: dict) -> float | None:
    key = name if name in THROUGHPUTS else f"{name}_ms"
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) else None


def compare_one(label: str, name: str, base: Run, cur: Run, tolerance: float, confidence: float,
                rounds: int, rng: np.random.Generator) -> Check:
    """The check as timed; where the client's own stalls touched either run, the same check with them taken out
    too: a regression that only one of the two shows rests on the client's wait (a P99 set by requests the client
    itself held up), so the check is inconclusive instead of failing or passing CI on it."""
    check = _check(label, name, base, cur, tolerance, confidence, rounds, rng)
    if check.method != "bootstrap" or name in THROUGHPUTS or not (base.without_stalls or cur.without_stalls):
        return check
    clean = _check(label, name, _waitless(base, name), _waitless(cur, name), tolerance, confidence, rounds, rng)
    if (check.verdict == "regression") == (clean.verdict == "regression"):
        return check
    timed = "a regression as timed, none" if check.verdict == "regression" else "no regression as timed, one"
    return replace(check, verdict="inconclusive", needed=None, why=(
        f"{timed} with the client's own stalls taken out ({clean.change:+.1%}): the client's wait decides it; "
        "measure again"))


def _waitless(run: Run, name: str) -> Run:
    if run.without_stalls is None:
        return run
    value = statistic(name, run.without_stalls, run.duration)
    return replace(run, metrics={**run.metrics, f"{name}_ms": value}, samples=run.without_stalls)


def _check(label: str, name: str, base: Run, cur: Run, tolerance: float, confidence: float,
           rounds: int, rng: np.random.Generator) -> Check:
    lower_better = name not in THROUGHPUTS
    b, c = summary_value(name, base.metrics), summary_value(name, cur.metrics)
    if b is None or c is None:
        return Check(label, name, b, c, None, tolerance, None, "missing", "-")
    sign = 1.0 if lower_better else -1.0
    change = sign * (c - b) / b if b else 0.0
    metric = "tokens" if name in THROUGHPUTS else STAT_RE.match(name).group(2)
    bs, cs = base.samples.get(metric), cur.samples.get(metric)
    sampled = bs is not None and cs is not None and bs.size > 1 and cs.size > 1 and \
        (name not in THROUGHPUTS or (base.duration and cur.duration and name == "output_throughput"))
    if not sampled:
        verdict = "regression" if change > tolerance else "pass"
        return Check(label, name, b, c, change, tolerance, None, verdict, "threshold-only")
    changes = np.empty(rounds)
    for i in range(rounds):
        vb = statistic(name, base.samples, base.duration, rng.integers(0, bs.size, bs.size))
        vc = statistic(name, cur.samples, cur.duration, rng.integers(0, cs.size, cs.size))
        changes[i] = sign * (vc - vb) / vb if vb else 0.0
    alpha = 1.0 - confidence
    low, high = float(np.quantile(changes, alpha)), float(np.quantile(changes, 1 - alpha))
    # worse beyond tolerance by the point estimate, and worse at all with the chosen confidence
    verdict = "regression" if change > tolerance and low > 0 else "pass"
    # a true regression of d moves the interval up by d: it is significant once d exceeds the lower margin
    detectable = max(float(np.median(changes)) - low, 0.0)
    needed = None
    if verdict == "pass" and detectable > tolerance:
        verdict = "inconclusive"
        n = min(bs.size, cs.size)  # the margin shrinks as 1/sqrt(requests)
        needed = int(math.ceil(n * (detectable / tolerance) ** 2)) if tolerance > 0 else None
    return Check(label, name, b, c, change, tolerance, (low, high), verdict, "bootstrap", detectable, needed)


EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE, EXIT_INCONCLUSIVE = 0, 1, 2, 4


@dataclass
class GateResult:
    """Exit 1 on any regression; else 4 when some metric could not have detected a regression of its tolerance
    at these run sizes (unless inconclusive checks are allowed to pass); else 0."""

    checks: list[Check]
    warnings: list[str]
    allow_inconclusive: bool = False

    @property
    def inconclusive(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "inconclusive"]

    @property
    def exit_code(self) -> int:
        if any(c.verdict == "regression" for c in self.checks):
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive and not self.allow_inconclusive else EXIT_PASS


def _cache_unlike(label: str, base: Run, cur: Run) -> str | None:
    """Runs whose server found very different shares of their prompts in its prefix cache (prefix_reuse.py) are
    not like for like: a cache an earlier run left warm makes a TTFT look better than the code is."""
    shares = [run.metrics.get("server_prefix_hit_rate") for run in (base, cur)]
    known = [x for x in shares if x is not None]
    if not known or max(known) < prefix_reuse.NOTABLE or (len(known) == 2 and abs(shares[0] - shares[1]) < UNLIKE):
        return None
    said = ", ".join(f"{share:.0%} of the {name}'s" for name, share in zip(("baseline run", "current run"), shares,
                                                                              strict=True) if share is not None)
    return (f"{label}: the server found {said} prompt tokens in its prefix cache: not like for like (a cache left "
            "warm by an earlier run flatters TTFT and throughput; reset it or draw another --seed)")


def compare(baseline: dict[str, Run], current: dict[str, Run], tolerances: dict[str, float],
            confidence: float = 0.95, rounds: int = 2000, seed: int = 0) -> GateResult:
    common = [label for label in current if label in baseline]
    if not common:
        raise GateInputError(f"nothing comparable: baseline has {sorted(baseline)}, current has {sorted(current)}")
    warnings = []
    b0, c0 = baseline[common[0]], current[common[0]]
    if b0.model and c0.model and b0.model != c0.model:
        warnings.append(f"model differs: baseline {b0.model!r}, current {c0.model!r}")
    if b0.dataset and c0.dataset and b0.dataset != c0.dataset:
        warnings.append(f"dataset differs: baseline {b0.dataset!r}, current {c0.dataset!r}")
    for label in sorted(set(baseline) ^ set(current)):
        warnings.append(f"{label} is only in the {'baseline' if label in baseline else 'current'} run")
    warnings += [w for label in common if (w := _cache_unlike(label, baseline[label], current[label]))]
    if tolerances == DEFAULT_TOLERANCES and all("p99_ttfo_ms" in run.metrics for run in (b0, c0)):
        tolerances = dict([*tolerances.items(), REASONING_TOLERANCE])
    rng = np.random.default_rng(seed)
    checks = [compare_one(label, name, baseline[label], current[label], tol, confidence, rounds, rng)
              for label in common for name, tol in tolerances.items()]
    missing = {c.metric for c in checks if c.verdict == "missing"}
    for name in sorted(missing):
        warnings.append(f"metric {name} is missing from the baseline or the current run; not gated")
    if all(c.verdict == "missing" for c in checks):
        raise GateInputError("nothing comparable: none of the gated metrics is present in both runs")
    if any(c.method == "threshold-only" for c in checks):
        warnings.append("some metrics had no per-request samples: those are gated on thresholds only")
    return GateResult(checks, warnings)
