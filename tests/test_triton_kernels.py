"""Triton kernels against the torch backend, under TRITON_INTERPRET=1 on the CPU (set in conftest).

Small fp32/fp16 shapes only: the interpreter is ~750x slower than torch and computes bf16 wrongly
(triton#11584). It also rounds float→fp8 conversions differently from torch for 2–4% of values (measured:
off by one exponent at rounding carries), so fp8 stores are checked on values fp8 holds exactly, with
power-of-two scales: that tests the kernel's addressing and scaling, not the interpreter's rounding."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed")

from engine.attention import torch_backend, triton_backend  # noqa: E402
from engine.kernels.decode_attention import split_kv_decode  # noqa: E402
from tests.kernel_cases import FP8, MIXED, make_batch  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])  # bf16: GPU only
TOL = {torch.float32: 1e-4 if DEVICE == "cpu" else 2e-2, torch.float16: 3e-3, torch.bfloat16: 2e-2}  # GPU fp32 dot is TF32

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (8, 2), (6, 2)])
def test_unified_attention_matches_torch(dtype, heads, kv_heads):
    q, k, v, kc, vc, meta = make_batch(MIXED, heads, kv_heads, 16, dtype, seed=heads * 10 + kv_heads, device=DEVICE)
    kc2, vc2 = kc.clone(), vc.clone()
    torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping)
    ref = torch_backend.attend(q, k, v, kc, vc, meta, 0.25)
    triton_backend.store_kv(k, v, kc2, vc2, meta.slot_mapping)
    assert torch.equal(kc2, kc) and torch.equal(vc2, vc)
    out = triton_backend.attend(q, k, v, kc2, vc2, meta, 0.25)
    tol = TOL[dtype]
    assert torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol), (out.float() - ref.float()).abs().max()


def test_head_dim_not_a_power_of_two_and_padding_slots():
    q, k, v, kc, vc, meta = make_batch([(3, 4), (30, 1)], 4, 2, 24, torch.float32, seed=5, device=DEVICE)
    meta.slot_mapping[1] = -1  # a padding token: neither backend may store it
    kc2, vc2 = kc.clone(), vc.clone()
    torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping)
    triton_backend.store_kv(k, v, kc2, vc2, meta.slot_mapping)
    assert torch.equal(kc2, kc)
    ref = torch_backend.attend(q, k, v, kc, vc, meta, 0.2)
    assert torch.allclose(triton_backend.attend(q, k, v, kc2, vc2, meta, 0.2), ref, atol=TOL[torch.float32])


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_cache(kv_dtype):
    specs = [(20, 5), (33, 1), (16, 16), (7, 1)]  # every sequence has cached context: both read the cache
    q, k, v, kc, vc, meta = make_batch(specs, 4, 2, 16, torch.float32, seed=7, device=DEVICE)
    kc8, vc8 = kc.to(FP8[kv_dtype]), vc.to(FP8[kv_dtype])
    k_scale, v_scale = torch.tensor(2.0**-6, device=DEVICE), torch.tensor(2.0**-7, device=DEVICE)
    k = (k / k_scale).to(FP8[kv_dtype]).float() * k_scale  # exactly representable after the scale
    v = (v / v_scale).to(FP8[kv_dtype]).float() * v_scale
    kc8t, vc8t = kc8.clone(), vc8.clone()
    torch_backend.store_kv(k, v, kc8, vc8, meta.slot_mapping, k_scale, v_scale)
    triton_backend.store_kv(k, v, kc8t, vc8t, meta.slot_mapping, k_scale, v_scale)
    assert torch.equal(kc8t.view(torch.uint8), kc8.view(torch.uint8))
    assert torch.equal(vc8t.view(torch.uint8), vc8.view(torch.uint8))
    ref = torch_backend.attend(q, k, v, kc8, vc8, meta, 0.25, k_scale, v_scale)
    out = triton_backend.attend(q, k, v, kc8, vc8, meta, 0.25, k_scale, v_scale)
    assert torch.allclose(out, ref, atol=TOL[torch.float32])


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_kv_decode_matches_torch(dtype):
    specs = [(95, 1), (40, 1), (130, 1), (16, 1), (1, 1)]
    q, k, v, kc, vc, meta = make_batch(specs, 8, 2, 16, dtype, seed=11, num_blocks=32, device=DEVICE)
    torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping)
    ref = torch_backend.attend(q, k, v, kc, vc, meta, 0.25)
    out = torch.zeros_like(q)
    one = torch.ones((), device=DEVICE)
    split_kv_decode(q, kc, vc, out, meta.block_tables, meta.seq_lens, meta.decode_token_rows, meta.decode_seqs,
                    0.25, one, one, num_splits=4)
    tol = TOL[dtype]
    assert torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol)


def test_engine_on_the_triton_backend_matches_torch(tiny_model):
    from engine.config import SamplingParams
    from engine.llm import LLM

    prompts = [[5, 6, 7, 8, 9, 10, 11] * 3, [100, 200, 300], list(range(40, 75))]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    common = {"kv_cache_memory": 2 * 2**20, "max_model_len": 256, "max_num_batched_tokens": 32, "device": DEVICE}
    ref = [o.outputs[0].token_ids for o in LLM(tiny_model, attention_backend="torch", **common).generate(prompts, params)]
    llm = LLM(tiny_model, attention_backend="triton", **common)
    assert llm.runner.backend == "triton"
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == ref
