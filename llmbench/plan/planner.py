"""`llmbench plan`: replicas and GPUs for a target QPS under P99 SLOs, in three layers.

1. measured: the highest rate per replica whose requests meet the SLOs at the required attainment,
   interpolated between measured rates of a sweep;
2. analytic: memory, KV capacity and roofline screens from the GPU and model catalogs;
3. simulated: a discrete-event simulation of the engine's scheduler, with a step-time model fitted on the
   bundled engine's per-step statistics (or roofline-based for GPUs not measured), bisected on the rate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from llmbench.plan import catalog
from llmbench.plan.fit import LinearStepModel, fit_client_overhead, fit_steps
from llmbench.plan.memory import GiB, describe_misfit, plan_memory, smallest_tp
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.simulator import EngineShape, StepModel, simulate
from llmbench.slo import SLO, attainment_points, capacity, lower_rates


class PlanError(ValueError):
    """A plan that cannot be made; the message carries the numbers behind it."""


@dataclass
class Workload:
    prompts: np.ndarray
    outputs: np.ndarray
    source: str

    @property
    def mean_prompt(self) -> float:
        return float(self.prompts.mean())

    @property
    def mean_output(self) -> float:
        return float(self.outputs.mean())


def sharegpt_workload(n: int = 1000, seed: int = 0) -> Workload:
    """The default scenario's lengths: vLLM-rules ShareGPT with the bundled tokenizer (an estimate of
    other models' tokenizers)."""
    from transformers import AutoTokenizer

    from bundled.modelbuild import build_model
    from bundled.sharegpt import load as load_sharegpt
    from llmbench.datasets import sharegpt
    from llmbench.datasets.text import count_tokens

    tok = AutoTokenizer.from_pretrained(str(build_model()))
    pairs = sharegpt.sample_pairs(load_sharegpt().conversations, n, lambda t: count_tokens(tok, t), seed)
    return Workload(np.array([p.prompt_len for p in pairs]), np.array([p.output_len for p in pairs]),
                    f"ShareGPT ({n} pairs, vLLM rules, bundled tokenizer)")


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
    points = [p | {"achieved_rate": by_label[p["label"]].get("achieved_rate"),
                   **{k: by_label[p["label"]][k] for k in ("output_throughput", "p99_ttft_ms", "p99_tpot_ms")}}
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
           "mean_prompt_tokens": float(ok["prompt_len"].mean()),
           "median_e2el_low_load": float(frame[frame["label"] == points[0]["label"]]["latency"].median())}
    if cap.rate is None:
        low = points[0]
        out["missing"] = (
            f"the SLO ({slo.describe()}) is not met even at the lowest measured rate {low['rate']:g} req/s: "
            f"only {low['attainment']:.1%} of requests met it (P99 TTFT {low['p99_ttft_ms']:.0f} ms, "
            f"P99 TPOT {low['p99_tpot_ms']:.1f} ms). Measure lower rates (--rate {lower_rates(low['rate'])}) "
            "or relax the SLO.")
    return out


def replicas_for(qps: float, per_replica: float, headroom: float, spares: int) -> int:
    if per_replica <= 0:
        raise PlanError("the per-replica rate is zero: nothing meets the SLO")
    return int(math.ceil(qps * (1 + headroom) / per_replica)) + spares


# -- layer 3: simulated -------------------------------------------------------------------------------
@dataclass
class SimPlan:
    per_replica_rate: float
    band: tuple[float, float]
    curve: list[dict] = field(default_factory=list)
    flags: dict = field(default_factory=dict)
    step_model: str = ""


def sim_meets(model: StepModel, shape: EngineShape, work: Workload, rate: float, slo: SLO, seeds: list[int],
              n: int) -> tuple[bool, dict]:
    summaries = []
    ok = True
    for seed in seeds:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(work.prompts), n)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
        res = simulate(arrivals, work.prompts[idx], work.outputs[idx], model, shape)
        s = res.summary()
        s["attainment"] = res.attainment(slo.ttft_ms, slo.tpot_ms)
        if slo.e2el_ms is not None:
            s["attainment"] = min(s["attainment"], float((res.e2el * 1000 <= slo.e2el_ms).mean()))
        summaries.append(s)
        ok &= s["attainment"] >= slo.attainment and len(res.ttft) == n
    merged = {k: float(np.mean([s[k] for s in summaries])) for k in summaries[0]}
    return ok, merged


