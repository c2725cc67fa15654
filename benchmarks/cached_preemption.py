"""Whether a preempted request finds its blocks in vLLM's prefix cache (the planner's tail term `cached preemption`).

    python benchmarks/cached_preemption.py --vllm /tmp/vllm-venv/bin/vllm [--model DIR] [--requests 40] [--seed 1]

Starts vLLM-CPU serving the small model with a KV pool far too small for the burst (`--num-gpu-blocks-override 80
--block-size 32`: 2,560 tokens), sends N completions at once (random token prompts of 150-449 tokens, 20-299 output
tokens, ignore_eos), and reads every re-admission of a preempted request from vLLM itself: a `sitecustomize` on the
server's PYTHONPATH wraps `PrefixCacheStats.record`, which vLLM calls with (tokens, hits, preempted) each time it looks
a request up in the cache; vLLM's /metrics counts the preemptions (its hit counters leave preempted requests out).
The planner's scheduler then runs the same lengths in the same pool and counts the same. Prompts share no prefix,
so every hit is a preempted request's own blocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import urllib.request
from pathlib import Path
from unittest import mock

import aiohttp
import click
import numpy as np
from front_end_cost import serve_pinned

from llmbench.plan.scheduler import EngineShape, Scheduler
from llmbench.plan.simulator import simulate

BLOCKS, BLOCK_SIZE, BUDGET = 80, 32, 2048  # vLLM-CPU's attention takes blocks of a multiple of 32 tokens
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


def planner(prompts: np.ndarray, outputs: np.ndarray, keep: bool = True) -> dict:
    """The planner's scheduler on the same burst and pool: each re-admission's tokens and the tokens it found."""
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
                       EngineShape(256, BUDGET, BLOCKS * BLOCK_SIZE, BLOCK_SIZE, keep_preempted=keep))
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
def main(vllm_bin: str, model: str, requests: int, seed: int) -> None:
    prompts, outputs = lengths(requests, seed)
    with tempfile.TemporaryDirectory() as tmp:
        hook, hits = Path(tmp, "hook"), Path(tmp, "hits.txt")
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(HOOK)
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
               "LLMBENCH_PREEMPTED_HITS": str(hits)}
        server, url, _ = serve_pinned(vllm_bin, model, Path(tmp, "vllm.log"), "--num-gpu-blocks-override",
                                      str(BLOCKS), "--block-size", str(BLOCK_SIZE), env=env)
        try:
            served = json.loads(urllib.request.urlopen(f"{url}/v1/models").read())["data"][0]["id"]
            asyncio.run(burst(url, served, prompts, outputs, seed))
            count = preemptions(url)
        finally:
            os.killpg(server.pid, 15)
            server.wait()
        lines = hits.read_text().split() if hits.exists() else []
        measured = summary([(int(a), int(b)) for a, b in zip(lines[::2], lines[1::2], strict=True)], count)
    rows = {"vLLM-CPU (measured)": measured, "planner, cached preemption": planner(prompts, outputs),
            "planner, recompute all": planner(prompts, outputs, keep=False)}
    click.echo(f"{requests} requests at once, a pool of {BLOCKS} blocks of {BLOCK_SIZE} tokens")
    click.echo(f"{'':28s} {'preemptions':>11s} {'re-admitted':>11s} {'with a hit':>10s} {'tokens found':>16s}")
    for name, r in rows.items():
        click.echo(f"{name:28s} {r['preemptions']:11d} {r['readmissions']:11d} {r['with_a_hit']:10d} "
                   f"{r['hits']:6d} of {r['tokens']:5d} ({r['hit_share']:.0%})")


if __name__ == "__main__":
    main()
