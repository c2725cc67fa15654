"""`llmbench run` and `llmbench sweep`: their options, parsed once into a `SweepPlan`.

Exit codes: 0 measured; 1 nothing could be measured (target unreachable, bad dataset, every request failed);
2 bad command line; 3 measured, but the target stopped answering or more requests failed than
--max-failure-rate allows; 130 interrupted (Ctrl-C), after writing what was measured.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from pathlib import Path

import click

from llmbench import arrivals, cli_options, datasets, results
from llmbench.scenario import ScenarioError
from llmbench.slo import SLOError, parse_slo
from llmbench.sweep import SweepOutcome, SweepPlan, Workload, run_sweep
from llmbench.target import TargetError

OPTIONS = [
    click.option("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000; omitted: start the "
                                    "bundled engine."),
    click.option("--model", help="Model name to request (default: the first listed by /v1/models)."),
    click.option("--backend", type=click.Choice(["openai", "openai-chat"]), default="openai", show_default=True),
    *cli_options.WORKLOAD,
    click.option("--duration", type=click.FloatRange(0, min_open=True),
                 help="Seconds of arrivals per rate (sweep default: 10x the P50 E2E measured first, 15-180 s)."),
    click.option("--burstiness", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True,
                 help="Gamma shape: 1 = Poisson, <1 burstier, 'inf' = constant gaps."),
    click.option("--constant", is_flag=True, help="Constant gaps (burstiness inf)."),
    click.option("--max-concurrency", type=click.IntRange(1), help="Cap on requests in flight."),
    click.option("--warmup", type=click.IntRange(0), default=0, show_default=True,
                 help="Warm-up requests before the measured ones (excluded)."),
    click.option("--think-time", type=click.FloatRange(0), default=0.0, help="multi-turn: seconds between turns."),
    click.option("--ignore-eos/--no-ignore-eos", default=None, help="Send ignore_eos (forced on for random)."),
    click.option("--temperature", type=click.FloatRange(0), help="Sampling temperature to send."),
    *cli_options.SLO_FLAGS,
    click.option("--percentiles", default="50,90,95,99", show_default=True),
    click.option("--request-timeout", default=600.0, show_default=True, help="Seconds a request may take in all."),
    click.option("--read-timeout", default=60.0, show_default=True, type=click.FloatRange(0, min_open=True),
                 help="Seconds a stream that has begun may send nothing before the request fails as stalled "
                      "(the wait for the first chunk is TTFT: only --request-timeout bounds it)."),
    click.option("--max-failure-rate", default=0.05, show_default=True, type=click.FloatRange(0, 1),
                 help="More failed requests than this fraction ends the sweep and exits 3."),
    click.option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token for the target."),
    click.option("--out", type=click.Path(file_okay=False), help="Results folder (default: results/<time>)."),
    click.option("--overwrite", is_flag=True,
                 help="Replace the results of the rates this run measures when --out already has them."),
    click.option("--append", is_flag=True,
                 help="Keep the results --out already has for these rates; write this run's beside them "
                      "(labels rate-N-run2, -run3, ...)."),
    click.option("--steady-state", is_flag=True,
                 help="Also report each rate without its ramp-up and drain (printed beside the whole run)."),
    click.option("--no-progress", is_flag=True, help="No live progress display."),
    click.option("--keep-prefix-cache", is_flag=True,
                 help="Do not ask the server to drop its prefix cache before each rate (POST /reset_prefix_cache)."),
    click.option("--engine", type=click.Choice(["native", "locust"]), default="native", show_default=True,
                 help="Load-generator transport: llmbench's asyncio client, or Locust master + workers."),
    click.option("--workers", type=click.IntRange(1), default=2, show_default=True,
                 help="Locust: local worker processes (others may join from other hosts)."),
    click.option("--users", type=click.IntRange(1), help="Locust: closed-loop users instead of a rate."),
]


def common_options(fn):
    for option in reversed(OPTIONS):
        fn = option(fn)
    return fn


def _with_scenario(ctx: click.Context, opts: dict) -> tuple[dict, dict, dict]:
    """The options with a scenario's values filled in where the command line left the default; and the
    scenario's dataset options and engine flags."""
    if not opts.get("scenario"):
        return opts, {}, {}
    from llmbench import scenario

    try:
        loaded = scenario.to_options(scenario.load(opts["scenario"]))
    except ScenarioError as err:
        raise click.UsageError(str(err)) from None
    merged = dict(opts)
    for key, value in loaded.items():
        if key in ("dataset_options", "engine_flags"):
            continue
        given = key in ctx.params and ctx.get_parameter_source(key) not in (None, click.core.ParameterSource.DEFAULT)
        if not given and not (key == "slo" and opts.get("goodput")):
            merged[key] = value
    return merged, loaded["dataset_options"], loaded["engine_flags"]