def bisect_rate(model: StepModel, shape: EngineShape, work: Workload, slo: SLO, start: float,
                seeds: list[int], n: int, tolerance: float = 0.05) -> float:
    """Doubling, then bisection, on the Poisson rate (vLLM's serve_sla search, on the simulator)."""
    low, high = 0.0, max(start, 1e-3)
    while sim_meets(model, shape, work, high, slo, seeds, n)[0]:
        low, high = high, high * 2
        if high > 1e6:
            return high
    while high - low > tolerance * max(low, 1e-3):
        mid = (low + high) / 2
        if sim_meets(model, shape, work, mid, slo, seeds, n)[0]:
            low = mid
        else:
            high = mid
    return low


def simulated_plan(model: StepModel, shape: EngineShape, work: Workload, slo: SLO, start: float,
                   rel_error: float, seeds: list[int] = (0, 1, 2), n: int = 600) -> SimPlan:
    seeds = list(seeds)
    best = bisect_rate(model, shape, work, slo, start, seeds, n)
    if best <= 0:
        raise PlanError(f"the simulated engine cannot meet the SLO ({slo.describe()}) at any rate: even a lone "
                        f"request takes longer (check the SLO against the step time)")
    slow = bisect_rate(_scaled(model, 1 + rel_error), shape, work, slo, best, seeds, n)
    fast = bisect_rate(_scaled(model, max(1 - rel_error, 0.05)), shape, work, slo, best, seeds, n)
    curve = []
    for frac in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25):
        _, summary = sim_meets(model, shape, work, best * frac, slo, seeds[:1], n)
        curve.append({"rate": best * frac, **summary})
    return SimPlan(best, (slow, fast), curve)


def _scaled(model: StepModel, factor: float) -> StepModel:
    if isinstance(model, LinearStepModel):
        return model.scaled(factor)
    return _Scaled(model, factor)


class _Scaled:
    def __init__(self, inner: StepModel, factor: float) -> None:
        self.inner, self.factor = inner, factor

    def step_time(self, *args) -> float:
        return self.factor * self.inner.step_time(*args)


