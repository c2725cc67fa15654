"""The config reader on one real config.json per family (the published fields and values that matter to the
planner, as each model's Hugging Face repository ships them), checked against the published parameter counts:
MoE fields under each family's own names, MLA, nested language models, two-matrix FFNs."""

import json

import pytest

from llmbench.plan.model_config import model_from_config

CONFIGS = {
    # name: (config.json fields, published total params, published active params or None)
    "Llama-3.1-8B": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                      "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False}, 8.03e9,
                     None),
    "Qwen2.5-7B": ({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                    "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                    "max_position_embeddings": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
                    "sliding_window": 131072}, 7.62e9, None),
    "Qwen3-8B": ({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32,
                  "num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "max_position_embeddings": 40960, "tie_word_embeddings": False, "attention_bias": False},
                 8.19e9, None),
    "Qwen3-30B-A3B": ({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                       "moe_intermediate_size": 768, "num_attention_heads": 32, "num_hidden_layers": 48,
                       "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                       "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                       "max_position_embeddings": 40960, "tie_word_embeddings": False}, 30.5e9, 3.3e9),
    "Mixtral-8x7B": ({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                      "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
                      "max_position_embeddings": 32768, "tie_word_embeddings": False}, 46.7e9, 12.9e9),
    "DeepSeek-V3": ({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                     "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_hidden_layers": 61,
                     "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
                     "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
                     "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
                     "max_position_embeddings": 163840, "tie_word_embeddings": False,
                     "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                             "weight_block_size": [128, 128]}}, 671e9, 37e9),
    "gpt-oss-120b": ({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
                      "num_attention_heads": 64, "num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 64,
                      "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4,
                      "vocab_size": 201088, "sliding_window": 128, "max_position_embeddings": 131072,
                      "layer_types": ["sliding_attention", "full_attention"] * 18,
                      "attention_bias": True, "tie_word_embeddings": False,
                      "quantization_config": {"quant_method": "mxfp4",
                                              "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}},
                     116.8e9, 5.1e9),
    "GLM-4.5-Air": ({"model_type": "glm4_moe", "hidden_size": 4096, "intermediate_size": 10944,
                     "moe_intermediate_size": 1408, "num_attention_heads": 96, "num_hidden_layers": 46,
                     "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 128, "n_shared_experts": 1,
                     "num_experts_per_tok": 8, "first_k_dense_replace": 1, "vocab_size": 151552,
                     "attention_bias": True, "max_position_embeddings": 131072, "tie_word_embeddings": False},
                    106e9, 12e9),
    "Gemma-2-9B": ({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
                    "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "head_dim": 256,
                    "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096}, 9.24e9, None),
    "Gemma-3-27B (text_config)": ({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
                                   "text_config": {"model_type": "gemma3_text", "hidden_size": 5376,
                                                   "intermediate_size": 21504, "num_attention_heads": 32,
                                                   "num_hidden_layers": 62, "num_key_value_heads": 16,
                                                   "head_dim": 128, "vocab_size": 262208, "sliding_window": 1024},
                                   "vision_config": {"hidden_size": 1152}}, 27.0e9, None),
    "Phi-3-mini": ({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32,
                    "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32064,
                    "max_position_embeddings": 4096, "tie_word_embeddings": False}, 3.82e9, None),
    "OPT-13B": ({"model_type": "opt", "hidden_size": 5120, "ffn_dim": 20480, "num_attention_heads": 40,
                 "num_hidden_layers": 40, "vocab_size": 50272, "max_position_embeddings": 2048, "enable_bias": True,
                 "word_embed_proj_dim": 5120}, 12.85e9, None),
    "Falcon-7B": ({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
                   "vocab_size": 65024, "multi_query": True, "new_decoder_architecture": False, "bias": False,
                   "parallel_attn": True}, 6.92e9, None),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_every_family_reads_to_its_published_size(name, tmp_path):
    fields, total, active = CONFIGS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    spec = model_from_config(path)
    assert spec.params == pytest.approx(total, rel=0.03), name
    if active is not None:
        assert spec.experts > 1 and spec.active_params == pytest.approx(active, rel=0.15), name
    else:
        assert spec.experts == 1


def test_parameter_counts_print_for_small_models():
    from llmbench.plan.planner import params_text

    assert params_text(38.9e6) == "39 M" and params_text(8.03e9) == "8.0 B"


def test_moe_and_mla_details(tmp_path):
    def read(name):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(CONFIGS[name][0]))
        return model_from_config(path)

    qwen = read("Qwen3-30B-A3B")
    assert (qwen.experts, qwen.top_k, qwen.moe_ffn, qwen.dense_layers) == (128, 8, 768, 0)
    deepseek = read("DeepSeek-V3")
    assert deepseek.mla_kv_dim == 576 and deepseek.dense_layers == 3 and deepseek.shared_experts == 1
    assert deepseek.kv_bytes_per_token(1) == 61 * 576  # one latent per layer, whatever the heads
    assert read("Gemma-2-9B").tied and read("Gemma-3-27B (text_config)").layers == 62
    assert read("gpt-oss-120b").top_k == 4
    assert (read("gpt-oss-120b").sliding_layers, read("gpt-oss-120b").sliding_window) == (18, 128)
    assert read("Gemma-2-9B").sliding_layers == 0  # a window without layer_types: every layer counted in full
    # the format the checkpoint ships, from quantization_config: a plan's default --weight-dtype
    assert (read("gpt-oss-120b").checkpoint_dtype, deepseek.checkpoint_dtype, qwen.checkpoint_dtype) == (
        "mxfp4", "fp8", "bf16")
