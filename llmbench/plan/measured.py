"""The plan's measured layer: a sweep's own SLO capacity and figures, quoted beside the simulation and
preferred to it where the two disagree."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from llmbench import prefix_reuse
from llmbench.plan import bands
from llmbench.plan.request import PlanError, PlanRequest, replicas_for
from llmbench.slo import SLO, attainment_points, capacity, lower_rates, rate_unit


def measured_points(folder: Path, slo: SLO) -> tuple[list[dict], object]:
    """Per finite measured rate: attainment of the SLO and the figures the plan quotes; and the records."""
    from llmbench.results import load_records, load_results

    results = [r for r in load_results(folder) if r.get("request_rate") != "inf"]
    if not results:
        raise PlanError(f"{folder}: no finite-rate results to plan from (run `llmbench sweep` first)")
    frame = load_records(folder)
    if frame.empty:
        raise PlanError(f"{folder}: the results name no per-request records (*.records.jsonl), which the plan needs")
    by_label = {r["label"]: r for r in results}
    points = [p | _measured_figures([by_label[label] for label in p["runs"]], frame)
              | _turns([by_label[label] for label in p["runs"]]) for p in attainment_points(results, frame, slo)]
    return sorted(points, key=lambda p: p["rate"]), frame


LATENCY_COLUMNS = {"ttft": "ttft", "tpot": "tpot", "e2el": "latency"}
SHARE_FLOOR = 0.02  # a measured prefix share below this is a chat template's block, left out of the plan


def _turns(runs: list[dict]) -> dict:
    """`turns`: the requests a conversation brought, where the rate opened multi-turn conversations."""
    if rate_unit(runs) != "conversations/s":
        return {}
    return {"turns": float(np.mean([r["sessions"]["mean_turns"] for r in runs if r.get("sessions")]))}


def _measured_figures(runs: list[dict], frame) -> dict:
    """The figures the plan quotes for one measured rate: its result's, or for several runs of the rate
    (`--append`) percentiles over their pooled requests and the mean of their throughputs."""
    if len(runs) == 1:
        keys = ("achieved_rate", "output_throughput") + tuple(
            f"{stat}_{m}_ms" for m in LATENCY_COLUMNS for stat in ("median", "p99"))
        return {k: runs[0].get(k) for k in keys}
    rows = frame[frame["label"].isin([r["label"] for r in runs]) & frame["success"]]
    rows = rows[~rows["warmup"].astype(bool)] if "warmup" in rows else rows
    out = {k: float(np.mean([r[k] for r in runs if r.get(k) is not None] or [np.nan]))
           for k in ("achieved_rate", "output_throughput")}
    for metric, column in LATENCY_COLUMNS.items():
        values = rows[column].dropna().to_numpy(dtype=float)
        for stat, q in (("median", 50), ("p99", 99)):
            out[f"{stat}_{metric}_ms"] = float(np.percentile(values, q) * 1000) if len(values) else None
    return out


def prefix_share(folder: Path) -> tuple[float, str | None]:
    """The share of the sweep's prompt tokens its server found in its prefix cache (its own counters, weighted by
    each rate's prompt tokens), where the workload reuses prompts by design (a multi-turn conversation's history, a
    shared prefix), and a note; 0 for a workload drawn at random, whose reuse was an accident (an earlier command
    sent the same draw) the plan does not carry. Replayed without it, a multi-turn sweep on vLLM-CPU (41 % of its
    prompt tokens cached) calibrated as if every prefill were whole."""
    from llmbench.results import load_results

    seen = [r for r in load_results(folder) if r.get("server_prefix_hit_rate") is not None
            and r.get("total_input_tokens")]
    if not seen:
        return 0.0, None
    share = (sum(r["server_prefix_hit_rate"] * r["total_input_tokens"] for r in seen)
             / sum(r["total_input_tokens"] for r in seen))
    datasets = sorted({r.get("dataset") or "?" for r in seen})
    if all(d in prefix_reuse.DRAWN for d in datasets):
        return 0.0, (f"the sweep's server found {share:.0%} of its prompt tokens already cached, a {datasets[0]} "
                     "draw an earlier command had sent (its TTFTs flatter): planned with none "
                     "(--prefix-hit-rate)") if share >= prefix_reuse.NOTABLE else None
    if share < SHARE_FLOOR:
        return 0.0, None
    return share, (f"prefix cache: the server found {share:.0%} of the sweep's prompt tokens cached (its own "
                   f"counters; {', '.join(datasets)} reuses prompts by design): calibrated and simulated with that "
                   "share of each prompt (--prefix-hit-rate sets another)")


def capacity_of(folder: Path, slo: SLO) -> dict:
    """The measured layer: the sweep's own answer (`per_replica_rate` None, with `missing` saying which
    measurement would give one, when no rate met the SLO) and the figures the other layers reuse."""
    points, frame = measured_points(folder, slo)
    turns = [p["turns"] for p in points if p.get("turns")]
    unit = "conversations/s" if turns else "req/s"
    cap = capacity(points, slo, unit)
    ok = frame[frame["success"]]
    out = {"per_replica_rate": cap.rate, "note": cap.note, "points": points,
           "max_output_throughput": max(p["output_throughput"] for p in points),
           "mean_output_tokens": float(ok["output_tokens"].mean()),
           "mean_prompt_tokens": float(ok["prompt_len"].mean())}
    if turns and cap.rate is not None:  # the plan's QPS counts requests
        out["conversations"] = {"rate": cap.rate, "turns": float(np.mean(turns))}
        out["per_replica_rate"] = cap.rate * out["conversations"]["turns"]
    if cap.rate is None:
        low = points[0]
        out["missing"] = (
            f"the SLO ({slo.describe()}) is not met even at the lowest measured rate {low['rate']:g} {unit}: "
            f"only {low['attainment']:.1%} of requests met it (P99 TTFT {low['p99_ttft_ms']:.0f} ms, "
            f"P99 TPOT {low['p99_tpot_ms']:.1f} ms). Measure lower rates (--rate {lower_rates(low['rate'])}) "
            "or relax the SLO.")
    return out


def disagreement(plan: dict) -> None:
    """Measured and simulated per-replica rates that disagree beyond the simulated band: said, and the
    measured one is the answer (it already is: the simulation only fills in what was not measured)."""
    measured, sim = plan.get("measured") or {}, plan.get("simulated") or {}
    rate, band = measured.get("per_replica_rate"), sim.get("per_replica_rate_band")
    if rate is None or not band or band[0] <= rate <= band[1]:
        return
    plan["disagreement"] = {"measured": rate, "simulated": sim["per_replica_rate"], "simulated_band": band}
    plan["estimates"].insert(0, (
        f"measured {rate:.3g} req/s per replica is outside the simulated band [{band[0]:.3g}–{band[1]:.3g}] "
        f"(simulated {sim['per_replica_rate']:.3g}, x{sim['per_replica_rate'] / rate:.2g} the measurement): the "
        "measured figure is the answer; the simulation does not describe this server (check --model, --gpu, "
        "--engine)"))


def at_rate(plan: dict, cap: dict, rate: float) -> None:
    """The figures measured at the rate asked about, beside the prediction."""
    point = next((p for p in cap["points"] if abs(p["rate"] - rate) <= 0.01 * rate), None)
    if point is None:
        rates = ", ".join(f"{p['rate']:g}" for p in cap["points"])
        plan["estimates"].append(f"nothing was measured at {rate:g} req/s (measured: {rates})")
        return
    plan["measured"] = {"point": point}
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_e2el_ms", "p99_e2el_ms"):
        if point.get(key) is not None:
            pct, metric = key.split("_")[0], key.split("_")[1]
            plan["figures"].append(bands.figure(f"{'P50' if pct == 'median' else pct.upper()} {metric.upper()}",
                                           point[key], "ms", "measured", None))


def layer(req: PlanRequest, plan: dict, cap: dict) -> None:
    if cap["per_replica_rate"] is None or req.mode not in ("qps", "capacity"):
        return
    per_replica = req.gpus_per_replica or 1
    plan["measured"] = {**cap, "gpus_per_replica": per_replica}
    plan["figures"].append(bands.figure("goodput per replica (SLO capacity)", cap["per_replica_rate"], "req/s",
                                   "measured", None))
    if req.qps is not None:
        replicas = replicas_for(req.qps, cap["per_replica_rate"], req.burst_headroom, req.spares)
        plan["measured"] |= {"replicas": replicas, "gpus": replicas * per_replica}
        per_gpu = cap["max_output_throughput"] / per_replica
        plan["article_formulas"] = {
            "throughput_formula_gpus": math.ceil(req.qps * cap["mean_output_tokens"] / per_gpu * 1.5),
            "throughput_formula": "GPUs = peak QPS x mean output tokens / per-GPU output tokens/s x 1.5",
            "per_gpu_output_tokens_per_s": per_gpu}
    else:
        plan["answer"] = (f"one replica sustains {cap['per_replica_rate']:.2f} req/s under {req.slo.describe()}, measured"
                          + (f" ({c['rate']:.3g} conversations/s of {c['turns']:.3g} turns each)"
                             if (c := cap.get("conversations")) else ""))
