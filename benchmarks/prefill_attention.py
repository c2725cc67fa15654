"""CPU prefill attention: tiled matmuls against torch's SDPA, per call and end to end, side by side.

    python benchmarks/prefill_attention.py [--dtype bfloat16] [--prompt-lens 500..2000 --prompt-lens 30..400]

First the kernels alone on the model's head shape at each length the engine times at load (medians, GFLOP/s of
the causal half), then the engine (bundled small model) prefilling fresh random prompts with one output token,
once with `--cpu-prefill-attention tiled` and once with `sdpa`, alternating round by round so a drift in the
machine's load hits both; new prompts every round (prefix caching would otherwise answer the second).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import click
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bundled.modelbuild import build_model  # noqa: E402
from engine.attention import prefill_attention  # noqa: E402
from engine.config import SamplingParams  # noqa: E402
from engine.kernels.kernel_timing import median_seconds  # noqa: E402
from engine.llm import LLM  # noqa: E402
from llmbench.machine import machine  # noqa: E402

PATHS = ("tiled", "sdpa")


def kernel_table(heads: int, kv_heads: int, dim: int, dtype: torch.dtype) -> None:
    print(f"{'tokens':>8}{'tiled ms':>10}{'SDPA ms':>10}{'tiled GFLOP/s':>15}{'SDPA GFLOP/s':>14}{'SDPA / tiled':>14}")
    for n in prefill_attention.LENGTHS:
        qkv = torch.randn(n, heads + 2 * kv_heads, dim, dtype=dtype)
        with torch.inference_mode():
            t = {p: median_seconds(lambda x, p=p: getattr(prefill_attention, p)(*x.split([heads, kv_heads, kv_heads], 1),
                                                                             dim**-0.5), qkv, calls=9)
                 for p in PATHS}
        flop = 2 * 2 * heads * dim * n * (n + 1) / 2
        print(f"{n:>8}{t['tiled'] * 1e3:>10.2f}{t['sdpa'] * 1e3:>10.2f}{flop / t['tiled'] / 1e9:>15.0f}"
              f"{flop / t['sdpa'] / 1e9:>14.0f}{t['sdpa'] / t['tiled']:>13.2f}x")


@click.command()
@click.option("--dtype", default="bfloat16", show_default=True)
@click.option("--model-size", default="small", show_default=True)
@click.option("--prompt-lens", multiple=True, default=["500..2000", "30..400"], show_default=True,
              help="lo..hi: prompt lengths uniform in this range (one end-to-end comparison per range).")
@click.option("--prompts", default=48, show_default=True, help="Prompts per round.")
@click.option("--rounds", default=4, show_default=True, type=click.IntRange(1))
def main(dtype: str, model_size: str, prompt_lens: tuple[str, ...], prompts: int, rounds: int) -> None:
    model_dir = build_model(model_size)
    cfg = json.loads((model_dir / "config.json").read_text())
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    host = machine()
    print(f"machine: {host['cpu_model'] or host['processor']}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}; ISA {', '.join(host['isa']) or 'unknown'}\n")
    print(f"kernels alone, {heads} heads / {kv_heads} KV heads of {dim}, {dtype}, causal, medians of 9:")
    kernel_table(heads, kv_heads, dim, getattr(torch, dtype))
    llms = {p: LLM(model_dir, dtype=dtype, kv_cache_memory=2 * 2**30, max_model_len=cfg["max_position_embeddings"],
                   cpu_prefill_attention=p) for p in PATHS}
    auto = LLM(model_dir, dtype=dtype, kv_cache_memory=64 * 2**20).runner.prefill_attention
    print(f"\n--cpu-prefill-attention auto here: {auto}")
    rng = random.Random(0)
    for span in prompt_lens:
        lo, hi = (int(x) for x in span.split(".."))
        times: dict[str, list[float]] = {p: [] for p in PATHS}
        tokens = 0
        for _ in range(rounds):
            batch = [[rng.randrange(3, cfg["vocab_size"]) for _ in range(rng.randint(lo, hi))] for _ in range(prompts)]
            tokens += sum(map(len, batch))
            for p, llm in llms.items():
                t0 = time.perf_counter()
                llm.generate(batch, SamplingParams(temperature=0, max_tokens=1))
                times[p].append(time.perf_counter() - t0)
        ratios = [s / t for s, t in zip(times["sdpa"], times["tiled"], strict=True)]
        print(f"\nprompts {lo}..{hi} tokens, {rounds} rounds of {prompts} ({tokens / rounds:.0f} prompt tokens a round), "
              f"one output token:")
        for p in PATHS:
            print(f"  {p:<6} " + "  ".join(f"{t:.2f}" for t in times[p]) + " s")
        print(f"  SDPA / tiled, end to end: median {sorted(ratios)[len(ratios) // 2]:.2f}x "
              f"(round by round {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
