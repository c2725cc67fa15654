"""Held-out published bursts: `vllm bench serve` with every request sent at once (its default rate, inf) against
Qwen3-235B-A22B-Instruct-2507 on H100s, the MoE rows no other source gives latencies for (GPUStack's performance
lab: `gpustack/gpustack:docs/performance-lab/qwen3-235b-a22b/h100.md` at 10e9444a; vLLM 0.11.0, SGLang 0.5.5).
Chosen as held out before the planner was run on them, by one rule: every result block of that page whose server
flags the planner models (TP, FP8 checkpoints, --max-num-batched-tokens), on ShareGPT or on a random dataset whose
outputs ran to their set length. Left out by that rule: the expert-parallel runs (the planner has no EP), the
crashed FlashInfer/XFormers runs, and the random 4K and 32K runs (their outputs ended early: 184 and 82 tokens of
200 and 100 on average). ShareGPT is rescaled to each run's own token totals.
"""

from __future__ import annotations

from llmbench.plan.case import Case

SOURCE = "gpustack/gpustack:docs/performance-lab/qwen3-235b-a22b/h100.md"
METRICS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "p99_tpot_ms", "p99_itl_ms")
# server: engine profile, TP, weight dtype, flags (the first is the page's baseline, the last its optimized command)
SERVERS = {"vLLM 0.11 BF16 TP8": ("vllm@0.11", 8, "bf16", {}), "SGLang 0.5.5 BF16 TP8": ("sglang", 8, "bf16", {}),
           "vLLM 0.11 FP8 TP4": ("vllm@0.11", 4, "fp8", {}),
           "vLLM 0.11 FP8 TP4, --max-num-batched-tokens 16384": ("vllm@0.11", 4, "fp8",
                                                                   {"max_num_batched_tokens": 16384})}
# server, (requests, prompt tokens, output tokens), then METRICS' figures (tok/s, ms)
SHAREGPT = [
    ("vLLM 0.11 BF16 TP8", (984, 212894, 193865),
     (4015.36, 8730.69, 8707.89, 12940.37, 147.56, 114.67, 342.35, 677.61)),
    ("SGLang 0.5.5 BF16 TP8", (984, 214137, 193829),
     (3644.72, 11715.28, 6274.12, 32860.14, 178.35, 102.70, 841.80, 732.90)),
    ("vLLM 0.11 FP8 TP4", (984, 212992, 194446),
     (3592.57, 9924.69, 9896.14, 15574.61, 169.20, 121.96, 372.71, 351.02)),
    ("vLLM 0.11 FP8 TP4, --max-num-batched-tokens 16384", (984, 214381, 194148),
     (3700.75, 9600.73, 9525.78, 13887.13, 186.26, 108.31, 634.48, 632.37)),
]
# server, (requests, input, output length), figures
RANDOM = [
    ("vLLM 0.11 BF16 TP8", (500, 2000, 100), (1127.26, 21313.79, 20242.32, 40939.00, 101.08, 108.64, 125.24, 244.64)),
    ("vLLM 0.11 BF16 TP8", (984, 128, 4), (445.53, 7042.17, 6882.45, 8721.24, 212.98, 238.84, 242.28, 250.35)),
    ("vLLM 0.11 FP8 TP4, --max-num-batched-tokens 16384", (500, 2000, 100),
     (894.84, 26860.95, 26155.54, 51773.01, 125.93, 140.65, 152.49, 632.84)),
    ("vLLM 0.11 FP8 TP4, --max-num-batched-tokens 16384", (984, 128, 4),
     (644.28, 5621.51, 5525.90, 5803.57, 125.18, 152.34, 182.84, 243.41)),
]


def _case(server: str, workload: str, figures: tuple, **shape) -> Case:
    engine, tp, dtype, knobs = SERVERS[server]
    return Case("G", f"G: Qwen3-235B-A22B {server}, {tp}xH100, {workload}, all at once", "qwen3-235b-a22b",
                "H100-SXM", tp, engine, "max", 0, dict(zip(METRICS, figures, strict=True)), dtype, "bf16",
                knobs=knobs, source=SOURCE, **shape)


CASES = ([_case(server, "ShareGPT", figures, requests=n, sharegpt_means=(prompt / n, output / n))
          for server, (n, prompt, output), figures in SHAREGPT]
         + [_case(server, f"random {isl}/{osl}", figures, requests=n, isl=isl, osl=osl)
            for server, (n, isl, osl), figures in RANDOM])
