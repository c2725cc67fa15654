"""`llmbench gate`: compare a run with a baseline (exit 0 pass, 1 regression, 2 unusable input, 4 inconclusive:
a metric whose runs were too small to detect a regression of its tolerance)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from llmbench import cli_options, gate_ratio, gate_report
from llmbench import gate as g


@click.command("gate", epilog="Exit codes: 0 pass; 1 a regression beyond tolerance and significant; 2 unusable "
               "input; 4 inconclusive: no regression found, but some metric's runs were too small to detect one "
               "as large as its tolerance (the summary says how many requests would; --allow-inconclusive passes).")
@click.option("--baseline", type=click.Path(), required=True, help="Results folder, result JSON or baseline file.")
@click.option("--current", type=click.Path(), help="Results folder or result JSON (ours or vLLM's).")
@click.option("--max-regression", default=None, help="e.g. p99_ttft=10%,p99_tpot=10%,output_throughput=5%")
@click.option("--confidence", default=0.95, show_default=True, type=click.FloatRange(0.5, 0.9999))
@click.option("--update-baseline", is_flag=True, help="Write the current run as the new baseline file and exit.")
@click.option("--allow-inconclusive", is_flag=True,
              help="Pass (exit 0) when a metric's runs were too small to detect its tolerance, instead of exit 4.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False),
              help="Markdown summary (default: gate-summary.md next to --current, or to the ratio baseline).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
              help="JUnit XML (default: gate-junit.xml next to --current).")
@click.option("--ratio", is_flag=True, help="Ratio mode: measure candidate and reference interleaved, gate ratios.")
@click.option("--name", default="pair", show_default=True, help="Ratio mode: name of this pair in the baseline.")
@click.option("--candidate", default="", help="Ratio mode: bundled-engine flags, e.g. batching=continuous.")
@click.option("--reference", default="", help="Ratio mode: bundled-engine flags, e.g. batching=static.")
@click.option("--candidate-url", help="Ratio mode: an external candidate server instead.")
@click.option("--reference-url", help="Ratio mode: an external reference server instead.")
@click.option("--model", help="Ratio mode: model for the bundled engines (folder), or the name to request.")
@cli_options.add(cli_options.DATASET)
@click.option("--dataset-option", multiple=True, help="Ratio mode: KEY=VALUE for the dataset builder.")
@click.option("--rounds", default=2, show_default=True, help="Ratio mode: A B rounds.")
@click.option("--rate", default="inf", show_default=True)
def gate_command(baseline, current, max_regression, confidence, update_baseline, allow_inconclusive, summary_path,
                 junit_path, ratio, name, candidate, reference, candidate_url, reference_url, model, dataset_option,
                 rounds, rate, **workload) -> None:
    """Fail CI on a performance regression that is beyond tolerance and statistically significant."""
    try:
        tolerances = g.parse_tolerances(max_regression)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--max-regression") from None
    if ratio:
        summary_path = summary_path or str(Path(baseline).parent / "gate-summary.md")
        workload["dataset"] = cli_options.dataset_choice(workload)
        options = cli_options.dataset_options(workload)
        options |= dict(_kv(o) for o in dataset_option)
        code = _ratio(baseline, update_baseline, tolerances, confidence, name, candidate, reference, candidate_url,
                      reference_url, model, workload["dataset"], options, workload["num_prompts"] or 32, rounds,
                      rate, summary_path, workload["seed"])
        sys.exit(code)
    if current is None:
        raise click.UsageError("--current is required (or use --ratio)")
    try:
        cur = g.load_runs(current)
        if update_baseline:
            click.echo(f"baseline written: {g.write_baseline(cur, baseline)}")
            return
        result = g.compare(g.load_runs(baseline), cur, tolerances, confidence)
        result.allow_inconclusive = allow_inconclusive
    except g.GateInputError as err:
        click.echo(f"Error: {err}", err=True)
        sys.exit(2)
    text = gate_report.markdown(result)
    beside = Path(current) if Path(current).is_dir() else Path(current).parent
    summary, junit = Path(summary_path or beside / "gate-summary.md"), Path(junit_path or beside / "gate-junit.xml")
    summary.write_text(text)
    junit.write_text(gate_report.junit(result))
    click.echo(text)
    click.echo(f"summary: {summary}\njunit: {junit}")
    sys.exit(result.exit_code)


def _ratio(baseline, update, tolerances, confidence, name, candidate, reference, candidate_url, reference_url,
           model, dataset, options, num_prompts, rounds, rate, summary_path, seed) -> int:
    from llmbench.arrivals import parse_rate

    path = Path(baseline)
    if not update:  # said before minutes of measuring, not after
        if not path.is_file():
            click.echo(f"Error: {path}: no ratio baseline (run with --update-baseline first)", err=True)
            return 2
        pairs = gate_ratio.load(path)["pairs"]
        if name not in pairs:
            click.echo(f"Error: {path} has no pair {name!r} (it has {', '.join(pairs)})", err=True)
            return 2
    try:
        sides = [gate_ratio.Side("reference", reference_url, gate_ratio.parse_flags(reference)),
                 gate_ratio.Side("candidate", candidate_url, gate_ratio.parse_flags(candidate))]
        measured = gate_ratio.measure(sides, dataset, options, num_prompts, rounds, model, parse_rate(rate), seed)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    current = gate_ratio.ratios(measured, "candidate", "reference", list(tolerances), confidence)
    if update:
        data = gate_ratio.load(path) if path.is_file() else {"pairs": {}}
        data["pairs"][name] = {"candidate": candidate or candidate_url, "reference": reference or reference_url,
                               "dataset": dataset, "num_prompts": num_prompts, "ratios": current}
        gate_ratio.save(path, data["pairs"], {})
        click.echo(f"ratio baseline {name!r} written to {path}")
        _print_ratios(current)
        return 0
    rows = gate_ratio.gate(current, pairs[name]["ratios"], tolerances)
    lines = [f"## llmbench ratio gate `{name}`: {'❌ regression' if any(r['verdict'] == 'regression' for r in rows) else '✅ pass'}",
             "", "| metric | baseline ratio | current ratio | interval | change (+ = worse) | verdict |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r["verdict"] == "missing":
            lines.append(f"| {r['metric']} | – | {r['ratio']:.3f} | – | – | missing |")
            continue
        lines.append(f"| {r['metric']} | {r['baseline_ratio']:.3f} | {r['ratio']:.3f} | [{r['ci'][0]:.3f}, "
                     f"{r['ci'][1]:.3f}] | {r['change'] * 100:+.1f}% | {r['verdict']} |")
    text = "\n".join(lines) + "\n"
    Path(summary_path).write_text(text)
    click.echo(text)
    click.echo(f"summary: {summary_path}")
    return 1 if any(r["verdict"] == "regression" for r in rows) else 0


def _kv(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise click.BadParameter(f"{text!r}: use KEY=VALUE", param_hint="--dataset-option")
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


def _print_ratios(current: dict) -> None:
    for metric, r in current.items():
        shown = f"{r['ratio']:.3f}" if math.isfinite(r["ratio"]) else "nan"
        click.echo(f"  {metric}: candidate/reference = {shown} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]")
