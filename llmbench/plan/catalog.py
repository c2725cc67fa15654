"""GPU and model catalogs for planning GPUs that were not measured (figures and sources: planning.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

GB, GiB = 1e9, 2**30


@dataclass(frozen=True)
class GPU:
    name: str
    memory: float  # bytes
    bandwidth: float  # bytes/s, peak
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float | None
    link_bandwidth: float  # bytes/s per direction between GPUs
    price_per_hour: float | None  # USD per GPU-hour; a user input, these are documented reference points
    price_source: str
    source: str


GPUS: dict[str, GPU] = {g.name: g for g in [
    GPU("A10G", 24 * GB, 600 * GB, 70e12, None, 32 * GB, 1.01, "Mélange example config (A10G $1.01/h)",
        "cli99/llm-analysis gpu_configs/a10g-pcie-24gb.json"),
    GPU("L4", 24 * GiB, 300 * GB, 121e12, 242e12, 32 * GB, None, "none published in planning.md",
        "AIC systems/l4.yaml"),
    GPU("L40S", 46068 * 2**20, 864 * GB, 362e12, 733e12, 32 * GB, None, "none published in planning.md",
        "AIC systems/l40s.yaml"),
    GPU("A100-40GB", 40 * GB, 1555 * GB, 312e12, None, 300 * GB, 2.21, "CoreWeave 2024-02 A100 via Vidur constants",
        "cli99/llm-analysis a100-sxm-40gb.json"),
    GPU("A100-80GB", 80 * GiB, 2039 * GB, 312e12, None, 300 * GB, 3.67, "Mélange example config (A100-80GB $3.67/h)",
        "AIC systems/a100_sxm.yaml"),
    GPU("H100-SXM", 80 * GiB, 3350 * GB, 989e12, 1978e12, 450 * GB, 4.25, "CoreWeave 2024-02 H100 via Vidur constants",
        "AIC systems/h100_sxm.yaml"),
    GPU("H100-PCIe", 80 * GiB, 2000 * GB, 756.5e12, 1513e12, 64 * GB, None, "none published in planning.md",
        "AIC systems/h100_pcie.yaml"),
    GPU("H200", 141 * GB, 4800 * GB, 989e12, 1978e12, 450 * GB, 4.75, "midpoint of the 2026 range $2.50-7.00",
        "AIC systems/h200_sxm.yaml"),
    GPU("B200", 180 * GiB, 7700 * GB, 2250e12, 4500e12, 900 * GB, None, "none published in planning.md",
        "AIC systems/b200_sxm.yaml"),
    GPU("MI300X", 192 * GB, 5300 * GB, 1307.4e12, 2614.9e12, 896 * GB / 7, 1.78, "midpoint of $1.71-1.85/h listings",
        "alpharomercoma/MI300X-vs-H200 METHODOLOGY.md"),
]}

ALIASES = {"H100": "H100-SXM", "H100-80GB": "H100-SXM", "H100-SXM5": "H100-SXM", "A100": "A100-80GB",
           "A100-80G": "A100-80GB", "A100-SXM": "A100-80GB", "A100-40G": "A100-40GB", "H200-SXM": "H200",
           "H200-141GB": "H200", "A10": "A10G", "L40S-48GB": "L40S", "MI300": "MI300X"}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool = False
    qkv_bias: bool = False
    experts: int = 1  # MoE: routed experts per layer
    top_k: int = 1
    shared_experts: int = 0
    moe_ffn: int | None = None  # expert FFN size when it differs from `ffn`
    dense_layers: int = 0  # leading dense layers of an MoE model
    mla_kv_dim: int | None = None  # MLA: kv_lora_rank + qk_rope_head_dim elements per layer
    total_params: float | None = None  # published counts where the layout is not plain (MLA)
    active_params_published: float | None = None
    sliding_window: int | None = None
    max_positions: int = 4096

    @property
    def params(self) -> float:
        if self.total_params:
            return self.total_params
        return self._count(self.experts)

    @property
    def active_params(self) -> float:
        if self.active_params_published:
            return self.active_params_published
        return self._count(min(self.top_k, self.experts) if self.experts > 1 else 1)

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def _count(self, experts_counted: int) -> float:
        h, d = self.hidden, self.head_dim
        attn = h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h
        if self.qkv_bias:
            attn += self.heads * d + 2 * self.kv_heads * d
        moe_ffn = self.moe_ffn or self.ffn
        dense_mlp = 3 * h * self.ffn
        moe_mlp = (experts_counted + self.shared_experts) * 3 * h * moe_ffn + (h * self.experts if self.experts > 1
                                                                               else 0)
        moe_layers = self.layers - self.dense_layers if self.experts > 1 else 0
        per_dense = attn + dense_mlp + 2 * h
        per_moe = attn + moe_mlp + 2 * h
        return self.embedding_params + (self.layers - moe_layers) * per_dense + moe_layers * per_moe + h

    @property
    def routed_expert_params(self) -> float:
        """Parameters of the routed experts (0 for a dense model): the part a step reads only where routed."""
        if self.experts <= 1:
            return 0.0
        return (self.layers - self.dense_layers) * self.experts * 3 * self.hidden * (self.moe_ffn or self.ffn)

    def params_read(self, tokens: float) -> float:
        """Parameters a step of `tokens` tokens reads: everything but the routed experts, and of those the
        expected share hit by tokens·top_k routings, 1 - (1 - k/E)^tokens (nearly all of them by 8 tokens)."""
        if self.experts <= 1:
            return self.params
        hit = 1.0 - (1.0 - min(self.top_k, self.experts) / self.experts) ** max(tokens, 1.0)
        routed = min(self.routed_expert_params, self.params)
        return self.params - routed + routed * hit

    def kv_bytes_per_token(self, kv_bytes: float, tp: int = 1) -> float:
        """Per GPU: 2·L·max(n_kv/TP, 1)·d_h·b (GQA heads replicated when n_kv < TP); MLA: L·(rank+rope)·b."""
        if self.mla_kv_dim:
            return self.layers * self.mla_kv_dim * kv_bytes
        return 2 * self.layers * max(self.kv_heads / tp, 1) * self.head_dim * kv_bytes


MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, max_positions=4096),
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, max_positions=4096),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, max_positions=4096),
    ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_positions=8192),
    ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_positions=131072),
    ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=8192),
    ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=131072),
    ModelSpec("qwen2.5-0.5b", 24, 896, 14, 2, 64, 4864, 151936, tied=True, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-14b", 48, 5120, 40, 8, 128, 13824, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, sliding_window=4096, max_positions=32768),
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, experts=8, top_k=2, max_positions=32768),
    ModelSpec("deepseek-v3", 61, 7168, 128, 128, 128, 18432, 129280, experts=256, top_k=8, shared_experts=1,
              moe_ffn=2048, dense_layers=3, mla_kv_dim=512 + 64, total_params=671e9,
              active_params_published=37e9, max_positions=163840),
]}


def _norm(name: str) -> str:
    """`a100_80gb`, `A100 80GB`, `A100-80GB` all read alike."""
    return "".join(c for c in name.upper() if c.isalnum())


def gpu(name: str) -> GPU:
    """A catalog GPU by name or alias, case and separators ignored; a near miss gets a suggestion."""
    names = {_norm(k): v for k, v in ALIASES.items()} | {_norm(k): k for k in GPUS}
    key = _norm(name)
    if key in names:
        return GPUS[names[key]]
    import difflib

    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    hint = f"; did you mean {names[close[0]]}?" if close else ""
    raise KeyError(f"unknown GPU {name!r}{hint} (known: {', '.join(GPUS)}; aliases: {', '.join(ALIASES)})")


def model(name_or_path: str) -> ModelSpec:
    path = Path(name_or_path)
    if path.is_dir() or path.name == "config.json":
        return model_from_config(path if path.name == "config.json" else path / "config.json")
    key = name_or_path.lower().replace("meta-llama/", "").replace("qwen/", "").replace("mistralai/", "")
    key = key.replace("-instruct", "").replace("meta-", "").replace("-v0.1", "").replace("deepseek-ai/", "")
    if key in MODELS:
        return MODELS[key]
    raise KeyError(f"unknown model {name_or_path!r}; known: {', '.join(MODELS)}, or a path to a config.json")


SUPPORTED_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def model_from_config(path: Path) -> ModelSpec:
    if not path.is_file():
        raise KeyError(f"{path}: no such config.json")
    cfg = json.loads(path.read_text())
    lacking = [name for name in SUPPORTED_FIELDS if name not in cfg]
    if lacking:
        arch = ", ".join(cfg.get("architectures") or [cfg.get("model_type", "this model")])
        raise KeyError(f"{path}: {arch} is not a layout the planner models (Llama-style decoders with a gated "
                       f"FFN, GQA and MoE variants): config.json has no {', '.join(lacking)}")
    heads = cfg["num_attention_heads"]
    spec = ModelSpec(
        name=path.parent.name, layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        ffn=cfg["intermediate_size"], vocab=cfg["vocab_size"], tied=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=cfg.get("model_type") == "qwen2" or bool(cfg.get("attention_bias")),
        experts=cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 1,
        top_k=cfg.get("num_experts_per_tok") or 1, shared_experts=cfg.get("n_shared_experts") or 0,
        moe_ffn=cfg.get("moe_intermediate_size"), dense_layers=cfg.get("first_k_dense_replace") or 0,
        sliding_window=cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None,
        max_positions=cfg.get("max_position_embeddings", 4096),
    )
    if cfg.get("kv_lora_rank"):
        spec = replace(spec, mla_kv_dim=cfg["kv_lora_rank"] + cfg.get("qk_rope_head_dim", 64))
    return spec
