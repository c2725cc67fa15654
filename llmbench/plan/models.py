"""Models the planner knows (planning.md §8, and the models published benchmarks run), and the lookup that also
takes any Hugging Face `config.json` of a supported layout (model_config.py reads it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llmbench.plan.model_config import model_from_config
from llmbench.plan.model_spec import ModelSpec


def _plain(name, layers, hidden, heads, ffn, vocab, **kw) -> ModelSpec:
    """A two-matrix-FFN, multi-head decoder (OPT, MPT, GPT-NeoX)."""
    return ModelSpec(name, layers, hidden, heads, kw.pop("kv_heads", heads), hidden // heads, ffn, vocab,
                     gated_ffn=False, **kw)


MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, max_positions=4096),
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, max_positions=4096),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, max_positions=4096),
    ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_positions=8192),
    ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_positions=131072),
    ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=8192),
    ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=131072),
    ModelSpec("llama-3.3-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_positions=131072),
    ModelSpec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, max_positions=131072),
    ModelSpec("qwen2.5-0.5b", 24, 896, 14, 2, 64, 4864, 151936, tied=True, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-14b", 48, 5120, 40, 8, 128, 13824, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, sliding_window=4096, max_positions=32768),
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, experts=8, top_k=2, max_positions=32768),
    ModelSpec("mixtral-8x22b", 56, 6144, 48, 8, 128, 16384, 32768, experts=8, top_k=2, max_positions=65536),
    ModelSpec("qwen2.5-32b", 64, 5120, 40, 8, 128, 27648, 152064, qkv_bias=True, max_positions=32768),
    ModelSpec("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, tied=True, max_positions=40960),
    ModelSpec("qwen3-1.7b", 28, 2048, 16, 8, 128, 6144, 151936, tied=True, max_positions=40960),
    ModelSpec("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936, tied=True, max_positions=40960),
    ModelSpec("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, max_positions=40960),
    ModelSpec("qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, max_positions=40960),
    ModelSpec("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, max_positions=40960),
    ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, 151936, experts=128, top_k=8, moe_ffn=768,
              max_positions=40960),
    ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 12288, 151936, experts=128, top_k=8, moe_ffn=1536,
              max_positions=40960),
    ModelSpec("llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, tied=True, max_positions=131072),
    ModelSpec("llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, tied=True, max_positions=131072),
    # every layer routes (one shared expert beside one of 16); its chunked local attention is not modelled
    ModelSpec("llama-4-scout-17b-16e", 48, 5120, 40, 8, 128, 16384, 202048, experts=16, top_k=1, shared_experts=1,
              moe_ffn=8192, max_positions=10485760),
    # gpt-oss: biased attention, every other layer a 128-token sliding window (attending to the window only, tail
    # term `sliding window`; their KV held for the window only where vLLM's hybrid groups run, tail term `hybrid KV
    # groups`, and counted in full elsewhere);
    # MXFP4 experts (`--weight-dtype mxfp4`: the routed experts in 4.25 bits, the rest bf16, as the checkpoints ship)
    ModelSpec("gpt-oss-20b", 24, 2880, 64, 8, 64, 2880, 201088, qkv_bias=True, experts=32, top_k=4,
              sliding_window=128, sliding_layers=12, max_positions=131072, checkpoint_dtype="mxfp4"),
    ModelSpec("gpt-oss-120b", 36, 2880, 64, 8, 64, 2880, 201088, qkv_bias=True, experts=128, top_k=4,
              sliding_window=128, sliding_layers=18, max_positions=131072, checkpoint_dtype="mxfp4"),
    ModelSpec("glm-4.5-air", 46, 4096, 96, 8, 128, 10944, 151552, qkv_bias=True, experts=128, top_k=8,
              shared_experts=1, moe_ffn=1408, dense_layers=1, max_positions=131072),
    ModelSpec("glm-4.5", 92, 5120, 96, 8, 128, 12288, 151552, qkv_bias=True, experts=160, top_k=8,
              shared_experts=1, moe_ffn=1536, dense_layers=3, max_positions=131072),
    ModelSpec("deepseek-v3", 61, 7168, 128, 128, 128, 18432, 129280, experts=256, top_k=8, shared_experts=1,
              moe_ffn=2048, dense_layers=3, mla_kv_dim=512 + 64, total_params=671e9,
              active_params_published=37e9, max_positions=163840, checkpoint_dtype="fp8", fp8_blocks=True),
    _plain("opt-13b", 40, 5120, 40, 20480, 50272, tied=True, linear_bias=True, learned_positions=2050,
           max_positions=2048),
    _plain("opt-30b", 48, 7168, 56, 28672, 50272, tied=True, linear_bias=True, learned_positions=2050,
           max_positions=2048),
    _plain("mpt-7b", 32, 4096, 32, 16384, 50432, tied=True, max_positions=2048),
]}

# a quantized checkpoint's name: its model's layout, the weights in the format the suffix says
QUANT_SUFFIXES = (("-fp8-dynamic", "fp8"), ("-fp8", "fp8"), ("-awq-int4", "int4"), ("-awq", "int4"),
                  ("-gptq-int4", "int4"), ("-gptq-int8", "int8"), ("-w4a16", "int4"), ("-w8a8", "int8"))
# publishers whose own -FP8 checkpoints scale per 128 x 128 block (Qwen's model cards: "fine-grained fp8
# quantization with block size of 128"; DeepSeek's ship that way); others' (NVIDIA's, RedHat's) per tensor or channel
BLOCK_FP8_PUBLISHERS = ("qwen", "deepseek-ai")
# the same architecture under another checkpoint's name: R1 and V3.1 are V3's layout, the -Instruct-2507 updates
# keep their model's, and fine-tunes keep their base's (DeepSeek-R1's README: the distilled models' bases are
# Llama-3.1-8B, Llama-3.3-70B-Instruct, Qwen2.5-14B and -32B, Qwen2.5-Math-7B, Qwen2.5-7B's layout; QwQ-32B and
# Qwen2.5-Coder are Qwen2.5's layout at their size; Mistral-7B v0.2/v0.3 differ from v0.1 only in vocabulary, 768
# rows, and context; GLM-4.6 and 4.7 are GLM-4.5's layout with a longer context)
ALIASES = {"deepseek-r1": "deepseek-v3", "deepseek-r1-0528": "deepseek-v3", "deepseek-v3-0324": "deepseek-v3",
           "deepseek-v3.1": "deepseek-v3", "llama-4-scout": "llama-4-scout-17b-16e",
           "qwen3-30b-a3b-2507": "qwen3-30b-a3b", "qwen3-235b-a22b-2507": "qwen3-235b-a22b",
           "qwen3-4b-2507": "qwen3-4b", "deepseek-r1-distill-llama-8b": "llama-3.1-8b",
           "deepseek-r1-distill-llama-70b": "llama-3.3-70b", "deepseek-r1-distill-qwen-7b": "qwen2.5-7b",
           "deepseek-r1-distill-qwen-14b": "qwen2.5-14b", "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
           "qwq-32b": "qwen2.5-32b", "qwen2.5-coder-7b": "qwen2.5-7b", "qwen2.5-coder-14b": "qwen2.5-14b",
           "qwen2.5-coder-32b": "qwen2.5-32b", "mistral-7b-v0.2": "mistral-7b", "mistral-7b-v0.3": "mistral-7b",
           "glm-4.6": "glm-4.5", "glm-4.7": "glm-4.5"}


def model(name_or_path: str) -> ModelSpec:
    """A catalog model (Hugging Face ids, -Instruct names and quantized checkpoints' names accepted: `-FP8`,
    `-AWQ`, `-GPTQ-Int4` set the format the weights ship in) or a config.json path."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() or path.name == "config.json":
        return model_from_config(path if path.name == "config.json" else path / "config.json")
    if name_or_path.startswith(("/", ".", "~")) or name_or_path.count("/") > 1:
        raise KeyError(f"{name_or_path!r} is a path with no config.json (a checkpoint folder or its config.json, or "
                       "a catalog model or Hugging Face id such as Qwen/Qwen3-8B)")
    publisher, _, key = name_or_path.lower().rpartition("/")  # a Hugging Face id's repository name, whoever publishes it
    key = key.replace("-instruct", "").replace("meta-", "").replace("-v0.1", "").replace("-hf", "").replace("-chat", "")
    shipped = next(((suffix, dtype) for suffix, dtype in QUANT_SUFFIXES if key.endswith(suffix)), None)
    if shipped:
        key = key.removesuffix(shipped[0])
    key = ALIASES.get(key, key)
    if key in MODELS:
        if not shipped:
            return MODELS[key]
        blocks = shipped[0] == "-fp8" and publisher in BLOCK_FP8_PUBLISHERS
        return replace(MODELS[key], checkpoint_dtype=shipped[1], fp8_blocks=blocks)
    raise KeyError(f"unknown model {name_or_path!r}; known: {', '.join(MODELS)}, or a path to a config.json")
