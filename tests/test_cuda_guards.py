"""CPU-side guards for mistakes that only a GPU would show: tensors made on the default device, and CUDA graphs
that read buffers which no longer exist or indices outside their tensors."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from engine import LLM, SamplingParams
from engine.cuda_graphs import DecodeGraphs, Limits, padded
from engine.step_inputs import Chunk, build

PROMPTS = ["hello world " * 40, "the quick brown fox", "the quick brown fox jumps over"]
CONFIGS = {
    "default": {}, "sdpa-decode": {"cpu_attention": "sdpa"}, "triton": {"attention_backend": "triton"},
    "ngram": {"speculative_model": "ngram", "num_speculative_tokens": 3}, "draft": {"num_speculative_tokens": 2},
    "fp8-kv": {"kv_cache_dtype": "fp8"}, "int8": {"quantization": "int8"},
    "int4": {"quantization": "int4", "quantization_group_size": 32},
    "static-no-chunking": {"batching": "static", "enable_chunked_prefill": False},
    "chunks-and-preemption": {"kv_cache_memory": 8 * 8192, "max_model_len": 128, "max_num_batched_tokens": 64},
}


def params() -> list[SamplingParams]:
    return [SamplingParams(temperature=0, max_tokens=8),
            SamplingParams(temperature=1.0, top_p=0.9, top_k=20, min_p=0.01, max_tokens=8, seed=3, n=2, logprobs=2),
            SamplingParams(temperature=0.7, max_tokens=12, min_tokens=4, stop=["zz"])]


@pytest.fixture(autouse=True)
def _interpret_triton(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_mode_runs_with_the_default_device_poisoned(name, tiny_model, tiny_draft):
    """With the default device set to `meta`, any tensor made without an explicit device is a meta tensor and
    fails the moment it meets a real one: on a GPU it would have been a CPU tensor meeting CUDA ones."""
    config = {"kv_cache_memory": 16 * 2**20, **CONFIGS[name]}
    if name == "draft":
        config["speculative_model"] = str(tiny_draft)
    reference = LLM(tiny_model, **config).generate(PROMPTS, params())
    torch.set_default_device("meta")
    try:
        llm = LLM(tiny_model, **config)
        poisoned = llm.generate(PROMPTS, params())
    finally:
        torch.set_default_device(None)
    if name == "chunks-and-preemption":
        assert llm.stats.totals["num_preemptions"] > 0
    assert poisoned[0].outputs[0].token_ids == reference[0].outputs[0].token_ids  # greedy: identical
    assert all(len(o.outputs) == len(r.outputs) for o, r in zip(poisoned, reference, strict=True))


@pytest.fixture(scope="module")
def tiny_draft():
    from bundled.modelbuild import build_model

    return build_model("tiny-draft")


class ReplayOnCPU:
    """Stands in for torch.cuda's graph calls: a capture runs the forward once, a replay runs it again on the
    same buffers and writes the same output tensor, which is what a CUDA graph does. A real graph keeps only
    the addresses of what the forward read, so the capture notes each input tensor's memory."""

    def __init__(self) -> None:
        self.inputs: dict[int, list[tuple[str, int, int]]] = {}  # batch size -> (name, address, bytes)

    def capture(self, fn, pool):
        out = fn()
        ids, *_ = fn.__defaults__
        found = []
        for value in fn.__defaults__:
            named = [("tensor", value)] if isinstance(value, torch.Tensor) else [
                *vars(value).items(), *[(str(k), x) for k, pair in value.cache.items() for x in pair]]
            found += [(name, t.data_ptr(), t.numel() * t.element_size()) for name, t in named
                      if isinstance(t, torch.Tensor)]
        self.inputs[len(ids)] = found
        return (fn, out), out, pool

    @staticmethod
    def replay(graph) -> None:
        fn, out = graph
        out.copy_(fn())


@pytest.fixture(scope="module")
def triton_llm(tiny_model):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return LLM(tiny_model, attention_backend="triton", kv_cache_memory=4 * 2**20, max_model_len=512)


