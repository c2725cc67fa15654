"""The flags several commands share, defined once: the workload, the SLO, the target and the output folder.

`run`, `sweep` and `plan` take the workload and SLO flags from here, so a workload written for one command runs
on the other unchanged; vLLM's `bench serve` spellings (`--random-input-len`, `--sharegpt-output-len`,
`--goodput`) are accepted beside llmbench's. Each check runs while the command line is parsed, before any
server starts or any request is sent, and a failure is one line naming the flag and the fix (exit 2).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import click

from llmbench import datasets

# CLI option -> (datasets it applies to, the dataset builder's keyword)
TRACES = ("azure", "burstgpt", "mooncake")
DATASET_FLAGS = {
    "dataset_path": (("sharegpt", "multi-turn", "jsonl", *TRACES, "rate-profile"), "path"),
    "input_len": (("random", "rate-profile"), "input_len"),
    "output_len": (("sharegpt", "multi-turn", "random", "jsonl", "rate-profile"), "output_len"),
    "range_ratio": (("random",), "range_ratio"),
    "input_mean": (("synthetic",), "input_mean"),
    "output_mean": (("synthetic",), "output_mean"),
    "max_turns": (("multi-turn",), "max_turns"),
    "time_scale": ((*TRACES, "rate-profile"), "time_scale"),
    "trace_start": (TRACES, "trace_start"),
    "trace_duration": (TRACES, "trace_duration"),
    "model_filter": (("burstgpt",), "model_filter"),
    "hash_block_size": (("mooncake",), "block_size"),
    "sessions": (("burstgpt", "mooncake"), "sessions_on"),
}

DATASET = [
    click.option("--dataset", type=click.Choice(datasets.NAMES),
                 help="Workload (default sharegpt; random when only --input-len is given)."),
    click.option("--dataset-path", help="ShareGPT JSON/JSONL or your own JSONL (jsonl dataset)."),
    click.option("--num-prompts", type=click.IntRange(1), help="Requests per rate (plan: lengths sampled, 1000)."),
    click.option("--input-len", "--random-input-len", "input_len", type=click.IntRange(1),
                 help="random: input tokens (1024); alone, it selects the random dataset."),
    click.option("--output-len", "--random-output-len", "--sharegpt-output-len", "output_len",
                 type=click.IntRange(1), help="Output tokens: fixed (sharegpt, multi-turn, jsonl) or the mean (random, 128)."),
    click.option("--range-ratio", "--random-range-ratio", "range_ratio", type=click.FloatRange(0, 1, max_open=True),
                 help="random: lengths uniform in L(1±r)."),
    click.option("--input-mean", type=float, help="synthetic: mean input tokens."),
    click.option("--output-mean", type=float, help="synthetic: mean output tokens."),
    click.option("--max-turns", type=click.IntRange(1), help="multi-turn: user turns per conversation."),
    click.option("--time-scale", type=click.FloatRange(0, min_open=True),
                 help="Traces (azure, burstgpt, mooncake): replay this many times as fast (2 = twice)."),
    click.option("--trace-start", type=click.FloatRange(0), help="Traces: seconds after the first arrival to start at."),
    click.option("--trace-duration", type=click.FloatRange(0, min_open=True), help="Traces: seconds of the trace."),
    click.option("--model-filter", help="burstgpt: only the rows of this Model."),
    click.option("--hash-block-size", type=click.IntRange(1),
                 help="mooncake: tokens per hash id (512; Bailian 16, WEKA 64)."),
    click.option("--sessions/--no-sessions", default=None,
                 help="burstgpt, mooncake: replay a session's rows (Session ID; Bailian chat_id chains) as one "
                      "conversation, each turn after the reply before it (default), or every row alone."),
    click.option("--seed", default=0, show_default=True),
]
WORKLOAD = [  # the dataset, and how its tokens are counted and where its defaults come from
    *DATASET,
    click.option("--tokenizer", type=click.Path(), help="Local tokenizer folder (default: the served model's, if local)."),
    click.option("--scenario", help="Bundled scenario name or YAML path (flags given here win)."),
]

SLO_FLAGS = [
    click.option("--slo", help="P99 SLOs, e.g. ttft=500ms,tpot=50ms[,e2el=3s][,ttfo=5s] (ttfo: the first answer "
                               "token after any reasoning; default: MLPerf's server scenario, TTFT 2 s and TPOT 100 ms)."),
    click.option("--goodput", multiple=True, help="vLLM's spelling of --slo, in ms: --goodput ttft:500 tpot:50."),
    click.option("--attainment", default=0.99, show_default=True, type=click.FloatRange(0.5, 1.0),
                 help="Share of requests that must meet the SLO (0.9 = the SLOs are P90s)."),
]


def add(options: list):
    """Decorate a command with a group of options (in the order given)."""
    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


def dataset_choice(opts: dict) -> str:
    """The dataset named, or random when only --input-len says what to send (as vLLM's random does)."""
    if opts.get("dataset"):
        return opts["dataset"]
    return "random" if opts.get("input_len") is not None else "sharegpt"


def dataset_options(opts: dict, chosen: dict | None = None) -> dict:
    """The dataset builder's keywords from the flags, each checked against the dataset it applies to; a
    dataset file that must exist, exists."""
    name = dataset_choice(opts)
    out = dict(chosen or {})
    for flag, (names, keyword) in DATASET_FLAGS.items():
        if opts.get(flag) is None:
            continue
        if name not in names:
            fits = ", ".join(names)
            raise click.UsageError(f"--{flag.replace('_', '-')} does not apply to the {name} dataset (it applies to "
                                   f"{fits})")
        out[keyword] = opts[flag]
    if name in ("jsonl", *TRACES, "rate-profile") and not out.get("path"):
        raise click.UsageError(f"the {name} dataset needs --dataset-path FILE")
    if out.get("path") and not Path(out["path"]).is_file():
        raise click.BadParameter(f"{out['path']}: no such dataset file", param_hint="--dataset-path")
    return out


def check_tokenizer(path: str | None) -> None:
    """Nothing is downloaded: a --tokenizer is a folder on this machine."""
    if path and not Path(path).is_dir():
        raise click.BadParameter(f"{path}: no such folder (pass a local tokenizer or model folder; nothing is "
                                 "downloaded)", param_hint="--tokenizer")


def base_url(text: str | None) -> tuple[str | None, str | None]:
    """The server's root URL, and a note when it was tidied: a missing http:// is an error that says what to
    type, a trailing /v1 is dropped (llmbench adds /v1/completions itself, as vLLM's --base-url does)."""
    if text is None:
        return None, None
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        hint = f"http://{url}" if "://" not in url else None
        raise click.BadParameter(f"{text!r} is not an http(s) URL" + (f": did you mean {hint}?" if hint else ""),
                                 param_hint="--base-url")
    if parts.path.endswith("/v1"):
        return url[: -len("/v1")], f"--base-url: dropped the trailing /v1 of {text} (llmbench adds /v1/... itself)"
    return url, None


def check_out(path: Path) -> None:
    """The results folder can be written, checked before the target is contacted; nothing is left behind."""
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{path} exists and is not a folder", param_hint="--out")
    existing = path
    while not existing.exists():
        existing = existing.parent
    try:
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as err:
        raise click.BadParameter(f"{path}: cannot write there ({err.strerror or err})", param_hint="--out") from None
