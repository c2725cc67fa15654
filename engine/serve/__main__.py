"""The engine server's command line (`python -m engine.serve`, `llmbench serve`).

Engine flags are derived from `EngineConfig`'s fields (name, type, default, help, bounds); only the
server's own settings are declared here.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import MISSING, fields

import click
import uvloop

from engine import PROG_NAME_ENV
from engine.config import EngineConfig, check, field_types, format_bytes, parse_bytes


def _checked(name: str, convert=None):
    def callback(_ctx, param, value):
        try:
            value = convert(value) if convert and value is not None else value
            check(name, value)
        except ValueError as err:
            raise click.BadParameter(str(err), param=param) from None
        return value

    return callback


def engine_option(f) -> click.Option | None:
    """The click option of one EngineConfig field, or None for fields that are not flags."""
    meta = f.metadata
    if not meta.get("cli", True) or f.default is MISSING:
        return None
    kind, choices, _ = field_types()[f.name]
    flag = "--" + f.name.replace("_", "-")
    common = {"help": meta["help"], "show_default": f.default is not None}
    if f.name == "kv_cache_memory":
        return click.Option([flag], default=format_bytes(f.default), callback=_checked(f.name, parse_bytes),
                            **common)
    if kind is bool:
        return click.Option([f"{flag}/--no-{flag[2:]}"], default=f.default, **common)
    if choices:
        return click.Option([flag], type=click.Choice([str(c) for c in choices]),
                            default=None if f.default is None else str(f.default),
                            callback=_checked(f.name, kind), **common)
    return click.Option([flag], type=kind, default=f.default, callback=_checked(f.name), **common)


def with_engine_options(command: click.Command) -> click.Command:
    command.params[:0] = [opt for f in fields(EngineConfig) if (opt := engine_option(f)) is not None]
    return command


@with_engine_options
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--served-model-name", default=None, help="Name clients use in 'model' (default: the folder).")
@click.option("--api-key", default=None, envvar="LLMBENCH_API_KEY", help="Require 'Authorization: Bearer KEY'.")
@click.option("--max-waiting", default=1024, show_default=True, type=click.IntRange(1),
              help="Requests allowed to wait; beyond it the server answers 503 with Retry-After.")
@click.option("--public-metrics", is_flag=True, help="Leave /metrics and /version open when --api-key is set.")
@click.option("--body-timeout", default=30.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Seconds a request body may take to arrive (408 after).")
@click.option("--idle-timeout", default=60.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Seconds a connection may go without a request in progress (idle, or headers half sent).")
@click.option("--max-connections", default=None, type=click.IntRange(1),
              help="Open connections allowed; beyond it a new one is answered 503 and closed "
                   "[default: the open-file limit less 64].")
@click.option("--shutdown-grace", default=30.0, show_default=True, help="Seconds in-flight requests get on SIGTERM.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
def server_command(host, port, served_model_name, api_key, max_waiting, public_metrics, body_timeout,
                   idle_timeout, max_connections, shutdown_grace, log_level, **engine_flags) -> None:
    """Serve the bundled engine over an OpenAI-compatible HTTP API."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engine.llm import LLM
    from engine.loader import CheckpointError
    from engine.serve.server import build_app, serve

    try:
        llm = LLM(**engine_flags)
    except (CheckpointError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    if not api_key and host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"warning: serving on {host} without --api-key: anyone who can reach it can send requests, "
                   "reset the prefix cache between a benchmark's rates and read /metrics and /version", err=True)
    app = build_app(llm, served_model_name, api_key, max_waiting, public_metrics, body_timeout)
    max_connections = max_connections or default_max_connections()
    uvloop.run(serve(app, host, port, shutdown_grace, max_connections, idle_timeout))  # socket writes and wake-ups in C, not Python


def default_max_connections() -> int:
    """Leave descriptors for the checkpoint, logs and the engine: a cap at the limit itself lets idle sockets
    exhaust it before a normal request's accept."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(soft, 65536) - 64)


def main(argv: list[str] | None = None) -> None:
    server_command.main(args=argv, prog_name=os.environ.get(PROG_NAME_ENV, "python -m engine.serve"))


if __name__ == "__main__":
    main()
