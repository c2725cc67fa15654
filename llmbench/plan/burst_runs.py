"""Held-out published bursts: `vllm bench serve` with every request sent at once (its default rate, inf) against
Qwen3-235B-A22B-Instruct-2507 on H100s, the MoE rows no other source gives latencies for (GPUStack's performance
lab: `gpustack/gpustack:docs/performance-lab/qwen3-235b-a22b/h100.md` at 10e9444a; vLLM 0.11.0, SGLang 0.5.5).
Chosen as held out before the planner was run on them, by one rule: every result block of that page whose server
flags the planner models (TP, FP8 checkpoints, --max-num-batched-tokens), on ShareGPT or on a random dataset whose
outputs ran to their set length. Left out by that rule: the expert-parallel runs (the planner has no EP), the
crashed FlashInfer/XFormers runs, and the random 4K and 32K runs (their outputs ended early: 184 and 82 tokens of
200 and 100 on average). ShareGPT is rescaled to each run's own token totals.

The same lab's dense Qwen3-14B page on one H100 (`docs/performance-lab/qwen3-14b/h100.md` at 7ae332aa; vLLM 0.11.0,
SGLang 0.5.5.post1, TensorRT-LLM 1.2.0rc1) was added by the same rule after vLLM V1's fixed costs were chosen, and
read once: its ShareGPT runs of each engine and SGLang's FP8 checkpoint, and the random runs whose outputs reached
99 % of their set length or more (vLLM's 32K run reached 98.55 %; the attention-backend variants set a flag the
planner does not model).
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


DENSE_SOURCE = "gpustack/gpustack:docs/performance-lab/qwen3-14b/h100.md"
DENSE_SERVERS = {"vLLM 0.11 BF16": ("vllm@0.11", 1, "bf16", {}), "SGLang 0.5.5 BF16": ("sglang", 1, "bf16", {}),
                 "TensorRT-LLM 1.2 BF16": ("trtllm", 1, "bf16", {}), "SGLang 0.5.5 FP8": ("sglang", 1, "fp8", {})}
DENSE_SHAREGPT = [
    ("vLLM 0.11 BF16", (1000, 217393, 201648), (3173.92, 22141.21, 21872.31, 31156.86, 226.03, 117.46, 621.87, 627.72)),
    ("SGLang 0.5.5 BF16", (1000, 217393, 201628),
     (4043.89, 9230.85, 8812.15, 19581.07, 235.33, 118.67, 1462.03, 442.65)),
    ("TensorRT-LLM 1.2 BF16", (1000, 217393, 201612),
     (4000.99, 10230.91, 9088.74, 24363.57, 161.58, 107.16, 579.49, 1440.77)),
    ("SGLang 0.5.5 FP8", (1000, 217393, 201833), (5019.64, 7320.60, 7110.49, 13187.08, 251.67, 94.53, 1678.80, 383.61)),
]
DENSE_RANDOM = [
    ("vLLM 0.11 BF16", (500, 4000, 200), (438.56, 112716.92, 110734.54, 219749.74, 132.45, 139.68, 161.93, 656.79)),
    ("vLLM 0.11 BF16", (500, 2000, 100), (505.51, 50716.13, 49138.28, 94614.51, 206.51, 231.62, 236.67, 642.06)),
    ("vLLM 0.11 BF16", (1000, 128, 4), (176.06, 18282.75, 18061.13, 22564.77, 525.31, 597.29, 610.81, 633.07)),
    ("SGLang 0.5.5 FP8", (100, 32000, 100),
     (31.09, 158068.68, 157591.30, 313702.45, 215.93, 212.59, 326.36, 5675.37)),
    ("SGLang 0.5.5 FP8", (500, 4000, 200), (583.23, 82073.47, 85092.81, 165401.79, 84.93, 83.43, 131.23, 89.35)),
    ("SGLang 0.5.5 FP8", (500, 2000, 100), (704.28, 33245.08, 33169.68, 68799.73, 143.22, 146.25, 216.28, 1987.27)),
    ("SGLang 0.5.5 FP8", (1000, 128, 4), (512.83, 4489.43, 4057.99, 7239.77, 927.88, 962.87, 1793.61, 5043.60)),
]


# page -> model, its name, the page's servers, the FP8 checkpoint its FP8 servers load (Qwen's own: 128 x 128 blocks)
PAGES = {SOURCE: ("qwen3-235b-a22b", "Qwen3-235B-A22B", SERVERS, "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"),
         DENSE_SOURCE: ("qwen3-14b", "Qwen3-14B", DENSE_SERVERS, "Qwen/Qwen3-14B-FP8")}


def _case(page: str, server: str, workload: str, figures: tuple, **shape) -> Case:
    model, name, servers, fp8_checkpoint = PAGES[page]
    engine, tp, dtype, knobs = servers[server]
    return Case("G", f"G: {name} {server}, {tp}xH100, {workload}, all at once", model, "H100-SXM", tp, engine, "max",
                0, dict(zip(METRICS, figures, strict=True)), dtype, "bf16", knobs=knobs, source=page,
                checkpoint=fp8_checkpoint if dtype == "fp8" else "", **shape)


SHAREGPT_RUNS = ((SOURCE, SHAREGPT), (DENSE_SOURCE, DENSE_SHAREGPT))
RANDOM_RUNS = ((SOURCE, RANDOM), (DENSE_SOURCE, DENSE_RANDOM))
CASES = [_case(page, server, "ShareGPT", figures, requests=n, sharegpt_means=(prompt / n, output / n))
         for page, table in SHAREGPT_RUNS for server, (n, prompt, output), figures in table]
CASES += [_case(page, server, f"random {isl}/{osl}", figures, requests=n, isl=isl, osl=osl)
          for page, table in RANDOM_RUNS for server, (n, isl, osl), figures in table]
