"""`llmbench run` and `llmbench sweep`: the options they share and the loop over rates."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import click

from llmbench import arrivals, datasets, metrics
from llmbench.bench import (
    BenchError,
    Target,
    load_tokenizer,
    open_target,
    plan_offsets,
    quantization_mode,
    run_one,
    write_metadata,
    write_summary,
)
from llmbench.runner import RunConfig
from llmbench.scenario import ScenarioError
from llmbench.sweep import saturation

DATASET_FLAGS = {
    # CLI option -> (dataset, builder keyword)
    "dataset_path": (("sharegpt", "multi-turn", "jsonl"), "path"),
    "output_len": (("sharegpt", "multi-turn"), "output_len"),
    "random_input_len": (("random",), "input_len"),
    "random_output_len": (("random",), "output_len"),
    "random_range_ratio": (("random",), "range_ratio"),
    "input_mean": (("synthetic",), "input_mean"),
    "output_mean": (("synthetic",), "output_mean"),
    "max_turns": (("multi-turn",), "max_turns"),
}


def common_options(fn):
    options = [
        click.option("--base-url", help="OpenAI-compatible server; omitted: start the bundled engine."),
        click.option("--model", help="Model name to request (default: the first listed by /v1/models)."),
        click.option("--tokenizer", help="Local tokenizer folder (default: the served model's, if local)."),
        click.option("--backend", type=click.Choice(["openai", "openai-chat"]), default="openai", show_default=True),
        click.option("--dataset", type=click.Choice(datasets.NAMES), default="sharegpt", show_default=True),
        click.option("--dataset-path", help="ShareGPT JSON/JSONL or your own JSONL (jsonl dataset)."),
        click.option("--num-prompts", type=click.IntRange(1), help="Requests per rate."),
        click.option("--duration", type=click.FloatRange(0, min_open=True), help="Seconds of arrivals per rate."),
        click.option("--burstiness", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True,
                     help="Gamma shape: 1 = Poisson, <1 burstier, 'inf' = constant gaps."),
        click.option("--constant", is_flag=True, help="Constant gaps (burstiness inf)."),
        click.option("--max-concurrency", type=click.IntRange(1), help="Cap on requests in flight."),
        click.option("--warmup", type=click.IntRange(0), default=0, show_default=True,
                     help="Warm-up requests before the measured ones (excluded)."),
        click.option("--seed", default=0, show_default=True),
        click.option("--output-len", type=click.IntRange(1), help="Fixed output length (sharegpt, multi-turn)."),
        click.option("--random-input-len", type=click.IntRange(1), help="random: mean input tokens (1024)."),
        click.option("--random-output-len", type=click.IntRange(1), help="random: mean output tokens (128)."),
        click.option("--random-range-ratio", type=float, help="random: lengths uniform in L(1±r)."),
        click.option("--input-mean", type=float, help="synthetic: mean input tokens."),
        click.option("--output-mean", type=float, help="synthetic: mean output tokens."),
        click.option("--max-turns", type=click.IntRange(1), help="multi-turn: user turns per conversation."),
        click.option("--think-time", type=click.FloatRange(0), default=0.0, help="multi-turn: seconds between turns."),
        click.option("--ignore-eos/--no-ignore-eos", default=None, help="Send ignore_eos (forced on for random)."),
        click.option("--temperature", type=click.FloatRange(0), help="Sampling temperature to send."),
        click.option("--goodput", multiple=True, help="SLOs in ms, e.g. --goodput ttft:500 --goodput tpot:50."),
        click.option("--percentiles", default="50,90,95,99", show_default=True),
        click.option("--request-timeout", default=600.0, show_default=True),
        click.option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token for the target."),
        click.option("--scenario", help="Bundled scenario name or YAML path (flags given here win)."),
        click.option("--out", type=click.Path(file_okay=False), help="Results folder (default: results/<time>)."),
        click.option("--no-progress", is_flag=True, help="No live progress display."),
        click.option("--engine", type=click.Choice(["native", "locust"]), default="native", show_default=True,
                     help="Load-generator transport: llmbench's asyncio client, or Locust master + workers."),
        click.option("--workers", type=click.IntRange(1), default=2, show_default=True,
                     help="Locust: local worker processes (others may join from other hosts)."),
        click.option("--users", type=click.IntRange(1), help="Locust: closed-loop users instead of a rate."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _merge_scenario(ctx: click.Context, opts: dict) -> dict:
    from llmbench import scenario

    opts = dict(opts)
    opts["dataset_options"], opts["engine_flags"] = {}, {}
    if not opts.get("scenario"):
        return opts
    try:
        loaded = scenario.to_options(scenario.load(opts["scenario"]))
    except ScenarioError as err:
        raise click.UsageError(str(err)) from None
    for key, value in loaded.items():
        source = ctx.get_parameter_source(key) if key in ctx.params else None
        if key in ("dataset_options", "engine_flags") or source in (None, click.core.ParameterSource.DEFAULT):
            if key == "goodput" and opts.get("goodput"):
                continue
            opts[key] = value
    return opts


def dataset_options(opts: dict) -> dict:
    chosen = dict(opts.get("dataset_options") or {})
    for flag, (names, keyword) in DATASET_FLAGS.items():
        if opts.get(flag) is not None:
            if opts["dataset"] not in names:
                raise click.UsageError(f"--{flag.replace('_', '-')} does not apply to the {opts['dataset']} dataset")
            chosen[keyword] = opts[flag]
    return chosen


def execute(ctx: click.Context, opts: dict, rates: list[float], default_prompts: int | None,
            default_duration: float | None, stop_when_saturated: bool) -> Path:
    opts = _merge_scenario(ctx, opts)
    if opts.get("scenario") and ctx.info_name == "sweep" and \
            ctx.get_parameter_source("rate") == click.core.ParameterSource.DEFAULT and opts.get("rate"):
        rates = arrivals.parse_rates(str(opts["rate"]))
    try:
        goodput = metrics.parse_goodput(list(opts["goodput"]) if isinstance(opts["goodput"], tuple)
                                        else opts["goodput"])
        percentiles = tuple(float(p) for p in str(opts["percentiles"]).split(",") if p)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    burstiness = math.inf if opts["constant"] else float(opts["burstiness"])
    num_prompts, duration = opts["num_prompts"], opts["duration"]
    if num_prompts is None and duration is None:
        num_prompts, duration = default_prompts, default_duration
    ignore_eos = opts["ignore_eos"] if opts["ignore_eos"] is not None else opts["dataset"] == "random"
    out_dir = Path(opts["out"] or f"results/{time.strftime('%Y%m%d-%H%M%S')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    ds_opts = dataset_options(opts)
    rows: list[dict] = []
    try:
        with open_target(opts["base_url"], opts["model"], opts["engine_flags"], out_dir, opts["api_key"]) as target:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tokenizer, tokenizer_id = load_tokenizer(opts["tokenizer"], target)
                for w in caught:
                    click.echo(f"warning: {w.message}", err=True)
            config = (target.server_info.get("version") or {}).get("config")
            if config:
                click.echo(f"target {target.base_url}: {quantization_mode(config)}")
            for rate in rates:
                row = _one_rate(opts, target, tokenizer, tokenizer_id, ds_opts, rate, burstiness, num_prompts,
                                duration, ignore_eos, goodput, percentiles, out_dir, rows)
                rows.append(row)
                write_summary(out_dir, rows)
                if row.get("saturated") and stop_when_saturated:
                    click.echo(f"stopping the sweep at {rate:g} req/s: {row['saturated']}")
                    break
    except (BenchError, datasets.DatasetError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    if rows and all(r["completed"] == 0 for r in rows):
        raise click.ClickException(f"nothing could be measured: every request failed ({rows[-1]['errors']}); "
                                   f"see {out_dir}")
    return out_dir


def _one_rate(opts, target: Target, tokenizer, tokenizer_id, ds_opts, rate, burstiness, num_prompts, duration,
              ignore_eos, goodput, percentiles, out_dir: Path, history: list[dict]) -> dict:
    offsets = plan_offsets(rate, burstiness, opts["seed"], num_prompts, duration if not math.isinf(rate) else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        requests, info = datasets.build(opts["dataset"], tokenizer, len(offsets), opts["seed"], **ds_opts)
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    if requests and requests[0].timestamp is not None:
        offsets = plan_offsets(rate, burstiness, opts["seed"], None, None, requests)
    cfg = RunConfig(base_url=target.base_url, model=target.model, backend=opts["backend"], rate=rate,
                    burstiness=burstiness, max_concurrency=opts["max_concurrency"], warmup=opts["warmup"],
                    seed=opts["seed"], ignore_eos=ignore_eos, temperature=opts["temperature"],
                    request_timeout=opts["request_timeout"], percentiles=percentiles, goodput=goodput,
                    think_time=opts["think_time"], api_key=opts["api_key"], progress=not opts["no_progress"])
    if not history:
        write_metadata(out_dir, target, {k: v for k, v in opts.items() if k != "api_key"}, info, tokenizer_id)
    if opts.get("engine") == "locust":
        row = _locust_rate(opts, target, cfg, len(offsets), ds_opts, ignore_eos, out_dir, info, tokenizer_id, duration)
    else:
        row = run_one(out_dir, cfg, requests[: len(offsets)], offsets, info, tokenizer_id)
    row["saturated"] = saturation(history, row)
    if row["saturated"]:
        import json

        path = out_dir / f"{row['records_file'].removesuffix('.records.jsonl')}.json"
        path.write_text(json.dumps(row, indent=2, default=str))
    _print_row(row)
    return row


def _locust_rate(opts, target: Target, cfg: RunConfig, num_prompts: int, ds_opts: dict, ignore_eos: bool,
                 out_dir: Path, info, tokenizer_id: str, duration: float | None) -> dict:
    from llmbench.bench import label_for, write_result
    from llmbench.locust_runner import run_locust
    from llmbench.runner import RunResult

    label = label_for(cfg.rate, None) if not opts.get("users") else f"users-{opts['users']}"
    cfg.label = label
    locust_opts = {"dataset": opts["dataset"], "num_prompts": num_prompts, "rate": cfg.rate,
                   "burstiness": cfg.burstiness, "backend": cfg.backend, "seed": cfg.seed, "model": target.model,
                   "tokenizer": tokenizer_id, "dataset_options": {k: v for k, v in ds_opts.items() if k != "path"},
                   "dataset_path": ds_opts.get("path"), "ignore_eos": ignore_eos, "users": opts.get("users")}
    if opts.get("users"):
        cfg.rate = math.inf
        limit = duration or 120.0
    else:
        limit = (num_prompts / cfg.rate if math.isfinite(cfg.rate) else 10.0) + 60.0
    records, notes = run_locust(target.base_url, locust_opts, opts["workers"], out_dir / label, limit, opts.get("users"))
    result = metrics.compute(records, None, cfg.percentiles, cfg.goodput, cfg.rate)
    notes += [f"Locust transport: {opts['workers']} local worker(s)"]
    run = RunResult(records, result, notes, [])
    return write_result(out_dir, label, cfg, run, info, tokenizer_id, {"engine": "locust",
                                                                       "locust_workers": opts["workers"]})


def _print_row(row: dict) -> None:
    notes = "; ".join(row.get("notes") or [])
    click.echo(f"[{row['label']}] completed {row['completed']}, failed {row['failed']}, "
               f"{row['request_throughput']:.2f} req/s (achieved send rate {row['achieved_rate']:.2f}), "
               f"output {row['output_throughput']:.0f} tok/s, TTFT P50/P99 {row['median_ttft_ms']:.0f}/"
               f"{row['p99_ttft_ms']:.0f} ms, TPOT P50/P99 {row['median_tpot_ms']:.1f}/{row['p99_tpot_ms']:.1f} ms"
               + (f" — {notes}" if notes else ""))


def print_summary(out_dir: Path) -> None:
    """The sweep's table: one row per rate."""
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    frame = pd.read_csv(out_dir / "summary.csv")
    table = Table(title=f"llmbench sweep — {out_dir}")
    columns = [("request_rate", "rate", "{:g}"), ("achieved_rate", "sent/s", "{:.2f}"),
               ("request_throughput", "req/s", "{:.2f}"), ("output_throughput", "out tok/s", "{:.0f}"),
               ("median_ttft_ms", "TTFT P50", "{:.0f}"), ("p99_ttft_ms", "TTFT P99", "{:.0f}"),
               ("median_tpot_ms", "TPOT P50", "{:.1f}"), ("p99_tpot_ms", "TPOT P99", "{:.1f}"),
               ("failed", "failed", "{:.0f}")]
    if "spec_acceptance_rate" in frame:
        columns.append(("spec_acceptance_rate", "spec α", "{:.2f}"))
    for _, title, _ in columns:
        table.add_column(title, justify="right")
    for _, row in frame.iterrows():
        table.add_row(*[fmt.format(float(row[key])) if pd.notna(row[key]) else "-" for key, _, fmt in columns])
    Console().print(table)
