"""A published result put to the planner: its setup as the source states it, and the figures it published."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    row: str
    what: str
    model: str
    gpu: str
    tp: int
    engine: str
    mode: str  # "rate", "concurrency", "max", "static", "memory"; MLPerf: "offline", "server", "interactive"
    value: float  # the rate, the concurrency or the batch
    published: dict  # metric -> published figure
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    isl: int = 0  # fixed lengths; 0 = ShareGPT
    osl: int = 0
    requests: int = 800
    knobs: dict = field(default_factory=dict)
    bench: str = ""  # an MLPerf benchmark (mlperf.py): its dataset's lengths, `replicas` simulated as one
    tokens_per_sample: float = 0.0
    replicas: int = 1
    source: str = ""  # the published file, where a row has one of its own
    sharegpt_means: tuple[float, float] | None = None  # ShareGPT rescaled to the source's prompt/output means
    prefix_hit_rate: float = 0.0  # share of each prompt the server's prefix cache holds, as the source ran it
    streamed: bool = True  # measured by an HTTP client streaming every token (False: MLPerf LoadGen, trtllm-bench)
    batcher: tuple[int, float] | None = None  # a harness's (batch size, seconds) between arrivals and replicas
    checkpoint: str = ""  # the checkpoint as the source names it, where its format matters (Qwen's -FP8: blocks)
    served_len: int | None = None  # the printed serving command's --max-model-len (0: vLLM's default, the model's
    # context); None: no command printed. A vLLM that ran had a pool to hold it (`published start`, published.py)
