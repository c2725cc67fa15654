"""The `llmbench` command line."""

from __future__ import annotations

import click

from llmbench import __version__
from llmbench.arrivals import parse_rate, parse_rates
from llmbench.cli_bench import common_options, execute, print_summary
from llmbench.cli_gate import gate_command
from llmbench.cli_plan import plan_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="llmbench")
def main() -> None:
    """Benchmark OpenAI-compatible LLM servers, plan GPU counts, gate regressions in CI."""


@main.command()
@click.option("--rate", default="inf", show_default=True, help="Requests per second, or 'inf'.")
@common_options
@click.pass_context
def run(ctx: click.Context, rate: str, **opts) -> None:
    """Measure one load level against a server (or the bundled engine)."""
    try:
        rates = [parse_rate(rate)]
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--rate") from None
    out = execute(ctx, {"rate": rate, **opts}, rates, default_prompts=200, default_duration=None,
                  stop_when_saturated=False)
    click.echo(f"results: {out}")


@main.command()
@click.option("--rate", default="1..8", show_default=True, help="Rates: a..b, a..b:step, or 5,10,20.")
@common_options
@click.pass_context
def sweep(ctx: click.Context, rate: str, **opts) -> None:
    """Measure a series of request rates, stopping early once the server saturates."""
    try:
        rates = parse_rates(rate)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--rate") from None
    out = execute(ctx, {"rate": rate, **opts}, rates, default_prompts=None, default_duration=15.0,
                  stop_when_saturated=True)
    print_summary(out)
    from llmbench.report import build_report

    click.echo(f"report: {build_report([out], out / 'report.html')}")
    click.echo(f"results: {out}")


@main.command()
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False))
@click.option("--title", help="Page title.")
def report(folders: tuple[str, ...], output: str, title: str | None) -> None:
    """Write one self-contained HTML report of one or more results folders (overlaid when several)."""
    from llmbench.report import build_report

    try:
        click.echo(build_report(list(folders), output, title))
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
    from llmbench.modelbuild import build_model

    click.echo(build_model(size, out, force=force))


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """Serve the bundled engine (OpenAI-compatible API); `llmbench serve --help` lists its flags."""
    import os
    import sys

    os.execv(sys.executable, [sys.executable, "-m", "engine.server", *args])


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def quantize(args: tuple[str, ...]) -> None:
    """Quantize a local checkpoint to 4 bits (AWQ, RTN or GPTQ layout); `llmbench quantize --help` for flags."""
    import os
    import sys

    os.execv(sys.executable, [sys.executable, "-m", "engine.quantize", *args])


if __name__ == "__main__":
    main()
