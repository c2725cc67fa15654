"""Held-out published runs, a second read of GPUStack's performance lab (source L): the lab's other pages
(`gpustack/gpustack:docs/performance-lab/<page>.md` at 47277d79), read after every prior, term and band had been
chosen, by a rule written before the planner was run on any of them (benchmarks/README.md):

every page whose model and GPU the catalog has, other than the two G holds (burst_runs.py); every result block
whose serving command uses only flags the planner models (TP, --max-model-len / --max_seq_len,
--max-num-batched-tokens / --max_num_tokens, --enable_chunked_prefill, checkpoints by name); left out: expert,
data-attention and pipeline parallelism, --async-scheduling, attention-backend and CUDA-graph flags,
torch.compile, speculative decoding, a command naming another model than its page, random runs whose outputs
ended before 99 % of their set length, and the GLM-4.5-Air pages' random runs (the A100 and H100 pages print
the same figures to the last digit). One run kept by the rule was dropped when the planner refused it, for a
reason that needs no prediction: GLM-4.5-Air in BF16 at TP2 on H100s (the H100 page's SGLang "TP2") holds 99.5
GiB of weights a GPU, more than an H100 has, so the page's setup is not what ran. GLM-4.6's pages (`glm-4.x/`)
joined by the same rule once GLM-4.5's layout entered the catalog, before the planner was run on them.

The throughput pages send every request at once (`vllm bench serve`, rate inf); the latency page and each
page's "concurrency 4" block are closed loops. A100 is the 80 GB card (the Qwen3-14B page omits the size; the
lab's other A100 pages state it); the H100s and H200s are SXM cards, as each page's Hardware section states.
ShareGPT runs are rescaled to their own token totals. Each case keeps its command's --max-model-len (0: vLLM's
default, the model's context) as `served_len`: the run started, so vLLM's pool held one request that long (tail
term `published start`, published.py). The runs are in data/gpustack_lab.json, as the pages print them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from llmbench.plan import models
from llmbench.plan.burst_runs import METRICS
from llmbench.plan.case import Case

# page -> GPU, the vLLM version the page lists
PAGES = {"deepseek-r1/h200": ("H200", "0.11"), "glm-4.5-air/a100": ("A100-80GB", "0.11"),
         "glm-4.5-air/h100": ("H100-SXM", "0.11"), "gpt-oss-120b/a100": ("A100-80GB", "0.11"),
         "gpt-oss-120b/h100": ("H100-SXM", "0.10"), "gpt-oss-20b/a100": ("A100-80GB", "0.11"),
         "gpt-oss-20b/h100": ("H100-SXM", "0.11"), "qwen3-14b/a100": ("A100-80GB", "0.11"),
         "qwen3-235b-a22b/a100": ("A100-80GB", "0.11"), "qwen3-32b/a100": ("A100-80GB", "0.11"),
         "qwen3-32b/h100": ("H100-SXM", "0.11"), "qwen3-8b/h100-latency": ("H100-SXM", "0.11"),
         "glm-4.x/a100": ("A100-80GB", "0.11"), "glm-4.x/h100": ("H100-SXM", "0.11"),
         "glm-4.x/h200": ("H200", "0.11")}
# page -> its runs: serving command as run (sglang = python3 -m sglang.launch_server), then per run the workload,
# (requests, input and output tokens in all, or random's set lengths) and METRICS' figures (tok/s, ms)
RUNS = [(page["page"], page["command"], [(w, tuple(shape), tuple(figures)) for w, shape, figures in page["runs"]])
        for page in json.loads((Path(__file__).parent / "data" / "gpustack_lab.json").read_text())]
_TP = ("-tp", "--tp-size", "--tp", "--tp_size")
_TOKENS = ("--max-num-batched-tokens", "--max_num_tokens")


def server(command: str, vllm: str) -> tuple[str, str, int, dict, int]:
    """Engine profile, checkpoint, TP, engine flags and --max-model-len (0: the default) of a serving command the
    rule kept."""
    words = command.replace("=", " ").split()
    engine = {"vllm": f"vllm@{vllm}", "sglang": "sglang", "trtllm-serve": "trtllm"}[words[0]]
    checkpoint = words[2] if engine.startswith("vllm") else words[1]
    tp, knobs, max_len = 1, {}, 0
    for flag, value in zip(words, words[1:] + [""], strict=True):
        if flag in ("--model", "--model-path"):
            checkpoint = value
        elif flag in _TP:
            tp = int(value)
        elif flag in _TOKENS:
            knobs["max_num_batched_tokens"] = int(value)
        elif flag == "--enable_chunked_prefill":
            knobs["chunked_prefill"] = True
        elif flag in ("--max-model-len", "--max_seq_len"):
            max_len = int(value)
    return engine, checkpoint, tp, knobs, max_len


def _case(page: str, command: str, workload: str, shape: tuple, figures: tuple) -> Case:
    gpu, vllm = PAGES[page]
    engine, checkpoint, tp, knobs, max_len = server(command, vllm)
    spec = models.model(checkpoint)
    n, a, b = shape
    closed = re.fullmatch(r"concurrency (\d+)", workload)
    lengths = {"isl": a, "osl": b} if workload == "random" else {"sharegpt_means": (a / n, b / n)}
    load = f"concurrency {closed.group(1)}" if closed else "all at once"
    data = f"random {a}/{b}" if workload == "random" else "ShareGPT"
    budget = f", {knobs['max_num_batched_tokens']} tokens a step" if "max_num_batched_tokens" in knobs else ""
    what = f"L: {checkpoint.split('/')[-1]} {command.split()[0]}{budget}, {tp}x{gpu}, {data}, {load} ({page})"
    return Case("L", what, spec.name, gpu, tp, engine, "concurrency" if closed else "max",
                int(closed.group(1)) if closed else 0, dict(zip(METRICS, figures, strict=True)),
                spec.checkpoint_dtype, "bf16", requests=n, knobs=knobs,
                source=f"gpustack/gpustack:docs/performance-lab/{page}.md", checkpoint=checkpoint, served_len=max_len,
                **lengths)


CASES = [_case(page, command, workload, shape, figures) for page, command, runs in RUNS
         for workload, shape, figures in runs]
