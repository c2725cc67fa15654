"""`llmbench plan`: the answer for a workload, an engine and GPUs, each figure labelled and banded.

Layers: measured (a sweep's own SLO capacity), simulated (a discrete-event simulation of the engine's
scheduler driven by a step-time model: fitted on the bundled engine's steps, calibrated on any server's
records, or a roofline with priors) and estimated (memory and the articles' formulas). Questions: GPUs for
--qps, capacity under the SLO, latencies --at-rate or at --concurrency, and --max-throughput.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from llmbench.plan import bands, engines, gpus, models, search
from llmbench.plan.fit import fit_client_overhead, fit_steps
from llmbench.plan.memory import GiB, describe_misfit, plan_memory, smallest_tp
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.scheduler import EngineShape
from llmbench.plan.simulator import simulate
from llmbench.plan.workload import Workload
from llmbench.slo import SLO, attainment_points, capacity, lower_rates


class PlanError(ValueError):
    """A plan that cannot be made; the message carries the numbers behind it."""


DEFAULT_MODEL, DEFAULT_GPU = "llama-3.1-8b", "H100-SXM"


def params_text(count: float) -> str:
    """8.0 B, 39 M: a bundled model is not "0.0 B"."""
    return f"{count / 1e9:.1f} B" if count >= 1e9 else f"{count / 1e6:.0f} M"


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
    model: str | None = None  # None: DEFAULT_MODEL, or the served model's config.json beside --results
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    engine: str = "vllm"
    knobs: dict = field(default_factory=dict)  # EngineProfile fields the user set
    burst_headroom: float = 0.2
    spares: int = 1
    gpus_per_replica: int | None = None
    gpus: int | None = None  # the whole fleet, for --at-rate/--concurrency/--max-throughput
    price_per_hour: float | None = None
    prefix_hit_rate: float = 0.0
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


# -- layer 1: measured --------------------------------------------------------------------------------
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
    keys = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_e2el_ms",
            "p99_e2el_ms")
    points = [p | {"achieved_rate": by_label[p["label"]].get("achieved_rate"),
                   **{k: by_label[p["label"]].get(k) for k in keys}}
              for p in attainment_points(results, frame, slo)]
    return sorted(points, key=lambda p: p["rate"]), frame


def measured_capacity(folder: Path, slo: SLO) -> dict:
    """The measured layer: the sweep's own answer (`per_replica_rate` None, with `missing` saying which
    measurement would give one, when no rate met the SLO) and the figures the other layers reuse."""
    points, frame = measured_points(folder, slo)
    cap = capacity(points, slo)
    ok = frame[frame["success"]]
    out = {"per_replica_rate": cap.rate, "note": cap.note, "points": points,
           "max_output_throughput": max(p["output_throughput"] for p in points),
           "mean_output_tokens": float(ok["output_tokens"].mean()),
           "mean_prompt_tokens": float(ok["prompt_len"].mean())}
    if cap.rate is None:
        low = points[0]
        out["missing"] = (
            f"the SLO ({slo.describe()}) is not met even at the lowest measured rate {low['rate']:g} req/s: "
            f"only {low['attainment']:.1%} of requests met it (P99 TTFT {low['p99_ttft_ms']:.0f} ms, "
            f"P99 TPOT {low['p99_tpot_ms']:.1f} ms). Measure lower rates (--rate {lower_rates(low['rate'])}) "
            "or relax the SLO.")
    return out


# -- the simulated replica ----------------------------------------------------------------------------
@dataclass
class Replica:
    """What the simulation runs: a step model, the engine shape, and how much to trust them."""

    setup: search.SimSetup
    tp: int
    how: str  # how the step model was obtained
    label: str  # "simulated (fitted)", "simulated (calibrated)", "simulated (priors)"
    band: dict  # by kind (throughput, latency, p99, memory): signed (low, high) or a fit's symmetric width
    memory: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kv_tokens: Callable[[int, int], int] | None = None  # KV pool for --max-num-seqs and --max-num-batched-tokens


def catalog_replica(req: PlanRequest, work: Workload) -> Replica:
    try:
        gpu = gpus.gpu_from_spec(req.gpu_spec) if req.gpu_spec else gpus.gpu(req.gpu)
        model = models.model(req.model)
        max_len = req.knobs.get("max_model_len") or min(model.max_positions, max(work.max_tokens, 1))
        engine = engines.profile(req.engine, gpu, max_len).with_knobs(
            **{k: v for k, v in req.knobs.items() if k != "max_model_len"})
    except KeyError as err:
        raise PlanError(str(err.args[0])) from None
    if work.max_tokens > max_len:
        raise PlanError(f"the workload has requests of {work.max_tokens} tokens, over --max-model-len {max_len}")
    kw = {"weight_dtype": req.weight_dtype, "kv_dtype": req.kv_dtype, "engine": engine}
    if req.gpus_per_replica:
        mem = plan_memory(model, gpu, req.gpus_per_replica, **kw)
        if not mem.fits or mem.kv_tokens < max_len:
            raise PlanError(describe_misfit(model, gpu, max_len, tp=req.gpus_per_replica, **kw))
    else:
        mem = smallest_tp(model, gpu, max_len, **kw)
        if mem is None:
            raise PlanError(describe_misfit(model, gpu, max_len, **kw))
    roof = RooflineModel(model, gpu, mem.tp, req.weight_dtype, req.kv_dtype, engine)
    shape = engine.shape(mem.kv_tokens, req.prefix_hit_rate)
    memory = {"tensor_parallel": mem.tp, "weights_gib_per_gpu": mem.weights_per_gpu / GiB,
              "activation_gib_per_gpu": mem.activation_per_gpu / GiB, "other_gib_per_gpu": mem.other_per_gpu / GiB,
              "kv_gib_per_gpu": mem.kv_per_gpu / GiB, "kv_bytes_per_token_per_gpu": mem.kv_bytes_per_token,
              "kv_capacity_tokens": mem.kv_tokens, "max_model_len": max_len,
              "concurrent_requests_at_mean_length": mem.kv_tokens / (work.mean_prompt + work.mean_output)}
    how = (f"roofline: {model.name} ({params_text(model.params)} params, {params_text(model.active_params)} active) on "
           f"{gpu.name} TP{mem.tp} over {gpu.link.name}, {engine.name} profile, efficiency "
           f"MFU {roof.efficiency.mfu:.2f} / MBU {roof.efficiency.mbu:.2f} ({roof.efficiency.source})")
    setup = search.SimSetup(roof, shape, work, req.seeds, req.num_requests or req.requests_per_sim,
                            req.num_requests is not None)
    cls = bands.setup_class(model, mem.tp)
    band_note = f"bands: the planner's signed errors on held-out published {cls} results (`llmbench plan validate`)"

    def kv_tokens(seqs: int, budget: int) -> int:
        grid_engine = engine.with_knobs(max_num_seqs=seqs, max_num_batched_tokens=budget)
        return plan_memory(model, gpu, mem.tp, **kw | {"engine": grid_engine}).kv_tokens

    notes = [f"GPU {gpu.name}: {gpu.source}", "; ".join(filter(None, (band_note, bands.NOTES[cls]))),
             "tail terms: per-operator roofline (a large batch's KV read adds to its compute-bound GEMMs); "
             "saturation (no rate at or past the full-batch throughput: its queue grows without bound); latencies "
             "at 80 % of saturation or more take the near-saturation band"]
    if engine.defaults:
        given = ", ".join(f"--{k.replace('_', '-')}" for k in req.knobs if k != "max_model_len")
        notes.append(f"engine defaults of {engine.defaults}" + (f" ({given} as given)" if given else ""))
    return Replica(setup, mem.tp, how, "simulated (priors)", bands.for_setup(model, mem.tp), memory, notes,
                   kv_tokens)


def calibrated_replica(req: PlanRequest, work: Workload) -> Replica:
    """The roofline calibrated on the --results sweep of any server (run on --measured-gpu at --measured-tp,
    by default the GPU and TP asked about), then applied to the GPU and TP asked about."""
    from llmbench.plan.calibrate import calibrate

    measured_req = replace(req, gpu=req.measured_gpu or req.gpu, gpu_spec=None if req.measured_gpu else req.gpu_spec,
                           gpus_per_replica=req.measured_tp or req.gpus_per_replica)
    measured = catalog_replica(measured_req, work)
    rep = catalog_replica(req, work) if (req.measured_gpu or req.measured_tp) else measured
    try:
        cal = calibrate(req.results, measured.setup.model, measured.setup.shape)
    except ValueError as err:
        rep.notes.append(f"not calibrated: {err}")
        return rep
    model = cal.apply(rep.setup.model)
    shape = replace(rep.setup.shape, client_overhead=cal.request_overhead)
    rep.setup = replace(rep.setup, model=model, shape=shape)
    on = f"{measured_req.gpu_spec or measured_req.gpu} TP{measured.tp}"
    rep.how += f"; {cal.describe()} on {on}"
    rep.label = "simulated (calibrated)"
    if cal.far:
        rep.notes.append(f"the sweep's server took x{cal.scale:.3g} the GPU time the priors give {on}: far from "
                         "that device, so its memory, bandwidth and KV figures are unlikely to be the measured "
                         "server's (describe the device with --gpu-spec, or --measured-gpu)")
    rep.notes.append(f"transferred from the sweep on {on}: the GPU-time scale (x{cal.scale:.2f} on this GPU's own "
                     f"priors) and the per-request overhead ({cal.request_overhead * 1000:.1f} ms); memory, KV capacity, "
                     "bandwidth, FLOP/s and interconnect are the catalog's for the GPU and TP asked about")
    return rep


def fitted_replica(req: PlanRequest, work: Workload, folder: Path) -> Replica | None:
    """The bundled engine's own step statistics, fitted; None when the folder has none."""
    from llmbench.results import load_engine_steps, load_metadata, load_records, load_results

    steps = load_engine_steps(folder)
    if len(steps) < 10:
        return None
    step_model = fit_steps(steps)
    config = (load_metadata(folder).get("target", {}).get("version") or {}).get("config") or {}
    kv_tokens = config.get("num_kv_blocks", 10**6) * config.get("block_size", 16)
    shape = EngineShape(req.knobs.get("max_num_seqs") or config.get("max_num_seqs", 256),
                        req.knobs.get("max_num_batched_tokens") or config.get("max_num_batched_tokens", 2048),
                        kv_tokens, config.get("block_size", 16), req.prefix_hit_rate)
    first = load_results(folder)[0]
    ok = load_records(folder, first["label"])
    ok = ok[ok["success"]]
    if not ok.empty:
        res = simulate(ok["scheduled"].to_numpy(), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                       step_model, shape)
        shape = replace(shape, client_overhead=fit_client_overhead(ok["ttft"].to_numpy(), res.ttft))
    rel = max(step_model.rel_error, 0.05)
    setup = search.SimSetup(step_model, shape, work, req.seeds, req.num_requests or req.requests_per_sim,
                            req.num_requests is not None)
    return Replica(setup, req.gpus_per_replica or 1, f"fitted on {len(steps)} engine steps (median error {rel:.1%})",
                   "simulated (fitted)", {"throughput": rel, "latency": 2 * rel, "p99": 2 * rel, "memory": 0.0},
                   {"kv_capacity_tokens": kv_tokens})


