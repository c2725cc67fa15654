"""Tiled prefill attention against SDPA through the paged backend (fresh prompts, chunks after cached context,
tile edges, fp8 caches), the load-time choice between them, and the engine on both paths."""

from __future__ import annotations

import pytest
import requests
import torch

from engine.attention import prefill_attention, torch_backend
from engine.kernels import cpu_kernels, kernel_timing
from engine.llm import LLM
from tests.kernel_cases import FP8, make_batch

# fresh prompts inside one tile, on a tile edge and over three; chunks after 40 and 300 cached tokens; decodes
SPECS = [(0, 21), (0, 128), (0, 300), (40, 9), (300, 129), (17, 1), (0, 1)]


@pytest.fixture(params=["torch softmax", "C++ causal softmax"])
def softmax_path(request, monkeypatch):
    """The tiled path with torch's masked_fill_ + softmax and with the C++ one-pass softmax."""
    fused = request.param.startswith("C++")
    if fused and not cpu_kernels.available():
        pytest.skip(f"C++ kernels not built: {cpu_kernels.status()}")
    monkeypatch.setattr(cpu_kernels, "loaded", lambda: fused)
    return request.param


def both(specs, heads, kv_heads, dim, dtype, cache_dtype=None, seed=0):
    q, k, v, kc, vc, meta = make_batch(specs, heads, kv_heads, dim, dtype, seed=seed, num_blocks=80)
    scales = (None, None)
    if cache_dtype is not None:
        kc, vc, scales = kc.to(cache_dtype), vc.to(cache_dtype), (torch.tensor(0.02), torch.tensor(0.05))
    torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping, *scales)
    ref = torch_backend.attend(q, k, v, kc, vc, meta, dim**-0.5, *scales)
    meta.tiled_prefill_from = 0
    return torch_backend.attend(q, k, v, kc, vc, meta, dim**-0.5, *scales), ref


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(4, 4, 16), (8, 2, 64), (14, 2, 64), (12, 1, 32)])
def test_tiled_matches_sdpa(heads, kv_heads, dim, softmax_path):
    out, ref = both(SPECS, heads, kv_heads, dim, torch.float32, seed=heads)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()


def test_long_contexts_take_fewer_queries_a_tile(monkeypatch, softmax_path):
    """Under a small score budget the 300-token contexts go 16 queries a tile (the floor), the rest in between."""
    monkeypatch.setattr(prefill_attention, "SCORE_BYTES", 8 * 300 * 4 * 16)
    out, ref = both(SPECS, 8, 2, 64, torch.float32, seed=5)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()


def test_tiled_in_bf16_and_from_an_fp8_cache(softmax_path):
    """bf16 rounds the scores once more than flash does (the GEMM writes them in bf16): same order of error."""
    out, ref = both(SPECS, 8, 2, 64, torch.bfloat16)
    exact = both(SPECS, 8, 2, 64, torch.float64)[1]
    assert out.dtype == torch.bfloat16
    assert (out.double() - exact).abs().max() < 4 * max((ref.double() - exact).abs().max(), 1e-2)
    out, ref = both(SPECS, 8, 2, 64, torch.float32, cache_dtype=FP8["fp8_e4m3"])
    assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("tiled_ms", "start", "timed"), [
    ({128: 2.0, 256: 0.5, 512: 2.0, 1024: 1.0, 2048: 1.0}, 1024, "512 / 1024 / 2048"),  # wins at 256, not from there
    ({128: 0.5, 256: 1.0, 512: 1.0, 1024: 1.0, 2048: 1.0}, 128, "128 / 256 / 512 / 1024 / 2048"),
    ({128: 0.5, 256: 1.0, 512: 1.0, 1024: 1.0, 2048: 3.0}, None, "2048"),  # loses at the longest: never
])
def test_tiled_is_taken_from_the_shortest_length_it_keeps_winning_at(monkeypatch, tiled_ms, start, timed):
    """A made-up clock: SDPA takes 1.5 ms at every length (each path stands in by its name, so the clock knows
    which one it timed). Lengths are timed from the longest down, and none below the first loss: it cannot change
    the choice (emulated bf16 on an AVX2 CPU took 35 s to time them all)."""
    seen = []
    monkeypatch.setattr(prefill_attention, "tiled", lambda *a: "tiled")
    monkeypatch.setattr(prefill_attention, "sdpa", lambda *a: "sdpa")
    monkeypatch.setattr(kernel_timing, "median_seconds",
                        lambda fn, x: seen.append(len(x)) or (tiled_ms[len(x)] if fn(x) == "tiled" else 1.5))
    prefill_attention._DECIDED.clear()
    found, why = prefill_attention.tiled_from(8, 2, 64, torch.bfloat16)
    prefill_attention._DECIDED.clear()
    assert found == start and f" at {timed} tokens" in why
    assert sorted(set(seen)) == [int(n) for n in timed.split(" / ")]


def test_only_prefills_with_enough_context_take_the_tiled_path(monkeypatch):
    seen = []
    monkeypatch.setattr(prefill_attention, "tiled", lambda q, k, *a: seen.append(len(k)) or torch.zeros_like(q))
    q, k, v, kc, vc, meta = make_batch(SPECS, 8, 2, 64, torch.float32, seed=1, num_blocks=80)
    meta.tiled_prefill_from = 300
    torch_backend.attend(q, k, v, kc, vc, meta, 0.125)
    assert seen == [300, 429]


def test_the_engine_on_both_paths_gives_the_same_tokens_and_says_which(tiny_model, serve_engine):
    from engine.config import SamplingParams

    prompts = [list(range(3, 3 + n)) for n in (5, 140, 300)]
    outs = {}
    for path in ("sdpa", "tiled"):
        llm = LLM(tiny_model, kv_cache_memory=16 * 2**20, cpu_prefill_attention=path, max_num_batched_tokens=128)
        assert llm.runner.prefill_attention == f"{path} (as asked)"
        assert llm.runner.tiled_prefill_from == (0 if path == "tiled" else None)
        outs[path] = [o.outputs[0].token_ids for o in llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8))]
    assert outs["tiled"] == outs["sdpa"]
    server = serve_engine(LLM(tiny_model, kv_cache_memory=16 * 2**20))
    config = requests.get(server.url + "/version", timeout=10).json()["config"]
    assert config["prefill_attention"].startswith(("tiled from ", "SDPA (tiled takes"))