def build_plan(ctx: click.Context, opts: dict, *, single: bool) -> SweepPlan:
    """Every flag parsed once: rates, workload, target, SLO, transport."""
    rate = opts["rate"]
    opts, scenario_dataset, engine_flags = _with_scenario(ctx, opts)
    try:
        rates = [arrivals.parse_rate(str(rate))] if single else arrivals.parse_rates(str(opts["rate"]))
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--rate") from None
    try:
        slo = parse_slo(opts.get("slo") or list(opts.get("goodput") or ()), opts["attainment"])
    except SLOError as err:
        raise click.BadParameter(str(err), param_hint="--slo") from None
    try:
        percentiles = tuple(float(p) for p in str(opts["percentiles"]).split(",") if p)
    except ValueError:
        raise click.BadParameter(f"{opts['percentiles']!r}: use numbers, e.g. 50,90,99",
                                 param_hint="--percentiles") from None
    opts["dataset"] = cli_options.dataset_choice(opts)
    if opts["dataset"] in (*cli_options.TRACES, "rate-profile") and len(rates) > 1:
        raise click.UsageError(f"a {opts['dataset']} trace replays at its own timestamps, not at a rate: use "
                               "`llmbench run` (--time-scale sets its pace)")
    options = cli_options.dataset_options(opts, scenario_dataset)
    cli_options.check_tokenizer(opts["tokenizer"])
    opts["base_url"], tidied = cli_options.base_url(opts["base_url"])
    num_prompts, duration = opts["num_prompts"], opts["duration"]
    auto_window = num_prompts is None and duration is None and not single  # the sweep sizes its windows
    ignore_eos = opts["ignore_eos"] if opts["ignore_eos"] is not None else opts["dataset"] == "random"
    workload = Workload(opts["dataset"], options, num_prompts, duration,
                        opts["seed"], ignore_eos, opts["temperature"], opts["backend"], opts["think_time"])
    out = Path(opts["out"] or f"results/{time.strftime('%Y%m%d-%H%M%S')}")
    cli_options.check_out(out)
    labels = [results.label_for(r, opts["max_concurrency"], opts["users"]) for r in rates]
    taken = results.existing_labels(out, labels)
    if opts["overwrite"] and opts["append"]:
        raise click.BadParameter("--overwrite replaces the folder's results and --append keeps them: choose one",
                                 param_hint="--append")
    if taken and not (opts["overwrite"] or opts["append"]):
        raise click.BadParameter(f"{out} already has results for {', '.join(taken)}: choose another --out, "
                                 "--overwrite to replace them, or --append to keep them and add this run's",
                                 param_hint="--out")
    suffix = results.append_suffix(out, labels) if taken and opts["append"] else ""
    return SweepPlan(
        rates=rates, out=out, workload=workload, base_url=opts["base_url"], model=opts["model"],
        tokenizer=opts["tokenizer"], api_key=opts["api_key"], engine_flags=engine_flags,
        burstiness=math.inf if opts["constant"] else float(opts["burstiness"]), max_concurrency=opts["max_concurrency"],
        warmup=opts["warmup"], request_timeout=opts["request_timeout"], read_timeout=opts["read_timeout"],
        percentiles=percentiles, slo=slo,
        transport=opts["engine"], workers=opts["workers"], users=opts["users"], stop_when_saturated=not single,
        max_failure_rate=opts["max_failure_rate"], reset_prefix_cache=not opts["keep_prefix_cache"],
        auto_window=auto_window, notes=[tidied] if tidied else [], overwrite=opts["overwrite"], label_suffix=suffix,
        steady_state=opts["steady_state"], args=opts)


def execute(plan: SweepPlan, progress: bool) -> SweepOutcome:
    """Run the plan with the live view; errors that leave nothing measured become one-line CLI errors."""
    from llmbench.live import LiveView

    view = LiveView(live=progress)
    # SIGTERM (a CI job cancelled, `kill`) stops the run the way Ctrl-C does: what was measured is written
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    try:
        outcome = run_sweep(plan, view)
    except results.FolderBusy as err:
        raise click.UsageError(str(err)) from None
    except (TargetError, datasets.DatasetError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    except KeyboardInterrupt:
        click.echo("interrupted before anything was measured", err=True)
        sys.exit(130)
    finally:
        view.close()
    if outcome.rows and all(r["completed"] == 0 for r in outcome.rows) and not outcome.interrupted:
        why = outcome.rows[-1].get("failure_summary") or "no request succeeded"
        raise click.ClickException(f"nothing could be measured: every request failed ({why}); see {plan.out}")
    return outcome


def finish(plan: SweepPlan, outcome: SweepOutcome, report: bool) -> None:
    """The table, where the files are, and the answer as the last lines; then the exit code."""
    from llmbench.live import answer_line, summary_table, terminal

    console = terminal()
    if outcome.stop_reason:
        console.print(outcome.stop_reason)
    if outcome.failure:
        console.print(f"[red]run failed:[/] {outcome.failure}")
    for row in outcome.rows:
        if row.get("backlog_passed"):
            console.print(f"{row['request_rate']:g} req/s is not counted saturated: {row['backlog_passed']}")
    if outcome.interrupted:
        console.print("[yellow]interrupted:[/] the results so far are written, marked \"interrupted\": true")
    knee = outcome.capacity.passing[-1] if outcome.capacity and outcome.capacity.passing else None
    if report and len(outcome.rows) > 0:
        console.print(summary_table(outcome.rows, f"llmbench sweep — {plan.out}", plan.slo, knee), soft_wrap=False)
        try:
            from llmbench.report import build_report

            console.print(f"report: {build_report([plan.out], plan.out / results.REPORT)}")
        except ImportError as err:  # a machine with only the load generator's packages still gets its answer
            console.print(f"report not written: {err}")
        except OSError as err:
            console.print(f"report not written: {err.strerror or err}")
    console.print(f"results: {plan.out}")
    console.print(answer_line(outcome.capacity, plan.slo, outcome.target_down_at, outcome.rows), highlight=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # held since the first Ctrl-C: all is written now
    if outcome.exit_code:
        sys.exit(outcome.exit_code)
