"""Tail term `graph padding`: an engine that replays CUDA graphs runs a step of n tokens as the smallest captured
graph of at least n rows, so its GEMMs (and a tensor-parallel step's all-reduces) compute the padding rows too.
The capture lists are each engine's defaults, read from its source:

- vLLM V1 (0.8 on; `VllmConfig._set_cudagraph_sizes`, `CudagraphDispatcher`): 1, 2, 4, every 8 below 256, every
  16 from 256 up to min(2 x max_num_seqs, 512) (1,024 on data-centre Blackwell), capped at
  max_num_batched_tokens, which is added when it fits; any step up to the largest size is padded (full graphs
  for pure decodes, piecewise ones for steps with prompt tokens); larger steps run without a graph, unpadded.
  0.8-0.10.1 captured every 8 up to 512: at most 8 rows apart from this list.
- vLLM V0 (`_BATCH_SIZES_TO_CAPTURE`): 1, 2, 4 and every 8 up to 256, decode-only steps.
- SGLang (`get_batch_sizes_to_capture`): 1, 2, 4 and every 8 up to 160 (256 on ROCm), decode-only steps.
- The bundled engine (engine/cuda_graphs.py `SIZES`), decode-only steps.
- TensorRT-LLM and LMDeploy's TurboMind: none (dynamic shapes; the PyTorch backend's graph padding is off by
  default), except where the run turns it on: TensorRT-LLM's performance overview ran `trtllm-bench` with
  `cuda_graph_config: enable_padding: true` and the batch sizes 1, 2, 4, 8, ..., 256, 384, 512, 1,024 up to 8,192
  (those up to the run's max batch size), decode-only steps (kind `trtllm-bench`).

Only a device the catalog knows to replay graphs pads: a `--gpu-spec` device does not unless its file says
`"cuda_graphs": true` (a CPU runs no graphs, and there padding a compute-bound step would cost in full)."""

from __future__ import annotations

import bisect
from functools import lru_cache

BUNDLED_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
TRTLLM_BENCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)  # the overview's yaml


@lru_cache(maxsize=256)
def capture_sizes(kind: str, max_num_seqs: int, max_num_batched_tokens: int, family: str) -> tuple[int, ...]:
    """The batch sizes (tokens a step) an engine of `kind` captures by default on a GPU of `family`."""
    if kind == "vllm":
        top = min(2 * max_num_seqs, 1024 if family == "blackwell" else 512, max_num_batched_tokens)
        sizes = {s for s in (1, 2, 4) if s <= top} | set(range(8, min(top + 1, 256), 8)) | set(range(256, top + 1, 16))
        return tuple(sorted(sizes | {max_num_batched_tokens} if max_num_batched_tokens <= top else sizes))
    if kind == "vllm-v0":
        return tuple(s for s in (1, 2, 4, *range(8, 257, 8)) if s <= max_num_seqs)
    if kind == "sglang":
        top = min(256 if family == "cdna3" else 160, max_num_seqs)
        return tuple(s for s in (1, 2, 4, *range(8, 257, 8)) if s <= top)
    if kind == "llmbench":
        return tuple(s for s in BUNDLED_SIZES if s <= max_num_seqs)
    if kind == "trtllm-bench":
        return tuple(s for s in TRTLLM_BENCH_SIZES if s <= max_num_seqs)
    return ()


def decode_only(kind: str) -> bool:
    """Whether only steps without prompt tokens replay a graph (all but vLLM V1's)."""
    return kind != "vllm"


def padded(tokens: float, sizes: tuple[int, ...]) -> float:
    """The rows a step of `tokens` computes: the next captured size, or `tokens` past the largest."""
    if not sizes or tokens > sizes[-1] or tokens <= 0:
        return tokens
    return float(sizes[bisect.bisect_left(sizes, tokens)])
