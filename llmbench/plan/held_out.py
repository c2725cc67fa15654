"""Held-out published rows: the rest of the source of planning.md §9 row B (TensorRT-LLM's performance
overview, `NVIDIA/TensorRT-LLM:docs/source/performance/perf-overview.md` at 00f37686), read only after the
planner's priors had been chosen on §9 and never tuned on. Same method as row B: `trtllm-bench throughput`
(PyTorch backend, every request at once, FP8 weights and KV, fixed ISL/OSL, the request counts the page
lists), total output tokens/s. With MLPerf v5.1 (mlperf.py) they are the held-out half the bands of bands.py
come from.
"""

from __future__ import annotations

from llmbench.plan import trtllm_bench
from llmbench.plan.case import Case

LENGTHS = list(trtllm_bench.REQUESTS)
# model, [(GPU, TP)], then per ISL/OSL in LENGTHS' order one output tok/s per setup (None: not published)
TABLES = [
    ("llama-3.1-8b", [("H200", 1), ("H100-SXM", 1)],
     [(None, None), (26221, 22714), (18027, 14325), (20770, 17660), (None, None), (16828, 13899), (None, None),
      (12194, 9305), (None, None), (None, None)]),  # the None pairs are §9 row B itself
    ("llama-3.3-70b", [("H200", 1), ("H100-SXM", 2)],
     [(3803, 6378), (4336, 6651), (2872, 4199), (3666, 5222), (2909, 4205), (2994, 4146), (442, 762), (2003, 3082),
      (566, 898), (283, 437)]),
    ("llama-3.1-405b", [("H200", 8), ("H100-SXM", 8)],
     [(3814, 3627), (5348, 4340), (4741, 3116), (4724, 3994), (3330, 2919), (3722, 2895), (456, 453), (2948, 2296),
      (650, 610), (505, 345)]),
    # published with expert parallelism and attention DP; the planner has neither and simulates TP 8
    ("qwen3-235b-a22b", [("H200", 8), ("H100-SXM", 8)],
     [(30429, None), (42821, 19658), (26852, 12447), (28026, 18351), (23789, 14898), (22061, 15136), (3331, None),
      (16672, 9924), (3623, 3225), (1876, None)]),
]


def _what(model: str, gpu: str, tp: int, isl: int, osl: int) -> str:
    gpus = f"1x{gpu}" if tp == 1 else f"{tp}x{gpu} TP{tp}"
    return f"H: {model} FP8, {gpus}, TensorRT-LLM, {isl}/{osl}, max throughput"


CASES = [Case("H", _what(model, gpu, tp, isl, osl), model, gpu, tp, "trtllm", "max", 0, {"output_throughput": tok},
              "fp8", "fp8", isl, osl, trtllm_bench.REQUESTS[isl, osl], streamed=False,
              knobs=trtllm_bench.knobs(model, gpu, tp, isl, osl))
         for model, setups, figures in TABLES for (isl, osl), row in zip(LENGTHS, figures, strict=True)
         for (gpu, tp), tok in zip(setups, row, strict=True) if tok is not None]
