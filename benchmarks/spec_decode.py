"""Speculative decoding on this machine: acceptance, speed-up against no speculation, and theory.

    python benchmarks/spec_decode.py [--ks 1,2,3,4,5] [--concurrency 1,8,32] [--output-len 64]

Target: the bundled `small` model (fp32). Proposers: the `small-draft` layer-skip self-draft and prompt
lookup (n-gram). Prompts are ShareGPT-sampled (vLLM's rules), outputs `--output-len` tokens (ignore_eos),
greedy. Each load level keeps `concurrency` requests in the engine until 2 × concurrency have finished.
The theoretical speed-up is Leviathan et al.'s (1 − α^(k+1)) / ((1 − α)(k·c + 1)), with α the measured
per-token acceptance rate and c the draft's measured decode cost relative to the target's.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import click
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.engine_throughput import sample  # noqa: E402
from bundled.modelbuild import build_model  # noqa: E402
from engine.config import SamplingParams  # noqa: E402
from engine.llm import LLM  # noqa: E402


def closed_loop(llm: LLM, prompts: list[list[int]], concurrency: int, output_len: int) -> float:
    """Output tokens/s with `concurrency` requests always in flight."""
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    total = 2 * concurrency
    queue = [prompts[i % len(prompts)] for i in range(total)]
    t0 = time.perf_counter()
    started = done = 0
    while done < total:
        while started < total and started - done < concurrency:
            llm.add_request(f"r{time.monotonic_ns()}-{started}", queue[started], params)
            started += 1
        done += sum(1 for out in llm.step() if out.finished)
    return total * output_len / (time.perf_counter() - t0)


def theory(alpha: float, k: int, c: float) -> float:
    expected = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return expected / (k * c + 1)


@click.command()
@click.option("--ks", default="1,2,3,4,5")
@click.option("--concurrency", "levels", default="1,8,32")
@click.option("--output-len", default=64, show_default=True)
@click.option("--num-prompts", default=64, show_default=True)
@click.option("--json-out", default=None, type=click.Path(dir_okay=False))
def main(ks: str, levels: str, output_len: int, num_prompts: int, json_out: str | None) -> None:
    torch.set_num_threads(torch.get_num_threads())
    target, draft = build_model("small"), build_model("small-draft")
    prompts = [p[:512] for p, _ in sample(target, num_prompts, seed=0)]
    conc = [int(x) for x in levels.split(",")]
    common = {"kv_cache_memory": 1 * 2**30, "max_model_len": 1024}

    def measure(model: Path, **spec) -> dict:
        llm = LLM(model, **common, **spec)
        closed_loop(llm, prompts[:2], 1, 8)  # warm-up
        before = dict(llm.stats.totals)
        row = {f"tok/s@{c}": closed_loop(llm, prompts, c, output_len) for c in conc}
        drafts = llm.stats.totals["num_drafts"] - before["num_drafts"]
        drafted = llm.stats.totals["num_draft_tokens"] - before["num_draft_tokens"]
        accepted = llm.stats.totals["num_accepted_tokens"] - before["num_accepted_tokens"]
        row["alpha"] = accepted / drafted if drafted else float("nan")
        row["accepted_len"] = 1 + accepted / drafts if drafts else float("nan")
        return row

    base = measure(target)
    c_draft = base["tok/s@1"] / measure(draft)["tok/s@1"]
    rows = [{"proposer": "none", "k": 0, **base}]
    for proposer in ("small-draft", "ngram"):
        for k in [int(x) for x in ks.split(",")]:
            spec = str(draft) if proposer == "small-draft" else "ngram"
            rows.append({"proposer": proposer, "k": k, **measure(target, speculative_model=spec,
                                                                num_speculative_tokens=k)})
    print(f"\nmachine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}; "
          f"small model fp32, greedy, {output_len} output tokens")
    print(f"draft/target decode cost c = {c_draft:.3f} (measured at batch 1)\n")
    head = f"{'proposer':12} {'k':>2} {'alpha':>6} {'acc.len':>7} " + " ".join(
        f"{'tok/s@' + str(c):>10} {'x' + str(c):>6}" for c in conc) + f" {'theory@1':>8}"
    print(head)
    for row in rows:
        cells = []
        for c in conc:
            cells.append(f"{row[f'tok/s@{c}']:>10.1f} {row[f'tok/s@{c}'] / base[f'tok/s@{c}']:>6.2f}")
        th = theory(row["alpha"], row["k"], c_draft if row["proposer"] == "small-draft" else 0.0) if row["k"] else 1
        row["theory_speedup@1"] = th
        print(f"{row['proposer']:12} {row['k']:>2} {row['alpha']:>6.2f} {row['accepted_len']:>7.2f} "
              + " ".join(cells) + f" {th:>8.2f}")
    for c in conc:
        paying = [r for r in rows[1:] if r[f"tok/s@{c}"] > base[f"tok/s@{c}"]]
        best = max(rows[1:], key=lambda r: r[f"tok/s@{c}"])
        print(f"concurrency {c}: {len(paying)} of {len(rows) - 1} settings beat no speculation; best "
              f"{best['proposer']} k={best['k']} x{best[f'tok/s@{c}'] / base[f'tok/s@{c}']:.2f}")
    if json_out:
        Path(json_out).write_text(json.dumps({"c_draft": c_draft, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
