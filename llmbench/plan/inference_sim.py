"""A tuning source: inference-sim's ground truth, vLLM (a 0.14-based fork with step tracing) serving on one
H100-80GB-HBM3 SXM, the latencies its simulator comparison is scored against. Source: the "actual" column of
`inference-sim/sim-to-real-accuracy-validation:results_trainval/error_records.csv` at 8fb2a1bf (experiment 66,
`qwen2-5-7b-instruct-tp1-reasoning-lite-1-1`: Qwen2.5-7B-Instruct, FP16, TP 1, --max-num-batched-tokens 1024),
with the workload of `inference-sim/inference-sim:training/trainval_data/README.md` at 9c7ea036: "reasoning-lite",
a 100-token system prompt (23 of them, one user each, so the server's prefix cache holds it after each user's
first turn) and a 934-token question, 1,448 output tokens, 1 request/s.

Put in the tuning half when it was added (after the vLLM 0.14 rows of V had shown the planner's Hopper decode too
slow, and with it the reason to look for a modern vLLM source on Hopper that is not V). Phrased is only the run
whose outputs ran to their cap (end-to-end over per-token time: 1,432 of 1,448 tokens); the same page's
Llama-2-7B run ended its outputs at EOS (a mean it does not give) and Llama-4-Scout mixes FP8 experts with BF16
attention under expert parallelism, neither of which the planner can state.
"""

from __future__ import annotations

from llmbench.plan.case import Case

SOURCE = "inference-sim/sim-to-real-accuracy-validation:results_trainval/error_records.csv"
SYSTEM, QUESTION, OUTPUT = 100, 934, 1448
# TTFT mean / P90 / P99, E2E mean / P90 / P99 (ms)
FIGURES = {"mean_ttft_ms": 30.77, "p90_ttft_ms": 40.53, "p99_ttft_ms": 63.96, "mean_e2el_ms": 10662.2,
           "p90_e2el_ms": 11143.8, "p99_e2el_ms": 12190.2}

CASES = [Case("I", "I: Qwen2.5-7B-Instruct, 1xH100, vLLM 0.14 (inference-sim fork), 1034/1448, 1 req/s",
              "qwen2.5-7b", "H100-SXM", 1, "vllm@0.14", "rate", 1.0, FIGURES, isl=SYSTEM + QUESTION, osl=OUTPUT,
              requests=600, knobs={"max_num_batched_tokens": 1024}, source=SOURCE,
              prefix_hit_rate=SYSTEM / (SYSTEM + QUESTION))]
