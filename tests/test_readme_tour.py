"""Every `llmbench` command the README shows parses as written (placeholders filled in), its flags pass the
checks run before anything starts, and the cheap ones run: the tour cannot drift from the command line."""

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from engine.quant.quantize import quantize_command
from engine.serve.__main__ import server_command
from llmbench.cli import main
from llmbench.cli_run import build_plan

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[str]:
    """`llmbench ...` from the bash blocks (continuations joined, comments dropped), the CI example's `run:`
    lines, and the code spans of the text and the tour table."""
    text = README.read_text()
    found = []
    for block in re.findall(r"```(?:bash|yaml)?\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\s*(- )?(run: )?", "", line)
            if line.startswith("llmbench "):
                found.append(re.sub(r"\s+#.*$", "", line).strip())
    found += [" ".join(span.split()) for span in re.findall(r"`(llmbench [^`]+)`", text) if len(span.split()) > 2]
    return list(dict.fromkeys(c for c in found if not c.startswith("llmbench answers")))


def fill(command: str, folder: Path, model: Path) -> list[str]:
    """Placeholders as a user would fill them."""
    command = re.sub(r"\$\(llmbench model build[^)]*\)", str(model), command).replace('"', "")
    command = re.sub(r"\[[^\]]*(…|\.\.\.)[^\]]*\]", "", command)  # [DIR …]: optional repeats
    command = re.sub(r"\[(-[^\]]+)\]", r"\1", command)  # [--results DIR], [-o FILE]: take the option
    command = re.sub(r"(\w+)(\\\|[\w-]+)+", r"\1", command)  # tiny\|small\|...: the first choice
    words = shlex.split(command)[1:]
    subs = {"URL": "http://127.0.0.1:9", "NAME": "m", "DIR": str(folder), "BASE": str(folder / "base.json"), "FILE": str(folder / "ratio.json"),
            "CUR": str(folder), "M": "llama-3.1-8b", "G": "A100-80GB", "MODEL": str(model),
            "FLAGS": "batching=static", "$GITHUB_STEP_SUMMARY": str(folder / "summary.md"),
            "trace.jsonl": str(folder / "trace.jsonl"), "current": str(folder.parent / "fresh-run")}
    return [subs.get(w, w) for w in words]


def parse(args: list[str]) -> tuple[click.Command, click.Context]:
    """Resolve the (sub)command and parse its flags, as running it would, without running it."""
    ctx = main.make_context("llmbench", list(args), resilient_parsing=False)
    cmd: click.Command = main
    rest = list(args)
    while isinstance(cmd, click.Group) and rest and rest[0] in cmd.commands:
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        if cmd.name in ("serve", "quantize"):  # the engine's own command lines
            engine_cmd = server_command if cmd.name == "serve" else quantize_command
            try:
                return engine_cmd, engine_cmd.make_context(cmd.name, rest)
            except click.exceptions.Exit:  # --help
                return engine_cmd, None
        ctx = cmd.make_context(name, rest, parent=ctx)
        rest = list(ctx.args) if isinstance(cmd, click.Group) else []
    return cmd, ctx


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_model):
    """A results folder of two quick runs against the scripted server (report, gate and plan read it)."""
    from llmbench.scripted_server import ScriptedProcess

    out = tmp_path_factory.mktemp("tour")
    with ScriptedProcess("--ttft-ms", "5", "--itl-ms", "2") as server:
        r = CliRunner().invoke(main, ["sweep", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate",
                                      "10,20", "--duration", "3", "--output-len", "8", "--out", str(out),
                                      "--no-progress"])
    assert r.exit_code == 0, r.output
    (out / "trace.jsonl").write_text('{"prompt": "hello there", "output_len": 8, "timestamp": 0.5}\n')
    return out


def test_the_readme_shows_every_command():
    commands = readme_commands()
    for name in ("sweep", "run", "plan", "report", "gate", "serve", "model build", "quantize"):
        assert any(c.startswith(f"llmbench {name}") for c in commands), name
    assert len(commands) >= 25


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_parses(command, folder, tiny_model):
    cmd, ctx = parse(fill(command, folder, tiny_model))
    if ctx is not None and cmd.name in ("run", "sweep"):  # the checks made before any server starts
        build_plan(ctx, dict(ctx.params), single=cmd.name == "run")


def test_the_cheap_tour_commands_run(folder, tiny_model):
    runner = CliRunner()
    for command in ("llmbench report DIR", "llmbench gate --baseline BASE --current CUR --update-baseline",
                    "llmbench gate --baseline BASE --current CUR", "llmbench model build --size tiny"):
        r = runner.invoke(main, fill(command, folder, tiny_model))
        assert r.exit_code in (0, 4), (command, r.output)  # 4: runs this short are inconclusive, and say so
    assert (folder / "report.html").is_file() and (folder / "base.json").is_file()