# -- answers ------------------------------------------------------------------------------------------
def _figure(name: str, value: float, unit: str, label: str, band: bands.Band | float | None) -> dict:
    out = {"name": name, "value": value, "unit": unit, "label": label}
    if band:
        out["band"] = bands.interval(value, band)
    return out


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
                figs.append(_figure(f"{name} {metric.upper()}", point[key], "ms", rep.label,
                                    band.get(which, band["latency"])))
    return figs


def _throughput_figures(point: dict, rep: Replica, per: str) -> list[dict]:
    """Completions over the whole simulated run, its drain after the last arrival included (as a benchmark
    divides), so at a rate the server keeps up with they come out below the rate offered."""
    return [_figure(f"output tokens/s {per}", point["output_throughput"], "tok/s", rep.label, rep.band["throughput"]),
            _figure(f"requests/s {per} (drain included)", point["request_throughput"], "req/s", rep.label,
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
        figures.append(_figure("highest concurrency within the bound", most, "requests in flight", rep.label, None))
        figures += _latency_figures(point, rep) + _throughput_figures(point, rep, "per replica")
        plan["simulated"] = {"point": point, "max_concurrency": most, "replicas": fleet}
        plan["answer"] = (f"one replica of {rep.tp} GPU(s) holds up to {most} requests in flight (closed loop) under "
                          f"{req.slo.describe()}" + (f"; {most * fleet} on {where}" if fleet > 1 else "")
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
    figures.append(_figure("goodput per replica (SLO capacity)", rate, "req/s", rep.label, b))
    figures += _latency_figures(point, rep)
    if req.disaggregated:
        split = _disaggregated(req, rep, rate)
        plan["disaggregated"] = split
        if "ratio" in split:
            figures.append(_figure("goodput per GPU, colocated", split["colocated_per_gpu"], "req/s", rep.label, b))
            figures.append(_figure(f"goodput per GPU, prefill/decode pools ({split['prefill_gpu_share']:.0%} "
                                   "prefill)" if split["prefill_gpu_share"] is not None else
                                   "goodput per GPU, prefill/decode pools", split["disaggregated_per_gpu"], "req/s",
                                   rep.label, b))
    if req.search_knobs:
        grid = search.knob_grid(setup, req.slo, rate, rep.kv_tokens)
        best = max(grid, key=lambda row: row["rate"])
        sim["grid"] = grid
        sim["recommended_flags"] = {k: v for k, v in best.items() if k != "rate"} | {
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
        cap = measured_capacity(folder, req.slo)
        rep = fitted_replica(req, work, folder)
        req, said = _what_is_planned(req, folder, rep is not None)
        plan["estimates"] += said
        _measured_layer(req, plan, cap)
        rep = rep or calibrated_replica(req, work)
        start = cap["per_replica_rate"] or cap["points"][0]["rate"]
    else:
        work = req.workload
        req, said = _what_is_planned(req, None, False)
        plan["estimates"] += said
        rep = catalog_replica(req, work)
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
            plan["figures"].append(_figure("KV cache per GPU", rep.memory["kv_gib_per_gpu"], "GiB", "estimated",
                                           rep.band.get("memory")))
    plan["estimates"] += rep.notes
    if "bundled tokenizer" in work.source and req.model and not Path(req.model).exists():
        plan["estimates"].append(f"lengths counted with the bundled tokenizer, not {req.model}'s (pass --tokenizer "
                                 "DIR with the model's tokenizer: output lengths differ between tokenizers)")
    try:
        answer(req, rep, plan, start)
    except PlanError as err:
        if folder and "measured" not in plan and "missing" in cap:
            raise PlanError(f"{cap['missing']} (simulated: {err})") from None
        raise
    if folder and req.mode == "at-rate":
        _measured_at_rate(plan, cap, req.at_rate)
    _disagreement(plan)
    if "measured" in plan and req.mode == "qps":
        m = plan["measured"]
        plan["answer"] = (f"{m['gpus']} GPUs ({m['replicas']} replicas) for {req.qps:g} QPS under "
                          f"{req.slo.describe()}, measured: {m['per_replica_rate']:.2f} req/s per replica")
    elif folder and "measured" not in plan and req.mode in ("qps", "capacity"):
        plan["estimates"].append(f"measured: {cap['missing']}")
    gpus_total = (plan.get("measured") or plan.get("simulated") or {}).get("gpus") or (
        _replicas_of_fleet(req, rep) * rep.tp)
    _costs(plan, req, gpus_total, work, priced=rep.label != "simulated (fitted)")
    return plan


def _disagreement(plan: dict) -> None:
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


def _measured_at_rate(plan: dict, cap: dict, rate: float) -> None:
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
            plan["figures"].append(_figure(f"{'P50' if pct == 'median' else pct.upper()} {metric.upper()}",
                                           point[key], "ms", "measured", None))


def _measured_layer(req: PlanRequest, plan: dict, cap: dict) -> None:
    if cap["per_replica_rate"] is None or req.mode not in ("qps", "capacity"):
        return
    per_replica = req.gpus_per_replica or 1
    plan["measured"] = {**cap, "gpus_per_replica": per_replica}
    plan["figures"].append(_figure("goodput per replica (SLO capacity)", cap["per_replica_rate"], "req/s",
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
        plan["answer"] = f"one replica sustains {cap['per_replica_rate']:.2f} req/s under {req.slo.describe()}, measured"


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