def recommend_flags(model: StepModel, shape: EngineShape, work: Workload, slo: SLO, rate: float, tp: int,
                    seeds: list[int], n: int) -> dict:
    """Pick the token budget that sustains the most load under the SLO; size max-num-seqs from the KV pool."""
    best_budget, best_rate = shape.max_num_batched_tokens, rate
    for budget in (2048, 4096, 8192):
        if budget == shape.max_num_batched_tokens:
            continue
        trial = EngineShape(shape.max_num_seqs, budget, shape.kv_capacity_tokens, shape.block_size,
                            shape.prefix_hit_rate, shape.client_overhead)
        r = bisect_rate(model, trial, work, slo, rate, seeds[:1], n, tolerance=0.1)
        if r > best_rate * 1.03:
            best_budget, best_rate = budget, r
    per_request = work.mean_prompt + work.mean_output
    seqs = int(min(max(shape.kv_capacity_tokens // max(per_request, 1), 1), 1024))
    return {"--max-num-seqs": 2 ** int(math.floor(math.log2(max(seqs, 1)))),
            "--max-num-batched-tokens": best_budget, "--gpu-memory-utilization": 0.9,
            "--tensor-parallel-size": tp}


# -- the whole plan -----------------------------------------------------------------------------------
@dataclass
class PlanRequest:
    qps: float
    slo: SLO
    results: Path | None = None
    gpu: str = "H100-SXM"
    model: str = "llama-3.1-8b"
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    burst_headroom: float = 0.2
    spares: int = 1
    gpus_per_replica: int | None = None
    price_per_hour: float | None = None
    prefix_hit_rate: float = 0.0
    seeds: tuple[int, ...] = (0, 1, 2)
    requests_per_sim: int = 600


def make_plan(req: PlanRequest) -> dict:
    plan: dict = {"qps": req.qps, "slo": asdict(req.slo), "slo_text": req.slo.describe(),
                  "burst_headroom": req.burst_headroom, "spares": req.spares, "estimates": []}
    if req.results:
        return _measured_plan(req, plan)
    return _catalog_plan(req, plan)


def _measured_plan(req: PlanRequest, plan: dict) -> dict:
    from llmbench.results import load_engine_steps, load_metadata, load_records

    folder = Path(req.results)
    cap = measured_capacity(folder, req.slo)
    gpus_per_replica = req.gpus_per_replica or 1
    if cap["per_replica_rate"] is not None:
        replicas = replicas_for(req.qps, cap["per_replica_rate"], req.burst_headroom, req.spares)
        plan["measured"] = {**cap, "replicas": replicas, "gpus": replicas * gpus_per_replica,
                            "gpus_per_replica": gpus_per_replica}
    else:
        plan["estimates"].append(f"measured: {cap['missing']}")
    per_gpu_tokens = cap["max_output_throughput"] / gpus_per_replica
    plan["article_formulas"] = {
        "throughput_formula_gpus": math.ceil(req.qps * cap["mean_output_tokens"] / per_gpu_tokens * 1.5),
        "throughput_formula": "GPUs = peak QPS x mean output tokens / per-GPU output tokens/s x 1.5",
        "per_gpu_output_tokens_per_s": per_gpu_tokens,
    }
    meta = load_metadata(folder)
    config = (meta.get("target", {}).get("version") or {}).get("config") or {}
    if config.get("num_kv_blocks"):
        capacity = config["num_kv_blocks"] * config.get("block_size", 16)
        concurrency = capacity / (cap["mean_prompt_tokens"] + cap["mean_output_tokens"])
        per_gpu_qps = concurrency / max(cap["median_e2el_low_load"], 1e-9)
        plan["article_formulas"] |= {
            "kv_concurrency_per_gpu": concurrency,
            "kv_formula_gpus": math.ceil(req.qps / per_gpu_qps),
            "kv_formula": "concurrency per GPU = free KV tokens / mean tokens per request; QPS per GPU by "
                          "Little's law at the low-load latency",
        }
    steps = load_engine_steps(folder)
    if len(steps) >= 10:
        step_model = fit_steps(steps)
        frame = load_records(folder)
        work = Workload(frame.loc[frame["success"], "prompt_len"].to_numpy(),
                        frame.loc[frame["success"], "output_tokens"].to_numpy(), f"measured requests in {folder}")
        kv_tokens = config.get("num_kv_blocks", 10**6) * config.get("block_size", 16)
        shape = EngineShape(config.get("max_num_seqs", 256), config.get("max_num_batched_tokens", 2048), kv_tokens,
                            config.get("block_size", 16), req.prefix_hit_rate)
        shape = _with_overhead(shape, step_model, folder)
        sim = simulated_plan(step_model, shape, work, req.slo, cap["per_replica_rate"] or cap["points"][0]["rate"],
                             max(step_model.rel_error, 0.05), req.seeds, req.requests_per_sim)
        plan["simulated"] = _sim_dict(sim, req, gpus_per_replica, work, f"fitted on {len(steps)} engine steps "
                                      f"(median error {step_model.rel_error:.1%})", step_model, shape)
    else:
        plan["estimates"].append("no engine step statistics in the folder (not the bundled engine): the simulated "
                                 "layer was skipped; the measured layer stands alone")
    if "measured" not in plan and "simulated" not in plan:
        raise PlanError(cap["missing"])
    _costs(plan, req, (plan.get("measured") or plan["simulated"])["gpus"])
    return plan


def _with_overhead(shape: EngineShape, model: StepModel, folder: Path) -> EngineShape:
    """Calibrate the client-side overhead on the lowest measured rate."""
    from llmbench.results import load_records, load_results

    first = load_results(folder)[0]
    frame = load_records(folder, first["label"])
    ok = frame[frame["success"]]
    if ok.empty:
        return shape
    arrivals = ok["scheduled"].to_numpy()
    res = simulate(arrivals, ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(), model, shape)
    overhead = fit_client_overhead(ok["ttft"].to_numpy(), res.ttft)
    return EngineShape(shape.max_num_seqs, shape.max_num_batched_tokens, shape.kv_capacity_tokens,
                       shape.block_size, shape.prefix_hit_rate, overhead)


def _catalog_plan(req: PlanRequest, plan: dict) -> dict:
    try:
        gpu = catalog.gpu(req.gpu)
        model = catalog.model(req.model)
    except KeyError as err:
        raise PlanError(str(err.args[0])) from None
    work = sharegpt_workload()
    plan["estimates"].append("no results folder: every figure is an estimate from the GPU and model catalogs "
                             "and a roofline step-time model with published efficiency priors (BLIS, Databricks MBU; "
                             "see llmbench/plan/roofline.py)")
    need = int(work.prompts.max() + work.outputs.max())
    mem = smallest_tp(model, gpu, need, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype)
    if mem is None:
        raise PlanError(describe_misfit(model, gpu, need, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype))
    tp = req.gpus_per_replica or mem.tp
    if tp != mem.tp:
        mem = plan_memory(model, gpu, tp, req.weight_dtype, req.kv_dtype)
        if not mem.fits:
            raise PlanError(describe_misfit(model, gpu, need, weight_dtype=req.weight_dtype, kv_dtype=req.kv_dtype))
    roof = RooflineModel(model, gpu, tp, req.weight_dtype, req.kv_dtype)
    per_request = work.mean_prompt + work.mean_output
    concurrency = mem.kv_tokens / per_request
    prefill_s = roof.step_time(work.mean_prompt, 0, 0)
    batch = max(min(int(concurrency), 256), 1)
    decode_s = roof.step_time(0, batch, batch * (work.mean_prompt + work.mean_output / 2))
    compute_rate = 1.0 / (prefill_s + work.mean_output * decode_s / batch)
    plan["analytic"] = {
        "gpu": gpu.name, "model": model.name, "params_b": model.params / 1e9, "tensor_parallel": tp,
        "weights_gib_per_gpu": mem.weights_per_gpu / GiB, "kv_gib_per_gpu": mem.kv_per_gpu / GiB,
        "kv_bytes_per_token_per_gpu": mem.kv_bytes_per_token, "kv_capacity_tokens": mem.kv_tokens,
        "concurrent_requests_at_mean_length": concurrency, "prefill_seconds_mean_prompt": prefill_s,
        "decode_step_seconds_at_batch": decode_s, "decode_batch": batch, "compute_rate_screen": compute_rate,
        "workload": work.source, "mean_prompt_tokens": work.mean_prompt, "mean_output_tokens": work.mean_output,
    }
    shape = EngineShape(256, 8192, mem.kv_tokens, 16, req.prefix_hit_rate)
    sim = simulated_plan(roof, shape, work, req.slo, compute_rate, 0.25, req.seeds, req.requests_per_sim)
    plan["simulated"] = _sim_dict(sim, req, tp, work, "roofline with efficiency priors (±25% band)", roof, shape)
    plan["article_formulas"] = {
        "kv_concurrency_per_gpu": concurrency / tp,
        "throughput_formula_gpus": math.ceil(req.qps * work.mean_output / (compute_rate * work.mean_output / tp)
                                             * 1.5),
        "throughput_formula": "GPUs = peak QPS x mean output tokens / per-GPU output tokens/s x 1.5",
    }
    _costs(plan, req, plan["simulated"]["gpus"], gpu)
    return plan


def _sim_dict(sim: SimPlan, req: PlanRequest, gpus_per_replica: int, work: Workload, how: str, model: StepModel,
              shape: EngineShape) -> dict:
    replicas = replicas_for(req.qps, sim.per_replica_rate, req.burst_headroom, req.spares)
    low, high = sim.band
    flags = recommend_flags(model, shape, work, req.slo, sim.per_replica_rate, gpus_per_replica,
                            list(req.seeds), req.requests_per_sim // 2)
    return {"per_replica_rate": sim.per_replica_rate, "per_replica_rate_band": [low, high],
            "replicas": replicas, "gpus": replicas * gpus_per_replica, "gpus_per_replica": gpus_per_replica,
            "replicas_band": [replicas_for(req.qps, max(high, 1e-9), req.burst_headroom, req.spares),
                              replicas_for(req.qps, max(low, 1e-9), req.burst_headroom, req.spares)],
            "knee_rate": sim.per_replica_rate, "curve": sim.curve, "step_model": how, "recommended_flags": flags,
            "client_overhead_s": shape.client_overhead, "workload": work.source,
            "mean_output_tokens": work.mean_output}


def _costs(plan: dict, req: PlanRequest, gpus: int, gpu: catalog.GPU | None = None) -> None:
    price = req.price_per_hour if req.price_per_hour is not None else (gpu.price_per_hour if gpu else None)
    if price is None:
        plan["cost"] = {"note": "no price: pass --price USD_PER_GPU_HOUR"}
        return
    mean_out = next((plan[layer]["mean_output_tokens"] for layer in ("analytic", "measured", "simulated")
                     if layer in plan), 0)
    per_hour = gpus * price
    tokens_per_hour = req.qps * mean_out * 3600
    plan["cost"] = {"usd_per_gpu_hour": price, "price_source": gpu.price_source if gpu and req.price_per_hour is None
                    else "--price", "usd_per_hour": per_hour,
                    "usd_per_million_output_tokens": per_hour / tokens_per_hour * 1e6 if tokens_per_hour else None}
