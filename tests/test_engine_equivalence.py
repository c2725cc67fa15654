"""Greedy output of the engine equals transformers' generate, token for token, in every mode."""

import random

import pytest
import torch

from engine.config import SamplingParams
from engine.llm import LLM

MAX_NEW = 16
BLOCK_BYTES_TINY = 2 * 2 * 16 * 2 * 16 * 4  # k+v, layers, block, kv heads, head dim, fp32


def _prompts():
    rng = random.Random(1)
    system = [rng.randrange(3, 16000) for _ in range(70)]
    lengths = [1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 64, 100, 150, 200, 255, 256, 257, 300, 350, 400, 450, 499, 500]
    prompts = [[rng.randrange(3, 16000) for _ in range(n)] for n in lengths]
    prompts += [system + [rng.randrange(3, 16000) for _ in range(rng.randrange(1, 200))] for _ in range(11)]
    prompts.append(list(system))  # exactly a cached prefix: only its last token is recomputed
    return prompts


PROMPTS = _prompts()


@pytest.fixture(scope="module")
def references(hf_tiny):
    refs = []
    for prompt in PROMPTS:
        out = hf_tiny.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW,
                               do_sample=False)
        refs.append(out[0, len(prompt):].tolist())
    return refs


MODES = {
    "chunked-prefill": dict(max_num_batched_tokens=96),
    "prefix-caching": dict(enable_prefix_caching=True, max_num_batched_tokens=512),
    "preemption": dict(kv_cache_memory=BLOCK_BYTES_TINY * 48, max_model_len=700, max_num_batched_tokens=256),
    "static": dict(batching="static", max_num_seqs=8, max_num_batched_tokens=300),
    "contiguous": dict(kv_layout="contiguous", kv_cache_memory=BLOCK_BYTES_TINY * 300, max_model_len=600),
    "no-chunking-no-cache": dict(enable_chunked_prefill=False, enable_prefix_caching=False),
}


@pytest.mark.parametrize("mode", MODES)
def test_greedy_matches_transformers(tiny_model, references, mode):
    """Token for token, so the linears use the same F.linear kernels as transformers (cpu_linear="torch");
    the oneDNN path is checked against it in test_onednn_linears_match_f_linear."""
    assert len(PROMPTS) >= 32
    llm = LLM(tiny_model, **{"kv_cache_memory": 32 * 2**20, "cpu_linear": "torch", **MODES[mode]})
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True))
    got = [o.outputs[0].token_ids for o in outs]
    mismatched = [i for i, (g, r) in enumerate(zip(got, references, strict=True)) if g != r]
    assert not mismatched, f"{mode}: prompts {mismatched} differ"
    totals = llm.stats.totals
    if mode == "preemption":
        assert totals["num_preemptions"] > 0
    if mode == "prefix-caching":
        assert totals["prefix_hit_tokens"] >= 10 * 64
    if mode == "chunked-prefill":
        assert max(s.num_prefill_tokens + s.num_decode_tokens for s in llm.stats.steps) <= 96
    assert llm.block_manager.usage().used == 0


def test_bf16_logits_within_tolerance(tiny_model, hf_tiny):
    from transformers import AutoModelForCausalLM

    hf16 = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.bfloat16).eval()
    llm = LLM(tiny_model, dtype="bfloat16", kv_cache_memory=8 * 2**20)
    prompt = PROMPTS[20]
    llm.add_request("r", prompt, SamplingParams(temperature=0, max_tokens=1))
    batch = llm.scheduler.schedule()
    ours, _ = llm.runner.execute(batch)
    with torch.no_grad():
        ref = hf16(torch.tensor([prompt])).logits[0, -1].float()
        exact = hf_tiny(torch.tensor([prompt])).logits[0, -1]
    scale = exact.abs().max()
    assert (ours[0] - ref).abs().max() / scale < 0.05
    assert (ours[0] - exact).abs().max() / scale < 0.05


def test_onednn_linears_match_f_linear(tiny_model):
    from engine.quant.perplexity import score

    plain = LLM(tiny_model, kv_cache_memory=8 * 2**20, cpu_linear="torch")
    packed = LLM(tiny_model, kv_cache_memory=8 * 2**20, cpu_linear="onednn")
    assert packed.runner.linear_path.startswith("oneDNN") and plain.runner.linear_path == "F.linear"
    windows = [p for p in PROMPTS if len(p) > 40][:4]
    _, a = score(plain, windows)
    _, b = score(packed, windows)
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-4 * float(x.abs().max()))


def test_onednn_bf16_linears_match_f_linear(tiny_model):
    """bf16 weights packed for oneDNN (AMX where the CPU has it) give what F.linear gives in bf16."""
    from engine.quant.perplexity import score

    plain = LLM(tiny_model, kv_cache_memory=8 * 2**20, cpu_linear="torch", dtype="bfloat16")
    packed = LLM(tiny_model, kv_cache_memory=8 * 2**20, cpu_linear="onednn", dtype="bfloat16")
    if not packed.runner.linear_path.startswith("oneDNN"):
        pytest.skip(f"oneDNN cannot pack bf16 here: {packed.runner.linear_path}")
    assert "bfloat16" in packed.runner.linear_path and plain.runner.linear_path == "F.linear"
    windows = [p for p in PROMPTS if len(p) > 40][:4]
    _, a = score(plain, windows)
    _, b = score(packed, windows)
    for x, y in zip(a, b, strict=True):
        assert (x - y).abs().max() < 0.05 * float(x.abs().max())
