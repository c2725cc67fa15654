"""Whether a preempted request finds its blocks in vLLM's prefix cache (the planner's tail term `cached preemption`).

    python benchmarks/cached_preemption.py --vllm /tmp/vllm-venv/bin/vllm [--model DIR] [--requests 40] [--seed 1]
        [--budget 2048] [--first-chunk] [--hybrid] [--vllm-arg=--no-async-scheduling ...]

Starts vLLM-CPU serving the small model with a KV pool far too small for the burst (`--num-gpu-blocks-override 80
--block-size 32`: 2,560 tokens), sends N completions at once (random token prompts of 150-449 tokens, 20-299 output
tokens, ignore_eos; `--budget` tokens a step, below the prompts' lengths to split them into chunks), and reads every
re-admission of a preempted request from vLLM itself: a `sitecustomize` on the server's PYTHONPATH wraps
`PrefixCacheStats.record`, which vLLM calls with (tokens, hits, preempted) each time it looks a request up in the
cache; vLLM's /metrics counts the preemptions (its hit counters leave preempted requests out).
The planner's scheduler then runs the same lengths in the same pool and counts the same, as vLLM 0.32 schedules
(tail terms `cached preemption` and `whole-prompt admission`) and with either term off. Prompts share no prefix, so
every hit is a preempted request's own blocks. `--first-chunk` runs vLLM with `--no-scheduler-reserve-full-isl`, as
0.18 admitted. A `--model` whose config names sliding-window layers (`layer_types`) runs vLLM's hybrid KV groups, and
the planner reads the same config (tail term `hybrid KV groups`): the 80 blocks then each span one group's layers.
`--hybrid` builds one: a tiny Gemma-3-text model (seeded random weights, layers alternating a 64-token sliding window
and full attention as gpt-oss's do, the small model's tokenizer; vLLM needs a step budget of 256 or less to hold a
2,048-token request in 80 blocks there).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
import urllib.request
from pathlib import Path
from unittest import mock

import aiohttp
import click
import numpy as np
from front_end_cost import serve_pinned

from llmbench.plan.engine_shape import EngineShape
from llmbench.plan.model_config import model_from_config
from llmbench.plan.scheduler import Scheduler
from llmbench.plan.simulator import simulate

BLOCKS, BLOCK_SIZE = 80, 32  # vLLM-CPU's attention takes blocks of a multiple of 32 tokens
HOOK = '''import importlib.abc, importlib.util, os, sys

class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "vllm.v1.metrics.stats":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            record = module.PrefixCacheStats.record

            def logged(self, num_tokens, num_hits, preempted, *args, **kwargs):
                if preempted:
                    with open(os.environ["LLMBENCH_PREEMPTED_HITS"], "a") as f:
                        f.write(f"{num_tokens} {num_hits}\\n")
                return record(self, num_tokens, num_hits, preempted, *args, **kwargs)

            module.PrefixCacheStats.record = logged

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Hook())
'''


def hybrid_model(dest: Path, tokenizer_from: Path) -> Path:
    """A tiny Gemma-3-text checkpoint whose layers alternate sliding-window (64 tokens) and full attention."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    vocab = json.loads(Path(tokenizer_from, "config.json").read_text())["vocab_size"]
    cfg = Gemma3TextConfig(vocab_size=vocab, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=64,
                           layer_types=["sliding_attention", "full_attention"] * 3, max_position_embeddings=4096,
                           bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(0)
    Gemma3ForCausalLM(cfg).save_pretrained(dest)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(Path(tokenizer_from, name), dest / name)
    return dest


def lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(150, 450, n), rng.integers(20, 300, n)


def summary(readmissions: list[tuple[int, int]], preemptions: int) -> dict:
    """(tokens looked up, tokens found) per re-admission of a preempted request -> the figures the script prints."""
    tokens = sum(t for t, _ in readmissions)
    hits = sum(h for _, h in readmissions)
    return {"preemptions": preemptions, "readmissions": len(readmissions),
            "with_a_hit": sum(h > 0 for _, h in readmissions), "tokens": tokens, "hits": hits,
            "hit_share": hits / tokens if tokens else 0.0}


def planner(prompts: np.ndarray, outputs: np.ndarray, budget: int, keep: bool = True, whole: bool = True,
            groups: tuple[int, int] = (1, 0), window: int = 0, tokens: int | None = None, sparse: bool = True) -> dict:
    """The planner's scheduler on the same burst and pool (`groups` hybrid KV groups of a `window`-token sliding
    window share its blocks; `tokens`: a full-attention model's pool in the same memory, by default the blocks'
    tokens over the groups): each re-admission's tokens and the tokens it found."""
    marked, readmissions = set(), []
    release, admit = Scheduler.release, Scheduler.admit

    def on_release(self, r, preempted=False):
        if preempted:
            marked.add(id(r))
        release(self, r, preempted)

    def on_admit(self, budget, batch):
        waiting = {id(r): r.prompt + r.generated for r in self.waiting if id(r) in marked}
        left = admit(self, budget, batch)
        readmissions.extend((waiting[id(r)], r.computed) for r, _ in batch if id(r) in waiting)
        return left

    class Clock:
        def step_time(self, prefill, decodes, *args, **kwargs):
            return 1e-3 * prefill + 0.01 * (decodes > 0)

    with mock.patch.object(Scheduler, "release", on_release), mock.patch.object(Scheduler, "admit", on_admit):
        res = simulate(np.zeros(len(prompts)), prompts, outputs, Clock(),
                       EngineShape(min(256, budget), budget, tokens or BLOCKS * BLOCK_SIZE // sum(groups), BLOCK_SIZE,
                                   keep_preempted=keep, admit_whole=whole, kv_groups=groups, window=window,
                                   null_blocks=1, sparse_window=sparse and groups[1] > 0,
                                   junction=sparse and groups[1] > 0))
    return summary(readmissions, res.preemptions)


async def burst(url: str, model: str, prompts: np.ndarray, outputs: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed + 1000)
    async with aiohttp.ClientSession() as session:
        async def one(p: int, o: int) -> None:
            body = {"model": model, "prompt": rng.integers(10, 15000, p).tolist(), "max_tokens": int(o),
                    "ignore_eos": True, "temperature": 0}
            async with session.post(f"{url}/v1/completions", json=body) as r:
                if r.status != 200:
                    raise click.ClickException(f"vLLM answered {r.status}: {await r.text()}")
                await r.read()

        await asyncio.gather(*(one(int(p), int(o)) for p, o in zip(prompts, outputs, strict=True)))


def preemptions(url: str) -> int:
    text = urllib.request.urlopen(f"{url}/metrics").read().decode()
    return int(sum(float(x) for x in re.findall(r"^vllm:num_preemptions_total\{[^}]*\} (\S+)", text, re.M)))


@click.command()
@click.option("--vllm", "vllm_bin", required=True, help="The `vllm` executable of a vllm-cpu environment.")
@click.option("--model", default=str(Path.home() / ".cache/llmbench/models/llmbench-small"), show_default=True)
@click.option("--requests", default=40, show_default=True)
@click.option("--seed", default=1, show_default=True)
@click.option("--budget", default=2048, show_default=True, help="Tokens a step (--max-num-batched-tokens).")
@click.option("--first-chunk", is_flag=True, help="vLLM admits on the first chunk (--no-scheduler-reserve-full-isl).")
@click.option("--hybrid", is_flag=True, help="Serve a tiny Gemma-3-text model built from --model's tokenizer.")
@click.option("--vllm-arg", "vllm_args", multiple=True, help="One more flag for `vllm serve` (repeatable).")
def main(vllm_bin: str, model: str, requests: int, seed: int, budget: int, first_chunk: bool, hybrid: bool,
         vllm_args: tuple[str, ...]) -> None:
    prompts, outputs = lengths(requests, seed)
    with tempfile.TemporaryDirectory() as tmp:
        if hybrid:
            model = str(hybrid_model(Path(tmp, "hybrid"), Path(model)))
        spec = model_from_config(Path(model, "config.json"))
        groups = {"groups": spec.kv_groups, "window": spec.sliding_window or 0} if spec.sliding_layers else {}
        pool = BLOCKS * BLOCK_SIZE // sum(spec.kv_groups)  # a full-attention model's tokens in the same memory
        hook, hits = Path(tmp, "hook"), Path(tmp, "hits.txt")
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(HOOK)
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
               "LLMBENCH_PREEMPTED_HITS": str(hits)}
        server, url, _ = serve_pinned(vllm_bin, model, Path(tmp, "vllm.log"), "--num-gpu-blocks-override",
                                      str(BLOCKS), "--block-size", str(BLOCK_SIZE), "--max-num-batched-tokens",
                                      str(budget), "--max-num-seqs", str(min(256, budget)),
                                      *(["--no-scheduler-reserve-full-isl"] if first_chunk else []), *vllm_args,
                                      env=env)
        try:
            served = json.loads(urllib.request.urlopen(f"{url}/v1/models").read())["data"][0]["id"]
            asyncio.run(burst(url, served, prompts, outputs, seed))
            count = preemptions(url)
        finally:
            os.killpg(server.pid, 15)
            server.wait()
        said = [line.split("] ", 1)[-1] for line in Path(tmp, "vllm.log").read_text().splitlines()
                if "KV cache size" in line]
        lines = hits.read_text().split() if hits.exists() else []
        measured = summary([(int(a), int(b)) for a, b in zip(lines[::2], lines[1::2], strict=True)], count)
    how = ", ".join(filter(None, ["first chunk" if first_chunk else "", *vllm_args]))
    rows = {f"vLLM-CPU{', ' + how if how else ''} (measured)": measured,
            "planner, as vLLM 0.32": planner(prompts, outputs, budget, **groups)}
    if groups:
        rows["planner, one pool for all layers"] = planner(prompts, outputs, budget, tokens=pool)
    rows["planner, first chunk admits"] = planner(prompts, outputs, budget, whole=False, **groups)
    rows["planner, recompute all"] = planner(prompts, outputs, budget, keep=False, **groups)
    click.echo("vLLM said: " + "; ".join(said))
    click.echo(f"{requests} requests at once, a pool of {BLOCKS} blocks of {BLOCK_SIZE} tokens, {budget} tokens a step")
    click.echo(f"{'':34s} {'preemptions':>11s} {'re-admitted':>11s} {'with a hit':>10s} {'tokens found':>16s}")
    for name, r in rows.items():
        click.echo(f"{name:34s} {r['preemptions']:11d} {r['readmissions']:11d} {r['with_a_hit']:10d} "
                   f"{r['hits']:6d} of {r['tokens']:5d} ({r['hit_share']:.0%})")


if __name__ == "__main__":
    main()
