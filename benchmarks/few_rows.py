"""Decode steps of few sequences (low load, a batch's drain) with and without the few-row linear kernel.

    python benchmarks/few_rows.py [--dtype float32,auto] [--batches 1,4,16] [--rounds 3] [--vllm-python PY]

Two engines on the small model, one with `--cpu-gemv off` (oneDNN or F.linear at every row count) and one with
the default (`auto`: the C++ kernel up to the row count timed faster at load), generate the same greedy tokens
in turn, round after round, so the host's drift reaches both; prints milliseconds per decode step (medians over
the rounds) and their ratio per batch size; with `--vllm-python`, vLLM-CPU's offline engine on the same prompts
in the same dtype once per batch size after the rounds (engine_throughput.py's peer run).
"""

from __future__ import annotations

import statistics
import time

import click
import torch
from engine_throughput import resolve_dtype, run_vllm  # benchmarks/ is the script's folder

from bundled.modelbuild import build_model
from engine.config import SamplingParams
from engine.llm import LLM
from llmbench.machine import machine

STEPS = 128


def prompts(batch: int) -> list[list[int]]:
    return [[5 + i, 17, 300 + i, 42] * 8 for i in range(batch)]


def ms_per_step(llm: LLM, batch: int) -> float:
    params = SamplingParams(max_tokens=STEPS, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    llm.generate(prompts(batch), params)
    return (time.perf_counter() - start) / STEPS * 1e3


@click.command()
@click.option("--dtype", default="float32,auto", show_default=True, help="One or more, comma-separated.")
@click.option("--batches", default="1,4,16", show_default=True, help="Sequences decoding together.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
@click.option("--model-size", default="small", show_default=True)
@click.option("--vllm-python", help="Python of a virtual environment with vllm-cpu installed (optional peer).")
def main(dtype: str, batches: str, rounds: int, model_size: str, vllm_python: str | None) -> None:
    host = machine()
    print(f"machine: {host['cpu_model'] or host['processor']}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}; ISA {', '.join(host['isa']) or 'unknown'}")
    model_dir = build_model(model_size)
    sizes = [int(b) for b in batches.split(",")]
    for asked in dtype.split(","):
        engines = {mode: LLM(model_dir, dtype=asked.strip(), cpu_gemv=mode, kv_cache_memory=256 * 2**20)
                   for mode in ("off", "auto")}
        print(f"\n--dtype {asked} ({engines['auto'].runner.dtype_choice}); with the kernel: "
              f"{engines['auto'].runner.linear_path}")
        for llm in engines.values():
            ms_per_step(llm, 1)  # warm-up
        times = {(mode, b): [] for mode in engines for b in sizes}
        for _ in range(rounds):
            for b in sizes:
                for mode, llm in engines.items():
                    times[mode, b].append(ms_per_step(llm, b))
        chosen = resolve_dtype(asked.strip(), model_dir, "cpu") if vllm_python else ""
        peer = {b: run_vllm(vllm_python, model_dir, [(p, STEPS) for p in prompts(b)], chosen) / STEPS * 1e3
                for b in sizes} if vllm_python else {}
        print(f"{'sequences':>10}{'without ms/step':>17}{'with ms/step':>14}{'without / with':>16}"
              + (f"{'vLLM ms/step':>14}{'vLLM / with':>13}" if peer else "") + "  round by round")
        for b in sizes:
            off, on = statistics.median(times["off", b]), statistics.median(times["auto", b])
            by_round = ", ".join(f"{x / y:.2f}" for x, y in zip(times["off", b], times["auto", b], strict=True))
            vs = f"{peer[b]:>14.2f}{peer[b] / on:>12.2f}x" if peer else ""
            print(f"{b:>10}{off:>17.2f}{on:>14.2f}{off / on:>15.2f}x{vs}  {by_round}")


if __name__ == "__main__":
    main()
