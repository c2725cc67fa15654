"""Whether vLLM starts with a --max-model-len in a given KV pool, beside the planner's `vllm_kv_needed`.

    python benchmarks/start_check.py --vllm /tmp/vllm-venv/bin/vllm [--model DIR]

vLLM refuses to start when its KV pool cannot hold one request of --max-model-len tokens, and its error names the
longest it would take ("the estimated maximum model length is N"); `llmbench plan` warns when vLLM's default (the
model's context) does not fit and prints the longest that does (`memory.longest_max_model_len`). This starts
vLLM-CPU with an exact pool (`--kv-cache-memory-bytes`, blocks of 32 tokens) too small for --max-model-len 2048,
on the small model (all full attention) and on a tiny hybrid model (`cached_preemption.hybrid_model`: layers
alternating a 64-token window and full attention, whose windowed layers vLLM asks for at most the window and a
step's tokens), at two step budgets, and prints vLLM's longest beside the planner's. A pool of P tokens is P times
the model's KV bytes a token (every layer, fp32 as served here).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import click
from cached_preemption import hybrid_model
from front_end_cost import PINNED_ENV, free_port

from llmbench.plan.engines import profile
from llmbench.plan.memory import vllm_kv_needed, vllm_longest_len
from llmbench.plan.model_config import model_from_config

BLOCK = 32
SETUPS = {"small (full attention)": ((1000, 256), (1500, 2048)),
          "hybrid (window 64)": ((1000, 256), (1000, 2048), (1500, 256))}  # (pool tokens, step budget)
SAID = re.compile(r"estimated maximum model length is (\d+)")


def vllm_longest(vllm_bin: str, model: str, pool_bytes: int, budget: int, log: Path) -> int | str:
    """vLLM's own answer: the longest length its refusal names, or 'starts' when it comes up."""
    env = {k: v for k, v in (os.environ | PINNED_ENV).items() if k != "VLLM_CPU_KVCACHE_SPACE"}  # it would override the pool
    server = subprocess.Popen(["taskset", "-c", "1", vllm_bin, "serve", model, "--dtype", "float32",
                               "--max-model-len", "2048", "--block-size", str(BLOCK), "--kv-cache-memory-bytes",
                               str(pool_bytes), "--max-num-batched-tokens", str(budget), "--max-num-seqs", "16",
                               "--port", str(free_port())], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        for _ in range(240):
            text = log.read_text()
            if found := SAID.search(text):
                return int(found.group(1))
            if "Application startup complete" in text:
                return "starts"
            if server.poll() is not None:
                raise click.ClickException(f"vLLM exited without naming a length; its log: {log}")
            time.sleep(0.5)
        raise click.ClickException(f"vLLM neither refused nor started in 120 s; its log: {log}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:  # a refused engine can leave its API server waiting
            os.killpg(server.pid, 9)
            server.wait()


@click.command()
@click.option("--vllm", "vllm_bin", required=True, help="The `vllm` executable of a vllm-cpu environment.")
@click.option("--model", default=str(Path.home() / ".cache/llmbench/models/llmbench-small"), show_default=True)
def main(vllm_bin: str, model: str) -> None:
    tmp = Path(tempfile.mkdtemp())
    models = {"small (full attention)": model, "hybrid (window 64)": str(hybrid_model(tmp / "hybrid", Path(model)))}
    click.echo(f"{'model':24s} {'pool tokens':>11s} {'budget':>6s} {'vLLM longest':>12s} {'planner longest':>15s}")
    for name, path in models.items():
        spec = model_from_config(Path(path, "config.json"))
        per_token = spec.kv_bytes_per_token(4.0)
        for pool, budget in SETUPS[name]:
            engine = replace(profile("vllm"), block_size=BLOCK, max_num_batched_tokens=budget)
            said = vllm_longest(vllm_bin, path, int(pool * per_token), budget, tmp / f"{name[:5]}{pool}-{budget}.log")
            ours = vllm_longest_len(spec, pool, engine, 2048)
            ours_text = "starts" if vllm_kv_needed(spec, 2048, engine) <= pool else str(ours)
            click.echo(f"{name:24s} {pool:11d} {budget:6d} {said!s:>12s} {ours_text:>15s}")


if __name__ == "__main__":
    main()
