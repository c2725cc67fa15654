"""`llmbench plan`: the answer first (GPUs, $/h, or latencies), then why; plan.json; `plan validate`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from llmbench import cli_options, cli_timeline
from llmbench.plan import this_cpu

MODES = ("--qps N (GPUs for a peak rate), --at-rate R, --concurrency N, --max-throughput, --max-concurrency-under "
         "SLO, or none (SLO capacity)")


@click.group("plan", invoke_without_command=True, context_settings={"max_content_width": 110})
@click.option("--qps", type=click.FloatRange(0, min_open=True), help="Peak requests per second to size the fleet for.")
@click.option("--at-rate", type=click.FloatRange(0, min_open=True),
              help="Predict P50/P90/P99 TTFT, TPOT, ITL and E2E at this rate (over --gpus, else one replica).")
@click.option("--concurrency", type=click.IntRange(1), help="Closed loop: this many requests in flight.")
@click.option("--max-throughput", is_flag=True, help="Every request at once (rate = inf): tokens/s and req/s.")
@click.option("--max-concurrency-under", metavar="SLO",
              help="The highest concurrency (closed loop) whose requests stay within SLO, e.g. e2el=10s or "
                   "ttft=1s (P99 unless --attainment).")
@click.option("--results", type=click.Path(exists=True),
              help="A sweep's results folder: its rates (measured) and requests (workload); calibrates the model. "
                   "Another tool's results too (vLLM, SGLang, guidellm, AIPerf, inference-perf).")
@click.option("--measured-gpu", help="The GPU the --results sweep ran on, to predict another --gpu (default: --gpu).")
@click.option("--measured-tp", type=click.IntRange(1), help="The sweep's tensor-parallel size (default: --tp).")
@click.option("--calibration-rates", type=click.IntRange(1),
              help="Calibrate on this many of the --results sweep's lowest unsaturated rates (default 2; more: more "
                   "decode-only steps to read the cost per sequence from, over a wider range of batches).")
@click.option("--request-spread/--no-request-spread", default=None,
              help="Keep the measured server's request-to-request spread around the calibrated replay in the P90s "
                   "and P99s of open-loop questions (--qps, --at-rate, the SLO capacity; default off: the "
                   "deterministic replay's; benchmarks/README.md has its registered rounds).")
@click.option("--step-jitter/--no-step-jitter", default=None,
              help="Add the measured server's own step-to-step spread (its decode-only token gaps about their "
                   "median) to every simulated step of a plan on that server (default off; benchmarks/README.md "
                   "has its registered round).")
@cli_options.add(cli_options.SLO_FLAGS)
@click.option("--gpu", help="Catalog GPU (aliases and any case accepted; default H100-SXM without --results).")
@click.option("--gpu-spec", callback=lambda _ctx, _param, value: _spec_path(value),
              help="JSON describing another device: name, memory_gb, bandwidth_gb_s, bf16_tflops; optional "
                   "fp8_tflops, link, family, price_per_hour, cuda_graphs (default false). 'this-cpu': this "
                   "machine's CPU, measured and written beside the plan (a server that ran on it).")
@click.option("--model", help="Catalog model or a config.json path (default llama-3.1-8b without --results; with "
                               "them, the served checkpoint's config.json when it is on this machine).")
@click.option("--weight-dtype", type=click.Choice(["bf16", "fp8", "int8", "int4", "mxfp4"]),
              help="Default: the measured engine's quantization (from --results), else the format the "
                   "checkpoint ships (gpt-oss mxfp4, DeepSeek-V3/R1 fp8, a config.json's quantization_config), "
                   "else bf16.")
@click.option("--kv-dtype", type=click.Choice(["bf16", "fp8"]),
              help="Default: the measured engine's kv_cache_dtype (from --results), else bf16.")
@click.option("--engine", default="vllm", show_default=True,
              help="Serving-engine profile: vllm, sglang, trtllm, lmdeploy, llmbench; vllm@0.6 for an older vLLM's defaults "
                   "(they change with the version and the GPU).")
@click.option("--num-scheduler-steps", type=click.IntRange(1),
              help="vLLM 0.6 multi-step scheduling: new requests join every N steps.")
@click.option("--long-prefill-token-threshold", type=click.IntRange(0),
              help="vLLM's cap on the prompt tokens one request computes a step, beside the others (0: none; "
                   "from vLLM 0.31 a request alone is not capped).")
@click.option("--api-server-count", type=click.IntRange(1),
              help="vLLM's front-end processes (vllm serve --api-server-count): they share the per-token drain.")
@click.option("--max-num-seqs", type=click.IntRange(1))
@click.option("--max-num-batched-tokens", type=click.IntRange(16))
@click.option("--max-model-len", type=click.IntRange(16))
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.1, 1.0))
@click.option("--block-size", type=click.IntRange(1))
@click.option("--chunked-prefill/--no-chunked-prefill", default=None)
@click.option("--prefix-caching/--no-prefix-caching", default=None)
@cli_options.add(cli_options.WORKLOAD)
@click.option("--burst-headroom", default=0.2, show_default=True, type=click.FloatRange(0))
@click.option("--spares", default=1, show_default=True, type=click.IntRange(0), help="N+1 spare replicas.")
@click.option("--gpus-per-replica", "--tp", type=click.IntRange(1), help="Default: smallest TP that fits.")
@click.option("--gpus", type=click.IntRange(1), help="The fleet for --at-rate/--concurrency/--max-throughput.")
@click.option("--price", type=click.FloatRange(0), help="USD per GPU-hour (default: the catalog's reference).")
@click.option("--prefix-hit-rate", type=click.FloatRange(0, 0.99),
              help="Share of each prompt found in the prefix cache (default 0; with --results, the share the "
                   "measured server found where the workload reuses prompts by design: multi-turn, shared prefixes).")
@click.option("--no-search", is_flag=True, help="Do not search the engine-flag grid.")
@click.option("--disaggregated", is_flag=True,
              help="Compare prefill/decode pools (KV handed over the interconnect) with colocated serving, in "
                   "goodput per GPU (DistServe's measure).")
@click.option("--out", type=click.Path(dir_okay=False), help="plan.json path (default: in --results, or ./).")
@cli_options.add(cli_timeline.FLAGS)
@click.pass_context
def plan_command(ctx: click.Context, **o) -> None:
    """Answer a capacity question for a workload, an engine and GPUs, with bands: GPUs for --qps, latencies
    --at-rate or at --concurrency, --max-throughput, or the SLO capacity of one replica. plan.json fields:
    answer, figures (name, value, unit, label measured/simulated/estimated, band), setup, memory, measured,
    simulated (point, grid, recommended_flags), cost, estimates."""
    if ctx.invoked_subcommand:
        return
    from llmbench.datasets import DatasetError
    from llmbench.plan.planner import PlanError, PlanRequest, make_plan
    from llmbench.slo import SLOError, parse_slo

    if sum((o["qps"] is not None, o["at_rate"] is not None, o["concurrency"] is not None, o["max_throughput"],
            o["max_concurrency_under"] is not None)) > 1:
        raise click.UsageError(f"ask one question at a time: {MODES}")
    scenario_options = {}
    if o["scenario"]:
        from llmbench import scenario
        from llmbench.scenario import ScenarioError

        try:
            loaded = scenario.to_options(scenario.load(o["scenario"]))
        except ScenarioError as err:
            raise click.UsageError(str(err)) from None
        if o["dataset"] is None and "dataset" in loaded:
            o["dataset"], scenario_options = loaded["dataset"], loaded["dataset_options"]
        o["slo"] = o["slo"] or loaded.get("slo")
    cli_options.check_tokenizer(o["tokenizer"])
    if o["results"] is None:
        o["dataset"] = cli_options.dataset_choice(o)
        dataset_opts = cli_options.dataset_options(o, scenario_options)
    if o["calibration_rates"] is not None and not o["results"]:
        raise click.UsageError("--calibration-rates picks the rates of a measured sweep to calibrate on: give --results")
    if o["request_spread"] is not None and not o["results"]:
        raise click.UsageError("--request-spread is the spread a calibration measures on a sweep: give --results")
    if o["step_jitter"] is not None and not o["results"]:
        raise click.UsageError("--step-jitter is the spread a calibration measures on a sweep: give --results")
    results = _readable(Path(o["results"])) if o["results"] else None
    beside = results if results and results == Path(o["results"]) else None  # never into an imported copy
    path = Path(o["out"]) if o["out"] else (beside / "plan.json" if beside else Path("plan.json"))
    if o["gpu_spec"] == this_cpu.THIS_CPU:
        o["gpu_spec"] = _this_cpu(results, path.parent / "this_cpu.json")
    measured = measured_dtypes(results) if results else {}
    knobs = {k: o[k] for k in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size",
                               "max_model_len", "api_server_count", "long_prefill_token_threshold")
             if o[k] is not None}
    if o["long_prefill_token_threshold"] and o["engine"].partition("@")[0] != "vllm":
        raise click.UsageError(f"--long-prefill-token-threshold is a vLLM flag; engine {o['engine']!r} has none")
    if o["num_scheduler_steps"] is not None:
        knobs["scheduler_steps"] = o["num_scheduler_steps"]
    if o["chunked_prefill"] is not None:
        knobs["chunked_prefill"] = o["chunked_prefill"]
    if o["prefix_caching"] is not None:
        knobs["prefix_caching"] = o["prefix_caching"]
    try:
        slo = parse_slo(o["max_concurrency_under"] or o["slo"] or list(o["goodput"] or ()), o["attainment"])
        check_names(o)
        work = None if results or o["timeline"] else workload(o, dataset_opts)
        request = PlanRequest(
            slo=slo, workload=work, qps=o["qps"], concurrency=o["concurrency"], max_throughput=o["max_throughput"],
            at_rate=o["at_rate"], results=results, gpu=o["gpu"], gpu_spec=o["gpu_spec"], model=o["model"],
            measured_gpu=o["measured_gpu"], measured_tp=o["measured_tp"],
            calibration_rates=o["calibration_rates"] or PlanRequest.calibration_rates,
            request_spread=PlanRequest.request_spread if o["request_spread"] is None else o["request_spread"],
            step_jitter=PlanRequest.step_jitter if o["step_jitter"] is None else o["step_jitter"],
            weight_dtype=o["weight_dtype"] or measured.get("weight_dtype"),
            kv_dtype=o["kv_dtype"] or measured.get("kv_dtype", "bf16"), engine=o["engine"], knobs=knobs,
            num_requests=o["num_prompts"],
            burst_headroom=o["burst_headroom"], spares=o["spares"], gpus_per_replica=o["gpus_per_replica"],
            gpus=o["gpus"], price_per_hour=o["price"], prefix_hit_rate=o["prefix_hit_rate"],
            search_knobs=not o["no_search"], concurrency_under=o["max_concurrency_under"] is not None,
            disaggregated=o["disaggregated"])
        plan = cli_timeline.plan_timeline(o, request, make_plan) if o["timeline"] else make_plan(request)
    except (PlanError, SLOError, DatasetError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    path.write_text(json.dumps(plan, indent=2, default=float))
    print_plan(plan)
    if "policies" in plan:
        cli_timeline.print_timeline(plan)
    click.echo(f"plan: {path}")
    if "series" in plan:  # the day drawn; a results folder's report.html draws it too
        from llmbench.report.plan_page import write_plan_page

        click.echo(f"page: {write_plan_page(plan, path.with_suffix('.html'))}")


def _spec_path(value: str | None) -> str | Path | None:
    """--gpu-spec: a device file that exists, or 'this-cpu' (measured once the plan's folder is known)."""
    if value is None or value == this_cpu.THIS_CPU:
        return value
    if not Path(value).is_file():
        raise click.BadParameter(f"{value!r} is not a file (a device JSON, or '{this_cpu.THIS_CPU}')",
                                 param_hint="--gpu-spec")
    return Path(value)


def _this_cpu(results: Path | None, where: Path) -> Path:
    """This machine's CPU measured into `where`, after checking that a sweep planned on it was served by it."""
    if results is not None:
        from llmbench.results import load_metadata

        try:
            this_cpu.check_sweep(load_metadata(results))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--gpu-spec") from None
    click.echo(f"note: measuring this machine's CPU for --gpu-spec {this_cpu.THIS_CPU} (a few seconds)", err=True)
    return this_cpu.spec_file(where)


def _readable(path: Path) -> Path:
    """A results folder, or another tool's results converted into one."""
    from llmbench.foreign import ForeignFormatError, as_results_folder

    try:
        return as_results_folder(path)
    except ForeignFormatError as err:
        raise click.BadParameter(str(err), param_hint="--results") from None


def check_names(o: dict) -> None:
    """Unknown GPUs and models are reported before seconds of workload tokenizing."""
    from llmbench.plan import gpus, models
    from llmbench.plan.planner import PlanError

    try:
        if o["model"]:
            models.model(o["model"])
        if o["gpu"] and not o["gpu_spec"]:
            if "," in o["gpu"] and not o["timeline"]:
                raise PlanError("several --gpu candidates (A,B) are compared over a day: add --timeline WINDOW")
            for name in o["gpu"].split(","):
                gpus.gpu(name.strip())
        if o["measured_gpu"]:
            gpus.gpu(o["measured_gpu"])
    except KeyError as err:
        raise PlanError(str(err.args[0])) from None


def workload(o: dict, options: dict):
    """The workload as `llmbench run` builds it, from the same flags (`llmbench.cli_options`)."""
    from llmbench.plan.workload import from_dataset

    return from_dataset(o["dataset"], options, o["num_prompts"] or 1000, o["tokenizer"], o["seed"])


@plan_command.command("validate")
@click.option("--row", multiple=True, type=click.Choice(["A", "B", "C", "D", "E", "H", "M4", "M5", "I", "V", "G", "L"]),
              help="Only these sources: A-E planning.md §9, M4 MLPerf v4.1, M5 MLPerf v5.1, I inference-sim's vLLM "
                   "on H100 (tuning); H TensorRT-LLM's other rows, V a vLLM 0.14 rate sweep, G GPUStack's bursts, L "
                   "the same lab's other pages (held out).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the rows as JSON.")
@click.option("--jobs", type=click.IntRange(1), default=None,
              help="Cases simulated at once, one process each (default: the machine's CPUs).")
def validate_command(row: tuple[str, ...], json_out: str | None, jobs: int | None) -> None:
    """Every published row put to the planner, predicted beside published: the tuning half (the sources the
    priors were chosen on) and the held-out half (never tuned on) printed apart, per kind of figure, against
    the signed bands plans are given. The MLPerf rows simulate P99-constrained capacities: minutes (25 on one
    core of a 2-core AMD EPYC Zen 3), shared out over `--jobs` processes; the rows are the same for any count."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    from rich.progress import track
    from rich.table import Table

    from llmbench.live import terminal
    from llmbench.plan import bands, burst_runs, held_out, inference_sim, lab_pages, mlperf, rate_sweep
    from llmbench.plan.published import CASES, SOURCES, error_summary, inside, source_summary, validate

    cases = [c for c in CASES + inference_sim.CASES + held_out.CASES + mlperf.cases() + rate_sweep.CASES
             + burst_runs.CASES + lab_pages.CASES
             if not row or c.row in row]
    console = terminal()  # wide when piped: a case and its band stay on one line
    jobs = min(jobs or os.cpu_count() or 1, max(len(cases), 1))

    def simulated(done) -> list[dict]:
        return [r for case_rows in track(done, total=len(cases), description=f"simulating ({jobs} at once)",
                                         console=console, transient=True) for r in case_rows]

    each = [[case] for case in cases]
    if jobs == 1:
        rows = simulated(map(validate, each))
    else:
        with ProcessPoolExecutor(jobs) as pool:
            rows = simulated(pool.map(validate, each))
    table = Table(title="llmbench plan validate — tuning sources (A-E, M4, M5, I) and held-out sources (H, V, G, L)")
    for col in ("case", "metric", "published", "predicted", "error", "band"):
        table.add_column(col, justify="left" if col in ("case", "metric") else "right")
    for r in rows:
        band = bands.text(bands.BANDS[r["class"]][r["kind"]])
        table.add_row(r["case"], r["metric"], f"{r['published']:,.2f}", f"{r['predicted']:,.2f}", f"{r['error']:+.1%}",
                      f"{band}{'' if inside(r) else ' (outside)'}")
    console.print(table)
    used = sorted({r["row"] for r in rows}, key=list(SOURCES).index)
    console.print("sources: " + "; ".join(f"{k} {SOURCES[k]}" for k in used))
    for s in error_summary(rows):
        capped = f", {s['p99_constrained']} P99-constrained capacities" if s["p99_constrained"] else ""
        console.print(f"{s['part']}, {s['kind']}: {s['figures']} figures{capped}; median |error| {s['median_abs']:.1%} "
                      f"(signed {s['median']:+.1%}); {s['inside_band']} of {s['figures']} inside their bands")
    for s in source_summary(rows):
        console.print(f"  by source, {'held out' if s['held_out'] else 'tuning'} {s['row']}, {s['kind']}: "
                      f"{s['figures']} figures; median |error| {s['median_abs']:.1%} (signed {s['median']:+.1%})")
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=2))


def measured_dtypes(folder: Path) -> dict[str, str]:
    """Weight and KV formats the measured engine reported in /version (bundled engine only)."""
    from llmbench.results import load_metadata

    try:
        config = (load_metadata(folder).get("target", {}).get("version") or {}).get("config") or {}
    except (OSError, ValueError):
        return {}
    found = {}
    quant = config.get("quantization")
    if quant:
        found["weight_dtype"] = "int8" if quant == "int8" else "int4"
    if str(config.get("kv_cache_dtype", "auto")).startswith("fp8"):
        found["kv_dtype"] = "fp8"
    return found


def print_plan(plan: dict) -> None:
    from rich.table import Table

    from llmbench.live import terminal
    from llmbench.plan import bands

    console = terminal()  # wide when piped: a band is never cut at 80 columns
    console.print(f"[bold]{plan.get('answer', '')}[/]")
    for warning in plan.get("warnings", []):
        console.print(f"[bold yellow]warning:[/] {warning}", highlight=False)
    cost = plan.get("cost", {})
    if "usd_per_hour" in cost:
        extra = (f", ${cost['usd_per_million_output_tokens']:.3f} per 1M output tokens"
                 if cost.get("usd_per_million_output_tokens") else "")
        console.print(f"cost: ${cost['usd_per_hour']:.2f}/hour for {cost['gpus']} GPUs at "
                      f"${cost['usd_per_gpu_hour']:.2f}/GPU-hour ({cost['price_source']}){extra}")
    elif cost.get("note"):
        console.print(f"cost: {cost['note']}")
    if plan.get("question") == "qps":
        per = (plan.get("measured") or plan.get("simulated") or {}).get("per_replica_rate")
        console.print(f"sizing: {plan['qps']:g} QPS x (1 + {plan['burst_headroom']:.0%} burst headroom)"
                      + (f" / {per:.3g} req/s per replica" if per else "")
                      + f", rounded up, + {plan['spares']} spare replica(s) (--burst-headroom, --spares)",
                      highlight=False)
    table = Table(title="why — every request at once" if plan.get("question") == "max-throughput" else
                  f"why — {plan['slo_text']}")
    for col in ("figure", "value", "band", "label"):
        table.add_column(col, justify="right" if col in ("value", "band") else "left")
    for f in plan["figures"]:
        band = bands.band_text(f)
        table.add_row(f["name"], f"{bands.number(f['value'], f['unit'])} {f['unit']}", band, f["label"])
    console.print(table)
    sim = plan.get("simulated", {})
    if "grid" in sim:
        grid = "; ".join(f"{r['--max-num-seqs']}/{r['--max-num-batched-tokens']}: {r['rate']:.2f} "
                         f"({r['kv_tokens'] / 1000:,.0f}k)" for r in sim["grid"])
        console.print(f"engine flags simulated (max-num-seqs/max-num-batched-tokens: req/s (KV tokens)): {grid}")
        console.print("recommended: " + " ".join(f"{k} {v}" for k, v in sim["recommended_flags"].items()))
    point = (plan.get("simulated") or {}).get("point") or {}
    if point.get("simulated_requests"):
        asked = "as --num-prompts asked" if plan["setup"].get("exact_requests") else \
            "enough for a steady state; --num-prompts N simulates a run of N"
        opening = point.get("opening_left_out")
        past = (f" past the closed loop's opening burst of {opening}, left out of the figures (a benchmark's run "
                "includes it)") if opening else ""
        console.print(f"simulated: {point['simulated_requests']:,} requests{past} ({asked})", highlight=False)
    if point.get("p99_draws"):
        draws = point["p99_draws"]
        (t_low, t_high), (p_low, p_high) = draws["ttft"], draws["tpot"]
        console.print(f"from one draw of the requests to another: P99 TTFT {t_low:,.0f}-{t_high:,.0f} ms, P99 TPOT "
                      f"{p_low:,.1f}-{p_high:,.1f} ms (the figures above: their mean over {draws['draws']} draws; a "
                      "measured run is one draw)", highlight=False)
    console.print(f"step model: {plan['setup']['step_model']}", highlight=False)
    console.print(f"workload: {plan['setup']['workload']}", highlight=False)
    for note in plan.get("estimates", []):
        console.print(f"[yellow]note:[/] {note}", highlight=False)
