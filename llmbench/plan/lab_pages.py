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
GiB of weights a GPU, more than an H100 has, so the page's setup is not what ran. The throughput pages send every request at once (`vllm bench serve`, rate
inf); the latency page and each page's "concurrency 4" block are closed loops. A100 is the 80 GB card (the
Qwen3-14B page omits the size; the lab's other A100 pages state it). ShareGPT runs are rescaled to their own
token totals.
"""

from __future__ import annotations

import re

from llmbench.plan import models
from llmbench.plan.burst_runs import METRICS
from llmbench.plan.case import Case

COMMIT = "47277d79"
# page -> GPU, the vLLM version the page lists
PAGES = {"deepseek-r1/h200": ("H200", "0.11"), "glm-4.5-air/a100": ("A100-80GB", "0.11"),
         "glm-4.5-air/h100": ("H100-SXM", "0.11"), "gpt-oss-120b/a100": ("A100-80GB", "0.11"),
         "gpt-oss-120b/h100": ("H100-SXM", "0.10"), "gpt-oss-20b/a100": ("A100-80GB", "0.11"),
         "gpt-oss-20b/h100": ("H100-SXM", "0.11"), "qwen3-14b/a100": ("A100-80GB", "0.11"),
         "qwen3-235b-a22b/a100": ("A100-80GB", "0.11"), "qwen3-32b/a100": ("A100-80GB", "0.11"),
         "qwen3-32b/h100": ("H100-SXM", "0.11"), "qwen3-8b/h100-latency": ("H100-SXM", "0.11")}
# page, serving command as run (sglang = python3 -m sglang.launch_server), then its runs: workload, (requests,
# input and output tokens in all, or random's set lengths), METRICS' figures
RUNS = [
    ("deepseek-r1/h200", "vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8", [
        ("sharegpt", (1000, 219171, 200752), (2621.05, 17743.1, 17698.4, 24371.9, 227.45, 177.9, 568.18, 384.38)),
        ("random", (100, 32000, 100), (48.33, 101352, 101164, 200268, 365.79, 400.72, 404.78, 614.75)),
        ("random", (500, 4000, 200), (753.67, 63058.7, 61952.7, 124113, 164.23, 177.37, 195.8, 383.79)),
        ("random", (500, 2000, 100), (843.71, 28911.9, 27559.2, 53497.1, 237.02, 276.56, 322.76, 379.46)),
        ("random", (1000, 128, 4), (181.27, 19392.1, 18992.4, 21440.6, 351.83, 389.74, 432.12, 470.22)),
        ("concurrency 4", (100, 22836, 21338), (196.81, 123.3, 117.53, 258.12, 19.36, 19.13, 22.67, 48.61)),
    ]),
    ("deepseek-r1/h200", "sglang --model-path deepseek-ai/DeepSeek-R1-0528 --tp-size 8", [
        ("sharegpt", (1000, 219171, 200767), (3172.46, 6948.08, 6793.8, 13674, 420.18, 216.55, 2473.09, 1159.64)),
    ]),
    ("glm-4.5-air/a100", "vllm serve zai-org/GLM-4.5-Air -tp 4", [
        ("sharegpt", (1000, 214465, 199904), (1883.14, 38971.2, 37502.2, 76635.2, 104.59, 101.18, 210.38, 178.94)),
    ]),
    ("glm-4.5-air/a100", "sglang --model-path zai-org/GLM-4.5-Air --tp-size 4", [
        ("sharegpt", (1000, 214465, 199873), (2971.88, 14772.5, 14625.9, 22760.6, 328.21, 129.31, 2061.59, 411.08)),
    ]),
    ("glm-4.5-air/h100", "vllm serve zai-org/GLM-4.5-Air -tp 4", [
        ("sharegpt", (1000, 214465, 199895), (3815.71, 16383.9, 16164.3, 19975.2, 134.47, 105.53, 276.78, 265.69)),
    ]),
    ("glm-4.5-air/h100", "sglang --model-path zai-org/GLM-4.5-Air --tp-size 4", [
        ("sharegpt", (1000, 214465, 199904), (4532.66, 4371.21, 4175.32, 8363.43, 222.86, 132.57, 1165.96, 525.39)),
    ]),
    ("glm-4.5-air/h100", "sglang --model zai-org/GLM-4.5-Air-FP8 --tp-size 4", [
        ("sharegpt", (1000, 214465, 199904), (5787.27, 4436.82, 4318.99, 6248.3, 179.03, 104.28, 806.18, 438.37)),
    ]),
    ("gpt-oss-120b/a100", "vllm serve openai/gpt-oss-120b --max-model-len 32768", [
        ("sharegpt", (1000, 215312, 196656), (2276.4, 25918.8, 24822.4, 59731.6, 97.57, 90.7, 206.31, 210.76)),
        ("random", (100, 32000, 100), (13.5, 368857, 368713, 730947, 224.58, 228.19, 231.28, 676.79)),
        ("random", (1000, 128, 4), (283.95, 7813.18, 7750.58, 13936, 182.75, 189.53, 193.12, 386.54)),
        ("concurrency 4", (100, 22946, 21691), (326.09, 61.91, 61.55, 112.05, 11.67, 11.44, 15.03, 38.75)),
    ]),
    ("gpt-oss-120b/a100", "sglang --model-path openai/gpt-oss-120b", [
        ("sharegpt", (1000, 215312, 197133), (329.69, 275031, 270127, 550930, 765.78, 486.18, 6656.59, 6667.8)),
    ]),
    ("gpt-oss-120b/h100", "vllm serve openai/gpt-oss-120b --max-model-len 32768", [
        ("sharegpt", (1000, 215312, 195544), (2901.05, 24830.5, 25973.4, 54033.4, 54.1, 47.57, 193.25, 121.49)),
        ("random", (1000, 128, 4), (517.91, 4850.46, 4987.41, 7372.98, 304.8, 341.94, 360.4, 728.75)),
        ("concurrency 4", (100, 22946, 21691), (453.04, 49, 47.49, 107.46, 8.31, 8.24, 10.12, 23.32)),
    ]),
    ("gpt-oss-120b/h100", "sglang --model-path openai/gpt-oss-120b", [
        ("sharegpt", (1000, 215312, 196540), (865.81, 132613, 139832, 216876, 57.34, 39.11, 345.3, 1328.36)),
    ]),
    ("gpt-oss-120b/h100", "trtllm-serve openai/gpt-oss-120b --max_seq_len 32768", [
        ("sharegpt", (1000, 215312, 193874), (1013.72, 55896.6, 49891.1, 138441, 233.2, 213.25, 790.11, 389.65)),
    ]),
    ("gpt-oss-20b/a100", "vllm serve openai/gpt-oss-20b", [
        ("sharegpt", (1000, 215312, 194171), (4620.12, 13654.6, 13063.9, 30306.7, 48.57, 45.15, 110.58, 112.27)),
        ("random", (1000, 128, 4), (735.4, 2774.46, 1971.28, 5298.6, 62.1, 65.44, 106.62, 213.73)),
    ]),
    ("gpt-oss-20b/a100", "sglang --model-path openai/gpt-oss-20b", [
        ("sharegpt", (1000, 215312, 195617), (265.99, 140889, 137991, 274130, 6243.98, 2508.45, 46225.2, 4248.44)),
    ]),
    ("gpt-oss-20b/h100", "vllm serve openai/gpt-oss-20b", [
        ("sharegpt", (1000, 215312, 193979), (7817.03, 4881.62, 4791.97, 8166.01, 91, 55.52, 237.48, 248.25)),
        ("random", (1000, 128, 4), (851.04, 3174.14, 2892.24, 4415.25, 178.91, 208.03, 246.08, 509.42)),
    ]),
    ("gpt-oss-20b/h100", "sglang --model-path openai/gpt-oss-20b", [
        ("sharegpt", (1000, 215312, 195734), (2679.49, 10412.8, 10326.7, 11920.9, 314.53, 215.95, 1052.78, 1929.13)),
    ]),
    ("gpt-oss-20b/h100", "trtllm-serve openai/gpt-oss-20b", [
        ("sharegpt", (1000, 215312, 191726), (3615.45, 12248.9, 12024.2, 22142.7, 224.49, 134.32, 552.52, 963.17)),
    ]),
    ("qwen3-14b/a100", "vllm serve Qwen/Qwen3-14B", [
        ("sharegpt", (1000, 217393, 201605), (1887.31, 41875.1, 39151.2, 83576.8, 114.34, 106.15, 262.52, 271.69)),
        ("random", (500, 4000, 200), (245.13, 197625, 196622, 396056, 254.61, 272.93, 283.5, 377.42)),
        ("random", (500, 2000, 100), (284.64, 86908.3, 86575.1, 170608, 301.73, 334.17, 334.55, 338.95)),
        ("random", (1000, 128, 4), (149.33, 19451.5, 19150.5, 26523.6, 233.35, 238.61, 251.05, 253.18)),
    ]),
    ("qwen3-14b/a100", "sglang --model-path Qwen/Qwen3-14B", [
        ("sharegpt", (1000, 217393, 201706), (2542.06, 20365.3, 19226.4, 37314.8, 364.93, 185.18, 2181.56, 566.5)),
    ]),
    ("qwen3-14b/a100", "trtllm-serve Qwen/Qwen3-14B", [
        ("sharegpt", (1000, 217393, 201471), (2770.99, 15258.3, 14210.3, 37520.6, 261.77, 166.55, 915.21, 931.59)),
    ]),
    ("qwen3-14b/a100", "vllm serve Qwen/Qwen3-14B-FP8", [
        ("sharegpt", (1000, 217393, 201655), (1604.75, 52287.5, 48838.1, 104987, 146.36, 132.69, 372.46, 380.19)),
    ]),
    ("qwen3-14b/a100", "vllm serve Qwen/Qwen3-14B-AWQ", [
        ("sharegpt", (1000, 217393, 201461), (1801.74, 47136.9, 44343.6, 94568.8, 129.77, 120.87, 331.28, 338.24)),
    ]),
    ("qwen3-14b/a100", "trtllm-serve Qwen/Qwen3-14B --max_num_tokens=16384", [
        ("sharegpt", (1000, 217393, 201631), (2779.6, 15375, 13585.7, 38913.7, 268.46, 159.86, 1618.81, 1712.52)),
    ]),
    ("qwen3-14b/a100", "trtllm-serve Qwen/Qwen3-14B --max_num_tokens=32768", [
        ("sharegpt", (1000, 217393, 201567), (2716.13, 16776.1, 15050, 43000.9, 234.79, 150.33, 1486.15, 525.09)),
    ]),
    ("qwen3-14b/a100", "trtllm-serve Qwen/Qwen3-14B --max_seq_len=40960 --enable_chunked_prefill", [
        ("random", (100, 32000, 100), (13.66, 361107, 361544, 716851, 493.18, 500.49, 590.17, 2215.91)),
        ("random", (500, 4000, 200), (305.25, 155665, 152610, 316584, 196.1, 207.95, 218.23, 1038.71)),
        ("random", (500, 2000, 100), (356.52, 67624.3, 65786.3, 134520, 313.69, 351.99, 365.92, 1002.01)),
        ("random", (1000, 128, 4), (266.13, 8166.48, 7882.94, 14856.3, 715.19, 853.12, 1028.67, 1280.94)),
    ]),
    ("qwen3-235b-a22b/a100", "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 -tp 8", [
        ("sharegpt", (1000, 217393, 196004), (1798.14, 38065.9, 37597.6, 77082.6, 123.36, 103.68, 448.36, 185.41)),
        ("random", (500, 2000, 100), (442.54, 54722.5, 54532.6, 106756, 190.79, 208.61, 209.09, 211.58)),
        ("random", (1000, 128, 4), (226.26, 12767.6, 12409.7, 17339.4, 155.16, 158.22, 168.04, 179.04)),
    ]),
    ("qwen3-235b-a22b/a100", "sglang --model-path Qwen/Qwen3-235B-A22B-Instruct-2507 --tp-size 8", [
        ("sharegpt", (1000, 217393, 196763), (2202.21, 21130.7, 15483.9, 51960.8, 235.1, 163.74, 1171.03, 500.15)),
    ]),
    ("qwen3-235b-a22b/a100", "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 4", [
        ("sharegpt", (1000, 217393, 195140), (1428.16, 45879.3, 43216.8, 99903.3, 150.72, 143.39, 297.17, 311.46)),
        ("random", (1000, 128, 4), (150.7, 17260.2, 17240.7, 26154.3, 265.87, 272.95, 278.77, 288.23)),
    ]),
    ("qwen3-235b-a22b/a100", "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 4 --max-num-batched-tokens 4096", [
        ("sharegpt", (1000, 217393, 195953), (1434.07, 45389.8, 41651.7, 98975.4, 155.37, 142.48, 509.56, 395.26)),
    ]),
    ("qwen3-235b-a22b/a100", "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 4 --max-num-batched-tokens 8192", [
        ("sharegpt", (1000, 217393, 195781), (1422.97, 45405.1, 41603.3, 99900.3, 157.1, 143.37, 561.98, 306.32)),
    ]),
    ("qwen3-32b/a100", "vllm serve Qwen/Qwen3-32B --max-model-len 32768", [
        ("sharegpt", (1000, 217393, 201396), (832.43, 105558, 105991, 209864, 149.67, 123.31, 563.16, 572.34)),
    ]),
    ("qwen3-32b/a100", "sglang --model-path Qwen/Qwen3-32B", [
        ("sharegpt", (1000, 217393, 201439), (672.56, 139199, 141086, 271684, 75.11, 66.68, 149.79, 298.9)),
    ]),
    ("qwen3-32b/a100", "trtllm-serve Qwen/Qwen3-32B", [
        ("sharegpt", (1000, 217393, 201412), (987.91, 84105.8, 84356.2, 171830, 89.01, 79.85, 265.32, 318.76)),
    ]),
    ("qwen3-32b/a100", "vllm serve Qwen/Qwen3-32B-FP8", [
        ("sharegpt", (1000, 217393, 201218), (751.46, 103257, 94937.8, 225681, 339.76, 310.91, 944.57, 954.38)),
    ]),
    ("qwen3-32b/a100", "vllm serve Qwen/Qwen3-32B-AWQ", [
        ("sharegpt", (1000, 217393, 201832), (850.81, 92528.3, 85550.2, 202791, 302.45, 277.31, 812.48, 817.18)),
    ]),
    ("qwen3-32b/a100", "vllm serve Qwen/Qwen3-32B", [
        ("random", (500, 4000, 200), (87.48, 566580, 564706, 1.11695e+06, 96.19, 96.4, 99.35, 628.61)),
        ("random", (500, 2000, 100), (120.27, 208397, 209109, 408104, 143.23, 143.96, 166.03, 590.04)),
        ("random", (1000, 128, 4), (80.69, 31177.6, 31073.8, 48960.6, 528.57, 544.55, 547.31, 554.84)),
    ]),
    ("qwen3-32b/a100", "trtllm-serve Qwen/Qwen3-32B --max_seq_len=40960 --enable_chunked_prefill", [
        ("random", (500, 4000, 200), (97.01, 509693, 505676, 1.01472e+06, 100.09, 98.07, 115.57, 2379.87)),
        ("random", (500, 2000, 100), (129.55, 189776, 189322, 378731, 145.49, 144.79, 178.5, 2256.49)),
        ("random", (1000, 128, 4), (107.38, 19761.8, 19497.3, 36592.7, 1885.18, 2140.52, 2149.03, 2170.23)),
    ]),
    ("qwen3-32b/h100", "vllm serve Qwen/Qwen3-32B", [
        ("sharegpt", (1000, 217393, 201422), (1131.55, 78118.7, 77291.5, 153162, 88.09, 70.72, 378.18, 277.93)),
        ("random", (500, 4000, 200), (102.21, 482284, 483375, 956141, 66.61, 62.08, 100.86, 1395.23)),
        ("random", (500, 2000, 100), (152.42, 163909, 164148, 322981, 86.62, 84.24, 131.41, 1462.05)),
        ("random", (1000, 128, 4), (121.66, 21648.7, 21342.4, 32678.3, 1169.72, 1292.78, 1417.05, 1435.8)),
    ]),
    ("qwen3-32b/h100", "sglang --model-path Qwen/Qwen3-32B", [
        ("sharegpt", (1000, 217393, 201826), (814.03, 115690, 117738, 230503, 57.86, 54.19, 95.84, 207.79)),
    ]),
    ("qwen3-32b/h100", "trtllm-serve Qwen/Qwen3-32B", [
        ("sharegpt", (1000, 217393, 201723), (1280.04, 65281.5, 65325.8, 133106, 61.9, 59.59, 121.97, 214.01)),
    ]),
    ("qwen3-32b/h100", "sglang --model-path Qwen/Qwen3-32B-FP8", [
        ("sharegpt", (1000, 217393, 201376), (1926.06, 35510.6, 31577.3, 79653.8, 205.13, 119.96, 1141.98, 1195.28)),
    ]),
    ("qwen3-32b/h100", "trtllm-serve Qwen/Qwen3-32B-FP8 --max_seq_len=40960 --enable_chunked_prefill", [
        ("sharegpt", (1000, 217393, 201376), (2060.4, 31208.8, 25003.7, 72828, 158.64, 115.67, 993.03, 569.95)),
        ("random", (500, 4000, 200), (234.7, 208082, 204136, 415001, 138.75, 141.52, 151.74, 1254.2)),
        ("random", (500, 2000, 100), (281.53, 86596.6, 86629.7, 171843, 223.4, 237.63, 249.66, 1216.32)),
        ("random", (1000, 128, 4), (207.33, 10718.8, 10511.6, 19055.5, 890.11, 949.23, 1351.38, 1854.09)),
    ]),
    ("qwen3-8b/h100-latency", "vllm serve Qwen/Qwen3-8B", [
        ("concurrency 4", (100, 23260, 22061), (496.88, 64, 60.26, 98.59, 7.38, 7.4, 7.96, 40.98)),
        ("concurrency 1", (100, 23260, 22061), (132.86, 59.01, 60.38, 73.49, 7.28, 7.22, 7.52, 8.17)),
        ("concurrency 2", (100, 23260, 22061), (257.19, 63.78, 64.78, 93.7, 7.37, 7.3, 8.57, 8.75)),
        ("concurrency 8", (100, 23260, 22061), (917.28, 74.57, 60.77, 204.11, 7.71, 7.67, 8.19, 45.48)),
    ]),
    ("qwen3-8b/h100-latency", "sglang --model-path Qwen/Qwen3-8B", [
        ("concurrency 4", (100, 23260, 22061), (525.59, 27.7, 27.25, 43.35, 7.19, 7.14, 7.9, 11.48)),
    ]),
    ("qwen3-8b/h100-latency", "trtllm-serve Qwen/Qwen3-8B", [
        ("concurrency 4", (100, 23260, 22061), (487.38, 51.61, 45.46, 134.71, 7.67, 7.58, 10.15, 24.38)),
    ]),
    ("qwen3-8b/h100-latency", "sglang --model-path Qwen/Qwen3-8B-FP8", [
        ("concurrency 4", (100, 23260, 22061), (657.83, 39.66, 33.38, 134.98, 5.65, 5.58, 7.35, 22.2)),
    ]),
]
_TP = ("-tp", "--tp-size", "--tp", "--tp_size")
_TOKENS = ("--max-num-batched-tokens", "--max_num_tokens")


def server(command: str, vllm: str) -> tuple[str, str, int, dict]:
    """Engine profile, checkpoint, TP and engine flags of a serving command the rule kept."""
    words = command.replace("=", " ").split()
    engine = {"vllm": f"vllm@{vllm}", "sglang": "sglang", "trtllm-serve": "trtllm"}[words[0]]
    checkpoint = words[2] if engine.startswith("vllm") else words[1]
    tp, knobs = 1, {}
    for flag, value in zip(words, words[1:] + [""], strict=True):
        if flag in ("--model", "--model-path"):
            checkpoint = value
        elif flag in _TP:
            tp = int(value)
        elif flag in _TOKENS:
            knobs["max_num_batched_tokens"] = int(value)
        elif flag == "--enable_chunked_prefill":
            knobs["chunked_prefill"] = True
    return engine, checkpoint, tp, knobs


def _case(page: str, command: str, workload: str, shape: tuple, figures: tuple) -> Case:
    gpu, vllm = PAGES[page]
    engine, checkpoint, tp, knobs = server(command, vllm)
    spec = models.model(checkpoint)
    n, a, b = shape
    closed = re.fullmatch(r"concurrency (\d+)", workload)
    lengths = {"isl": a, "osl": b} if workload == "random" else {"sharegpt_means": (a / n, b / n)}
    load = f"concurrency {closed.group(1)}" if closed else "all at once"
    data = f"random {a}/{b}" if workload == "random" else "ShareGPT"
    what = f"L: {checkpoint.split('/')[-1]} {command.split()[0]}, {tp}x{gpu}, {data}, {load} ({page})"
    return Case("L", what, spec.name, gpu, tp, engine, "concurrency" if closed else "max",
                int(closed.group(1)) if closed else 0, dict(zip(METRICS, figures, strict=True)),
                spec.checkpoint_dtype, "bf16", requests=n, knobs=knobs,
                source=f"gpustack/gpustack:docs/performance-lab/{page}.md", **lengths)


CASES = [_case(page, command, workload, shape, figures) for page, command, runs in RUNS
         for workload, shape, figures in runs]
