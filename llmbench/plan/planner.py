"""`llmbench plan`: the answer for a workload, an engine and GPUs, each figure labelled and banded.

Layers: measured (a sweep's own SLO capacity, measured.py), simulated (a discrete-event simulation of the engine's
scheduler driven by a step-time model, replica.py) and estimated (memory and the articles' formulas).
Questions (request.py): GPUs for --qps, capacity under the SLO, latencies --at-rate or at --concurrency, and
--max-throughput.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from llmbench.plan import bands, gpus, measured, search
from llmbench.plan.replica import Replica, calibrated_replica, catalog_replica, fitted_replica
from llmbench.plan.request import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    PlanError,
    PlanRequest,
    params_text,
    replicas_for,
)
from llmbench.plan.workload import Workload

__all__ = ["PlanError", "PlanRequest", "Replica", "catalog_replica", "make_plan", "params_text", "replicas_for"]


BEYOND_CALIBRATION = 3.0  # requests in flight, as a multiple of the calibration's most, past which a plan says so
API_SERVER_BOUND = 0.8  # share of the API server's time spent streaming from which it, not the GPU, sets the pace


def _what_is_planned(req: PlanRequest, folder: Path | None, fitted: bool) -> tuple[PlanRequest, list[str]]:
    """The model and device the plan is for, never assumed silently: the defaults only without --results (and
    said); a foreign sweep's model from its own /v1/models root when that is a local checkpoint; its device
    from --gpu, --measured-gpu or --gpu-spec, else an error that says so."""
    notes = []
    model, gpu = req.model, req.gpu
    if folder is None:
        if model is None or (gpu is None and req.gpu_spec is None):
            notes.append(f"planned for {model or DEFAULT_MODEL} on {gpu or DEFAULT_GPU}: "
                         f"{'the defaults' if model is None and gpu is None else 'a default'} (--model, --gpu)")
        return replace(req, model=model or DEFAULT_MODEL, gpu=gpu or DEFAULT_GPU), notes
    if fitted:
        return replace(req, model=model or DEFAULT_MODEL, gpu=gpu or DEFAULT_GPU), notes
    if model is None:
        model = _served_config(folder)
        if model is None:
            raise PlanError(f"{folder}: which model did this sweep serve? pass --model (a catalog name or a "
                            "config.json path)")
        notes.append(f"model: {model} (the served model's checkpoint, from the results' /v1/models)")
    if req.prefix_hit_rate is None:
        share, said = measured.prefix_share(folder)
        req = replace(req, prefix_hit_rate=share)
        notes += [said] if said else []
    if gpu is None and req.gpu_spec is None and req.measured_gpu is None:
        raise PlanError(f"{folder}: which device did this sweep run on? pass --gpu (or --measured-gpu and --gpu) "
                        "for a catalog GPU, or --gpu-spec FILE for any other device, a CPU included (name, "
                        "memory_gb, bandwidth_gb_s, bf16_tflops)")
    return replace(req, model=model, gpu=gpu or req.measured_gpu), notes


def _served_config(folder: Path) -> str | None:
    from llmbench.results import load_metadata

    try:
        listed = load_metadata(folder).get("target", {}).get("models") or []
    except (OSError, ValueError):
        return None
    for entry in listed:
        root = entry.get("root") or entry.get("id")
        if root and (Path(root) / "config.json").is_file():
            return str(Path(root) / "config.json")
    return None


# -- answers ------------------------------------------------------------------------------------------
def _latency_figures(point: dict, rep: Replica, band: dict | None = None) -> list[dict]:
    """Means and medians take the latency band, P90 and P99 the P99 one (`band`: the replica's at this load)."""
    band = band or rep.band
    figs = []
    names = {"mean": "mean", "median": "P50", "p90": "P90", "p99": "P99"}
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for pct, name in names.items():
            key = f"{pct}_{metric}_ms"
            if key in point:
                which = "p99" if pct in ("p90", "p99") else "latency"
                figs.append(bands.figure(f"{name} {metric.upper()}", point[key], "ms", rep.label,
                                    band.get(which, band["latency"])))
    return figs


def _throughput_figures(point: dict, rep: Replica, per: str) -> list[dict]:
    """Completions over the whole simulated run, its drain after the last arrival included (as a benchmark
    divides), so at a rate the server keeps up with they come out below the rate offered."""
    return [bands.figure(f"output tokens/s {per}", point["output_throughput"], "tok/s", rep.label, rep.band["throughput"]),
            bands.figure(f"requests/s {per} (drain included)", point["request_throughput"], "req/s", rep.label,
                    rep.band["throughput"])]


def _replicas_of_fleet(req: PlanRequest, rep: Replica) -> int:
    if not req.gpus:
        return 1
    if req.gpus % rep.tp:
        raise PlanError(f"--gpus {req.gpus} is not a multiple of the replica's {rep.tp} GPUs (TP{rep.tp})")
    return req.gpus // rep.tp


def answer(req: PlanRequest, rep: Replica, plan: dict, start_rate: float) -> None:
    """Fill the plan's answer, figures and simulated layer for the request's mode."""
    setup = rep.setup
    fleet = _replicas_of_fleet(req, rep)
    where = f"{fleet} replica(s) of {rep.tp} GPU(s)"
    figures = plan["figures"]
    if req.mode in ("at-rate", "concurrency"):
        band, load = rep.band, ""
        if req.mode == "at-rate":
            point = search.at_rate(setup, req.at_rate / fleet, req.slo)
            at = f"{req.at_rate:g} req/s"
            utilization = req.at_rate / fleet / search.saturation(setup)
            point["utilization"] = utilization
            band = bands.at_load(rep.band, utilization)
            load = (f"; {utilization:.0%} of the replica's saturation rate" + (
                ": past it the queue grows without bound" if utilization >= 1 else
                ", on the knee: latencies order of magnitude only — measure them" if utilization >= bands.KNEE
                else ""))
        else:
            point = search.at_concurrency(setup, max(req.concurrency // fleet, 1), req.slo)
            at = f"concurrency {req.concurrency}"
        figures += _latency_figures(point, rep, band) + _throughput_figures(point, rep, "per replica")
        plan["simulated"] = {"point": point, "replicas": fleet}
        plan["answer"] = (f"at {at} on {where}: P50/P99 TTFT {point['median_ttft_ms']:.0f}/{point['p99_ttft_ms']:.0f} "
                          f"ms, TPOT {point['median_tpot_ms']:.1f}/{point['p99_tpot_ms']:.1f} ms, E2E "
                          f"{point['median_e2el_ms'] / 1000:.2f}/{point['p99_e2el_ms'] / 1000:.2f} s, "
                          f"{point['output_throughput'] * fleet:,.0f} output tok/s ({bands.text(band['latency'])} "
                          f"latency, {bands.text(band.get('p99', band['latency']))} P99, "
                          f"{bands.text(band['throughput'])} throughput; {point['attainment']:.1%} meet "
                          f"{req.slo.describe()}{load})")
        return
    if req.mode == "max-concurrency":
        most, point = search.max_concurrency(setup, req.slo)
        if not most:
            raise PlanError(f"even one request at a time misses {req.slo.describe()} on the simulated engine")
        b = bands.width(rep.band.get("p99", rep.band["latency"]))
        figures.append(bands.figure("highest concurrency within the bound", most, "requests in flight", rep.label, None))
        figures += _latency_figures(point, rep) + _throughput_figures(point, rep, "per replica")
        plan["simulated"] = {"point": point, "max_concurrency": most, "replicas": fleet}
        steady = (f", its opening burst of {most} left out (a run of a few hundred requests includes it: "
                  "--num-prompts N simulates one)" if point.get("opening_left_out") else "")
        plan["answer"] = (f"one replica of {rep.tp} GPU(s) holds up to {most} requests in flight (closed loop) under "
                          f"{req.slo.describe()}{steady}" + (f"; {most * fleet} on {where}" if fleet > 1 else "")
                          + (f" (P99 band {bands.text(rep.band.get('p99', rep.band['latency']))}: a bound near the "
                             "edge moves the answer)" if b <= bands.WIDE_BAND else
                             " (P99 band wider than ±50 %: order of magnitude only — measure it)"))
        return
    if req.mode == "max-throughput":
        point = search.max_throughput(setup)
        figures += _throughput_figures(point, rep, "per replica") + _latency_figures(point, rep)
        plan["simulated"] = {"point": point, "replicas": fleet}
        plan["answer"] = (f"maximum throughput on {where}: {point['output_throughput'] * fleet:,.0f} output tok/s, "
                          f"{point['request_throughput'] * fleet:.2f} req/s ({bands.text(rep.band['throughput'])}; every "
                          "request sent at once, drain tail included)")
        return
    saturated = search.saturation(setup)
    rate = search.capacity(setup, req.slo, start_rate, limit=saturated)
    if rate <= 0:
        raise PlanError(f"the simulated engine cannot meet the SLO ({req.slo.describe()}) at any rate: even a lone "
                        "request takes longer (check the SLO against the step time)")
    b = rep.band["throughput"]
    low, high = bands.interval(rate, b)
    point = search.at_rate(setup, rate, req.slo)
    sim = {"per_replica_rate": rate, "per_replica_rate_band": [low, high], "saturation_rate": saturated,
           "gpus_per_replica": rep.tp, "step_model": rep.how, "point": point,
           "client_overhead_s": setup.shape.client_overhead, "workload": setup.work.source,
           "mean_output_tokens": setup.work.mean_output}
    figures.append(bands.figure("goodput per replica (SLO capacity)", rate, "req/s", rep.label, b))
    figures += _latency_figures(point, rep)
    if req.disaggregated:
        split = _disaggregated(req, rep, rate)
        plan["disaggregated"] = split
        if "ratio" in split:
            figures.append(bands.figure("goodput per GPU, colocated", split["colocated_per_gpu"], "req/s", rep.label, b))
            figures.append(bands.figure(f"goodput per GPU, prefill/decode pools ({split['prefill_gpu_share']:.0%} "
                                   "prefill)" if split["prefill_gpu_share"] is not None else
                                   "goodput per GPU, prefill/decode pools", split["disaggregated_per_gpu"], "req/s",
                                   rep.label, b))
    if req.search_knobs:
        grid = search.knob_grid(setup, req.slo, rate, rep.kv_tokens)
        best = max(grid, key=lambda row: row["rate"])
        sim["grid"] = grid
        sim["recommended_flags"] = {k: v for k, v in best.items() if k.startswith("--")} | {
            "--tensor-parallel-size": rep.tp}
    if req.qps is None:
        plan["simulated"] = sim
        if "measured" not in plan:
            plan["answer"] = (f"one replica of {rep.tp} GPU(s) sustains {rate:.2f} req/s [{low:.2f}–{high:.2f}] "
                              f"under {req.slo.describe()}")
        return
    replicas = replicas_for(req.qps, rate, req.burst_headroom, req.spares)
    band = [replicas_for(req.qps, high, req.burst_headroom, req.spares),
            replicas_for(req.qps, low, req.burst_headroom, req.spares)]
    sim |= {"replicas": replicas, "replicas_band": band, "gpus": replicas * rep.tp}
    plan["simulated"] = sim
    if "measured" not in plan:
        plan["answer"] = (f"{replicas * rep.tp} GPUs ({replicas} replicas of {rep.tp}, [{band[0] * rep.tp}–"
                          f"{band[1] * rep.tp}]) for {req.qps:g} QPS under {req.slo.describe()}")


def _disaggregated(req: PlanRequest, rep: Replica, rate: float) -> dict:
    """Each pool, and the colocated replica, at its own best TP from the replica's up to 8 (where the model fits);
    a measured sweep's replica is compared at its own TP."""
    from llmbench.plan.disaggregated import compare, over_tp

    if req.results:
        return compare(rep.setup, rep.tp, req.slo, rate)
    replicas = {rep.tp: (rep.setup, rate)}
    for tp in (1, 2, 4, 8):
        if tp <= rep.tp:
            continue
        try:
            other = catalog_replica(replace(req, gpus_per_replica=tp), rep.setup.work)
        except PlanError:
            continue
        replicas[tp] = (other.setup, search.capacity(other.setup, req.slo, rate * tp / rep.tp))
    return over_tp(replicas, req.slo)


def make_plan(req: PlanRequest) -> dict:
    plan: dict = {"question": req.mode, "qps": req.qps, "slo": asdict(req.slo), "slo_text": req.slo.describe(),
                  "burst_headroom": req.burst_headroom, "spares": req.spares, "figures": [], "estimates": []}
    folder = Path(req.results) if req.results else None
    if folder:
        from llmbench.plan.workload import from_results

        work = req.workload or from_results(folder)
        cap = measured.capacity_of(folder, req.slo)
        rep = fitted_replica(req, work, folder)
        req, said = _what_is_planned(req, folder, rep is not None)
        plan["estimates"] += said
        measured.layer(req, plan, cap)
        rep = rep or calibrated_replica(req, work)
        start = cap["per_replica_rate"] or cap["points"][0]["rate"]
    else:
        work = req.workload
        req, said = _what_is_planned(req, None, False)
        plan["estimates"] += said
        rep = catalog_replica(req, work)
        plan["warnings"] = rep.warnings
        plan["estimates"].append("no results folder: every figure is simulated from the GPU and model catalogs with "
                                 "efficiency priors; bands are the planner's own errors on published results "
                                 "(`llmbench plan validate`)")
        mean = work.mean_prompt + work.mean_output
        start = max(rep.memory["kv_capacity_tokens"] / mean / 20, 0.5)
    plan["setup"] = {"step_model": rep.how, "label": rep.label, "workload": work.source,
                     "mean_prompt_tokens": work.mean_prompt, "mean_output_tokens": work.mean_output,
                     "engine": req.engine, "knobs": req.knobs, "bands": rep.band,
                     "exact_requests": req.num_requests is not None}
    if rep.memory:
        plan["memory"] = rep.memory
        if "kv_gib_per_gpu" in rep.memory:
            stated = "kv_source" in rep.memory  # the measured server's own pool: a figure it reported
            label, band = ("stated by the server", None) if stated else ("estimated", rep.band.get("memory"))
            if not stated:
                plan["figures"].append(bands.figure("KV cache per GPU", rep.memory["kv_gib_per_gpu"], "GiB", label,
                                                   band))
            plan["figures"].append(bands.figure("KV cache per replica", rep.memory["kv_capacity_tokens"], "tokens",
                                               label, band))
    plan["estimates"] += rep.notes
    if "bundled tokenizer" in work.source and req.model and not Path(req.model).exists():
        plan["estimates"].append(f"lengths counted with the bundled tokenizer, not {req.model}'s (pass --tokenizer "
                                 "DIR with the model's tokenizer: output lengths differ between tokenizers)")
    try:
        answer(req, rep, plan, start)
        _api_server_bound(plan, rep)
        _beyond_calibration(plan, rep)
    except PlanError as err:
        if folder and "measured" not in plan and "missing" in cap:
            raise PlanError(f"{cap['missing']} (simulated: {err})") from None
        raise
    if folder and req.mode == "at-rate":
        measured.at_rate(plan, cap, req.at_rate)
    measured.disagreement(plan)
    if "measured" in plan and req.mode == "qps":
        m = plan["measured"]
        plan["answer"] = (f"{m['gpus']} GPUs ({m['replicas']} replicas) for {req.qps:g} QPS under "
                          f"{req.slo.describe()}, measured: {m['per_replica_rate']:.2f} req/s per replica"
                          + (f" ({c['rate']:.3g} conversations/s of {c['turns']:.3g} turns each)"
                             if (c := m.get("conversations")) else ""))
    elif folder and "measured" not in plan and req.mode in ("qps", "capacity"):
        plan["estimates"].append(f"measured: {cap['missing']}")
    gpus_total = (plan.get("measured") or plan.get("simulated") or {}).get("gpus") or (
        _replicas_of_fleet(req, rep) * rep.tp)
    _costs(plan, req, gpus_total, work, priced=rep.label != "simulated (fitted)")
    return plan


def _api_server_bound(plan: dict, rep: Replica) -> None:
    """A point whose streamed tokens keep the API server busy most of the time is outside the planner's physics: on
    an H100, vLLM 0.19 streamed a small model's 500-request burst ~66 requests at a time where the planner admits
    all 500 and drains each step's tokens (TPOT +600 %, benchmarks/README.md). The plan says so."""
    point = (plan.get("simulated") or {}).get("point")
    engine = getattr(rep.setup.model, "engine", None)
    if not point or engine is None or not engine.stream_token_cost:
        return
    busy = point["output_throughput"] * engine.stream_token_cost / engine.api_server_count
    if busy >= API_SERVER_BOUND:
        plan["estimates"].append(
            f"the API server streams tokens {busy:.0%} of the time at this point ({engine.stream_token_cost * 1e6:.0f} "
            "µs a token, `--api-server-count` shares it): its pace, not the GPU's, sets the latencies, which the "
            "planner does not model (order of magnitude only — measure it)")


def _beyond_calibration(plan: dict, rep: Replica) -> None:
    """A calibrated point far above the load the sweep held rests on an extrapolation of its cost per sequence a
    step: from two calibration sweeps of one vLLM-CPU server half an hour apart (3-10 requests in flight), a
    400-request burst (40-60 running) came out +8 and +20 % in mean TTFT, on another server -7 and 0 %, with the cost
    read from the decode-only token gaps (-3 and +28 % on a third from two rates' median TPOT; benchmarks/README.md,
    "The cost per sequence a step"). The plan says so."""
    point = (plan.get("simulated") or {}).get("point")
    seen = rep.calibrated_in_flight
    if not point or not seen:
        return
    shape, work = rep.setup.shape, rep.setup.work
    # in flight by Little's law, of which at most a batch's worth (the engine's cap, the pool) runs in a step
    held = min(point["request_throughput"] * point["mean_e2el_ms"] / 1000, shape.max_num_seqs,
               shape.kv_capacity_tokens / max(work.mean_prompt + work.mean_output, 1.0))
    if held > BEYOND_CALIBRATION * seen:
        plan["estimates"].append(
            f"this point runs ~{held:.0f} requests at a time, {held / seen:.0f}x the most a calibration run held in "
            f"flight ({seen:.1f}): its speed extrapolates the cost per sequence fitted there (a burst of 400 "
            "requests on vLLM-CPU, its mean TTFT from two sweeps of the server: +8 / +20 % in one test, -7 / 0 % "
            "in another); sweep up to the load you plan for")


def _costs(plan: dict, req: PlanRequest, gpus_total: int, work: Workload, priced: bool = True) -> None:
    """Catalog prices only where the plan is about a catalog GPU (a bundled-engine sweep ran on this machine)."""
    gpu = None
    if priced and not req.gpu_spec:
        try:
            gpu = gpus.gpu(req.gpu)
        except KeyError:
            gpu = None
    price = req.price_per_hour if req.price_per_hour is not None else (gpu.price_per_hour if gpu else None)
    if price is None:
        plan["cost"] = {"note": "no price: pass --price USD_PER_GPU_HOUR"}
        return
    per_hour = gpus_total * price
    cost = {"gpus": gpus_total, "usd_per_gpu_hour": price, "usd_per_hour": per_hour,
            "price_source": gpu.price_source if gpu and req.price_per_hour is None else "--price"}
    if req.qps:
        cost["usd_per_million_output_tokens"] = per_hour / (req.qps * work.mean_output * 3600) * 1e6
    plan["cost"] = cost
