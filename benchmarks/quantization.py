"""Quantized modes side by side on this machine: memory, KV capacity, speed and quality vs fp32.

    python benchmarks/quantization.py [--num-prompts 64] [--kv-budget-mib 512]

Modes: fp32, int8 (at load), int4 RTN (at load, group 128), int4 AWQ and GPTQ checkpoints written by
`engine.quant.quantize`, fp8 (e4m3) KV cache. All on the bundled `small` model; compute in fp32. Decode tok/s is one
request at a time (64 output tokens), throughput is the ShareGPT sample all at once. Quality: perplexity on
held-out ShareGPT windows and greedy agreement with fp32 over 256 generated tokens.
"""

from __future__ import annotations

import platform
import sys
import tempfile
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
from engine.quant.perplexity import heldout_windows, score  # noqa: E402
from engine.quant.quantize import quantize_checkpoint  # noqa: E402


def decode_rate(llm: LLM, prompts: list[list[int]]) -> float:
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    t0 = time.perf_counter()
    for p in prompts:
        llm.generate([p], params)
    return 64 * len(prompts) / (time.perf_counter() - t0)


def throughput(llm: LLM, reqs) -> float:
    params = [SamplingParams(temperature=0, max_tokens=out, ignore_eos=True) for _, out in reqs]
    t0 = time.perf_counter()
    llm.generate([p for p, _ in reqs], params)
    return sum(out for _, out in reqs) / (time.perf_counter() - t0)


@click.command()
@click.option("--num-prompts", default=64, show_default=True)
@click.option("--kv-budget-mib", default=512, show_default=True)
def main(num_prompts: int, kv_budget_mib: int) -> None:
    model = build_model("small")
    reqs = [(p[:1024], min(out, 256)) for p, out in sample(model, num_prompts, seed=0)]
    work = Path(tempfile.mkdtemp(prefix="llmbench-quant-"))
    awq = quantize_checkpoint(model, work / "awq", "awq")
    gptq = quantize_checkpoint(model, work / "gptq", "gptq")
    # fp32 runs its linears through oneDNN where that is faster, as the engine does by default
    modes = [("fp32", model, {}), ("int8", model, {"quantization": "int8"}),
             ("int4 rtn", model, {"quantization": "int4"}), ("int4 awq", awq, {}), ("int4 gptq", gptq, {}),
             ("fp8 kv", model, {"kv_cache_dtype": "fp8"})]
    common = {"kv_cache_memory": kv_budget_mib * 2**20, "max_model_len": 2048}
    rows, windows, ref_tokens = [], None, None
    for name, folder, kw in modes:
        llm = LLM(folder, **common, **kw)
        windows = windows or heldout_windows(llm.tokenizer, 16, 256)
        ppl, _ = score(llm, windows)
        greedy = llm.generate([reqs[0][0][:64]], SamplingParams(temperature=0, max_tokens=256, ignore_eos=True))
        tokens = greedy[0].outputs[0].token_ids
        ref_tokens = ref_tokens or tokens
        prefix = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens, strict=True)) if a != b), 256)
        quant = llm.runner.quant
        rows.append({
            "mode": name, "resident_mib": llm.runner.weight_bytes() / 2**20,
            "linears_at_rest_mib": (quant.quantized_bytes if quant else None),
            "kernels": quant.path if quant else "-", "kv_tokens": llm.runner.num_blocks * llm.config.block_size,
            "decode": decode_rate(llm, [p[:256] for p, _ in reqs[:4]]), "throughput": throughput(llm, reqs),
            "ppl": ppl, "agree": sum(a == b for a, b in zip(tokens, ref_tokens, strict=True)), "prefix": prefix,
        })
    base = rows[0]
    dense_linears = sum(p.numel() * 4 for n, p in LLM(model, cpu_linear="torch", **common).runner.model
                        .named_parameters() if "layers." in n and "proj" in n)
    print(f"\nmachine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, cpu "
          f"capability {torch.backends.cpu.get_cpu_capability()}; small model, compute fp32, KV budget "
          f"{kv_budget_mib} MiB, {len(reqs)} ShareGPT requests; fp32 decoder linears {dense_linears / 2**20:.1f} MiB")
    print(f"{'mode':10} {'kernels':7} {'weights MiB':>11} {'linears MiB':>11} {'KV tokens':>9} {'x':>5} "
          f"{'decode t/s':>10} {'x':>5} {'thru t/s':>8} {'x':>5} {'ppl rise':>8} {'greedy 256':>10}")
    for r in rows:
        lin = r["linears_at_rest_mib"] / 2**20 if r["linears_at_rest_mib"] else dense_linears / 2**20
        print(f"{r['mode']:10} {r['kernels']:7} {r['resident_mib']:>11.1f} {lin:>11.1f} {r['kv_tokens']:>9} "
              f"{r['kv_tokens'] / base['kv_tokens']:>5.2f} {r['decode']:>10.1f} {r['decode'] / base['decode']:>5.2f} "
              f"{r['throughput']:>8.1f} {r['throughput'] / base['throughput']:>5.2f} "
              f"{(r['ppl'] / base['ppl'] - 1) * 100:>+7.2f}% {r['agree']:>4}/256 (first {r['prefix']})")


if __name__ == "__main__":
    main()