def limits_of(llm: LLM) -> Limits:
    cfg, runner = llm.model_config, llm.runner
    return Limits(cfg.vocab_size, cfg.max_position_embeddings, runner.num_blocks, runner.block_size,
                  -(-llm.max_model_len // runner.block_size) + 1)


def decode_batch(llm: LLM, n: int, seed: int) -> list[Chunk]:
    rng = np.random.default_rng(seed)
    bs, chunks = llm.runner.block_size, []
    free = list(rng.permutation(llm.runner.num_blocks))
    for _ in range(n):
        length = int(rng.integers(1, 200))
        blocks = [int(free.pop()) for _ in range(-(-length // bs))]
        chunks.append(Chunk([int(rng.integers(3, 1000))], length - 1, blocks, 1))
    return chunks


def test_captured_graphs_keep_every_buffer_they_read(triton_llm):
    """Every tensor a captured forward read lies inside a buffer the graph's entry holds for as long as the graph
    lives (a tensor made for the capture and then dropped leaves the graph reading freed memory)."""
    api = ReplayOnCPU()
    graphs = DecodeGraphs(triton_llm.runner.model, 8, limits_of(triton_llm), torch.device("cpu"), api)
    graphs.capture()
    assert sorted(api.inputs) == graphs.sizes == [1, 2, 4, 8]
    for size, inputs in api.inputs.items():
        entry = graphs.captured[size]
        held = [(t.data_ptr(), t.numel() * t.element_size()) for t in (entry.i64, entry.i32)]
        loose = [name for name, ptr, size_ in inputs
                 if not any(start <= ptr and ptr + size_ <= start + length for start, length in held)]
        assert not loose, f"graph of {size}: {loose} are not held by the graph's buffers"


@pytest.mark.parametrize("n", [1, 3, 7])
def test_replay_matches_eager_and_padding_writes_nothing(triton_llm, n):
    runner = triton_llm.runner
    graphs = DecodeGraphs(runner.model, 8, limits_of(triton_llm), torch.device("cpu"), ReplayOnCPU())
    graphs.capture()
    torch.manual_seed(n)
    runner.kv_cache.copy_(torch.randn_like(runner.kv_cache))
    before = runner.kv_cache.clone()
    inp = build(decode_batch(triton_llm, n, seed=n), runner.block_size)
    assert graphs.fits(inp)
    with torch.inference_mode():
        eager = runner._run(inp).clone()
        after_eager = runner.kv_cache.clone()
        runner.kv_cache.copy_(before)
        replayed = graphs.run(inp).clone()
    assert replayed.shape == eager.shape == (n, triton_llm.model_config.vocab_size)
    assert torch.allclose(replayed, eager, atol=1e-4, rtol=1e-4)
    assert torch.allclose(runner.kv_cache, after_eager, atol=1e-5)  # a padded matmul may round differently

    def written(cache: torch.Tensor) -> set[int]:
        changed = (cache != before).flatten(4).any(-1)  # [2, layers, blocks, block_size]
        return {int(b) * runner.block_size + int(o) for b, o in zip(*np.nonzero(changed[0, 0].numpy()), strict=True)}

    assert written(runner.kv_cache) == written(after_eager) == {int(s) for s in inp.slots}  # padding wrote nothing


def test_padding_is_checked_against_every_bound(triton_llm):
    limits = limits_of(triton_llm)
    inp = build(decode_batch(triton_llm, 3, seed=1), triton_llm.runner.block_size)
    host = padded(inp, 8, limits)
    ids, positions, slots, rows = host.i64.reshape(4, 8)
    assert (slots[3:] == -1).all() and (ids[3:] == 0).all() and list(rows) == list(range(8))
    lens = host.i32[:8]
    assert (lens[3:] == 0).all() and (lens[:3] == inp.seq_lens).all()
    bad_block = build([Chunk([5], 3, [limits.num_blocks], 1)], limits.block_size)
    with pytest.raises(ValueError, match="block id"):
        padded(bad_block, 8, limits)
    bad_token = build([Chunk([limits.vocab], 3, [0], 1)], limits.block_size)
    with pytest.raises(ValueError, match="token id"):
        padded(bad_token, 8, limits)
    far = build([Chunk([5], limits.max_blocks * limits.block_size, [0] * (limits.max_blocks + 1), 1)],
                limits.block_size)
    with pytest.raises(ValueError, match="exceed the captured width"):
        padded(far, 8, limits)
    prefill = build([Chunk([5, 6], 0, [0], 1)], limits.block_size)
    with pytest.raises(ValueError, match="decodes only"):
        padded(prefill, 8, limits)
    with pytest.raises(ValueError, match="decodes only"):
        padded(inp, 2, limits)
