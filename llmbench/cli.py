"""The `llmbench` command line."""

from __future__ import annotations

from pathlib import Path

import click

from llmbench import __version__, cli_options
from llmbench.cli_gate import gate_command
from llmbench.cli_plan import plan_command
from llmbench.cli_run import build_plan, common_options, execute, finish


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="llmbench")
def main() -> None:
    """Benchmark OpenAI-compatible LLM servers, plan GPU counts, gate regressions in CI."""


EXIT_CODES = ("Exit codes: 0 measured; 1 nothing could be measured; 2 bad command line; 3 the target stopped "
              "answering or more requests failed than --max-failure-rate; 130 interrupted (results so far kept).")


@main.command(epilog=EXIT_CODES)
@click.option("--rate", default="inf", show_default=True, help="Requests per second, or 'inf'.")
@common_options
@click.pass_context
def run(ctx: click.Context, rate: str, **opts) -> None:
    """Measure one load level against a server (or the bundled engine)."""
    plan = build_plan(ctx, {"rate": rate, **opts}, single=True)
    finish(plan, execute(plan, progress=not opts["no_progress"]), report=False)


@main.command(epilog=EXIT_CODES)
@click.option("--rate", default="1..8", show_default=True, help="Rates: a..b, a..b:step, or 5,10,20.")
@common_options
@click.pass_context
def sweep(ctx: click.Context, rate: str, **opts) -> None:
    """Measure a series of request rates, stopping early once the server saturates; end with the answer."""
    plan = build_plan(ctx, {"rate": rate, **opts}, single=False)
    finish(plan, execute(plan, progress=not opts["no_progress"]), report=True)


@main.command()
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="HTML file (default: report.html in the folder, or ./report.html for several folders or "
                   "another tool's file).")
@click.option("--title", help="Page title.")
@cli_options.add(cli_options.SLO_FLAGS)
def report(folders: tuple[str, ...], output: str | None, title: str | None, slo: str | None,
           goodput: tuple[str, ...], attainment: float) -> None:
    """Write one self-contained HTML report of one or more results folders (overlaid when several); --slo
    judges them against another SLO than the one they were measured with (from the per-request records).
    Other tools' results are read too: vLLM --save-result JSON, SGLang bench_serving JSONL, guidellm
    benchmarks.json, AIPerf and inference-perf output folders or files."""
    from llmbench.foreign import ForeignFormatError, as_results_folder
    from llmbench.report import build_report
    from llmbench.results import REPORT
    from llmbench.slo import SLOError, parse_slo

    try:
        stated = parse_slo(slo or list(goodput), attainment) if slo or goodput or attainment != 0.99 else None
    except SLOError as err:
        raise click.BadParameter(str(err), param_hint="--slo") from None
    try:
        readable = [as_results_folder(folder) for folder in folders]
    except ForeignFormatError as err:
        raise click.BadParameter(str(err), param_hint="FOLDERS") from None
    mine = len(folders) == 1 and readable[0] == Path(folders[0])
    output = output or str(Path(folders[0]) / REPORT if mine else REPORT)
    try:
        click.echo(f"report: {build_report(readable, output, title, stated)}")
    except ValueError as err:
        raise click.ClickException(str(err)) from None


main.add_command(gate_command)
main.add_command(plan_command)


@main.group()
def model() -> None:
    """Build the bundled default model (no downloads needed)."""


@model.command("build")
@click.option("--size", type=click.Choice(["tiny", "small", "qwen0.5b-shape", "tiny-draft", "small-draft"]),
              default="small",
              show_default=True, help="*-draft: a layer-skip draft of that model, for speculative decoding.")
@click.option("--out", type=click.Path(file_okay=False), help="Target folder (default: the llmbench cache).")
@click.option("--force", is_flag=True, help="Rebuild even if the folder already holds the model.")
def model_build(size: str, out: str | None, force: bool) -> None:
    """Build the seeded Llama-architecture checkpoint and print its folder."""
    from bundled.modelbuild import build_model

    click.echo(build_model(size, out, force=force))


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """Serve the bundled engine (OpenAI-compatible API); `llmbench serve --help` lists its flags."""
    _exec_engine("engine.serve", "llmbench serve", args)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def quantize(args: tuple[str, ...]) -> None:
    """Quantize a local checkpoint to 4 bits (AWQ, RTN or GPTQ layout); `llmbench quantize --help` for flags."""
    _exec_engine("engine.quant", "llmbench quantize", args)


def _exec_engine(module: str, name: str, args: tuple[str, ...]) -> None:
    """The engine is reached as a program (llmbench never imports it); its usage line says `name`."""
    import os
    import sys

    os.execve(sys.executable, [sys.executable, "-m", module, *args], {**os.environ, "ENGINE_PROG_NAME": name})


if __name__ == "__main__":
    main()
