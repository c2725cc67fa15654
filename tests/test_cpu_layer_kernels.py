"""The C++ RMSNorm, rotary and SiLU * up against the torch layers they replace, and the engine on both paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.config import SamplingParams
from engine.kernels import cpu_kernels
from engine.layers.norm import RMSNorm
from engine.layers.rotary import RotaryEmbedding
from engine.llm import LLM

pytestmark = pytest.mark.skipif(not cpu_kernels.available(), reason=f"C++ kernels not built: {cpu_kernels.status()}")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _same(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Half precision: the kernel rounds where torch's ops round, so results agree bit for bit but for an exp
    computed differently (silu: at most one unit in the last place, on a few elements); fp32: rounding only."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype == torch.float32:
        assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
        return
    ulp = torch.finfo(ref.dtype).eps * ref.float().abs().clamp_min(torch.finfo(ref.dtype).tiny)
    assert ((out.float() - ref.float()).abs() <= ulp).all(), (out.float() - ref.float()).abs().max()
    assert (out == ref).float().mean() > 0.99


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(dtype):
    torch.manual_seed(0)
    norm = RMSNorm(96, eps=1e-5).to(dtype)
    norm.weight.data = torch.randn(96).to(dtype)
    x = (torch.randn(3, 7, 96) * 4).to(dtype)
    ref = norm(x)
    norm.cpu_kernel = True
    _same(norm(x), ref)
    _same(norm(x.transpose(0, 1)), ref.transpose(0, 1).contiguous())  # a strided input is read, not refused


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_in_place(dtype):
    torch.manual_seed(3)
    norm = RMSNorm(96, eps=1e-5).to(dtype)
    norm.weight.data = torch.randn(96).to(dtype)
    x, residual = (torch.randn(5, 96) * 4).to(dtype), (torch.randn(5, 96) * 4).to(dtype)
    ref_out, ref_res = norm(x.clone(), residual.clone())  # the torch path: a new sum, then the norm
    assert torch.equal(ref_res, x + residual)
    norm.cpu_kernel = True
    out, res = norm(x, residual)
    assert out.data_ptr() == x.data_ptr() and res.data_ptr() == residual.data_ptr()  # in place
    assert torch.equal(res, ref_res)
    _same(out, ref_out)
    with pytest.raises(RuntimeError, match="one shape"):
        cpu_kernels.add_rms_norm_(x[:3], residual, norm.weight, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kv_matches_index_copy(dtype):
    from engine.attention import torch_backend

    torch.manual_seed(4)
    qkv = torch.randn(6, (4 + 2 * 2) * 16).to(dtype)
    k, v = (t.view(6, 2, 16) for t in qkv[:, 64:].split(32, dim=1))  # strided views, as the model passes them
    slots = torch.tensor([5, -1, 0, 17, -1, 30])
    caches = [torch.zeros(4, 8, 2, 16, dtype=dtype) for _ in range(4)]
    cpu_kernels.store_kv_(k, v, caches[0], caches[1], slots)
    keep = slots >= 0
    for cache, x in ((caches[2], k), (caches[3], v)):
        cache.view(-1, 2, 16).index_copy_(0, slots[keep], x[keep])
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
    assert torch_backend.cache_kernel(k, v, caches[0])
    with pytest.raises(RuntimeError, match="outside the cache"):
        cpu_kernels.store_kv_(k, v, caches[0], caches[1], torch.tensor([0, 1, 2, 3, 4, 32]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype):
    torch.manual_seed(1)
    gate_up = (torch.randn(33, 2 * 80) * 3).to(dtype)
    gate, up = gate_up.chunk(2, dim=-1)
    _same(cpu_kernels.silu_and_mul(gate_up), F.silu(gate).mul_(up))
    with pytest.raises(RuntimeError, match="gate then up"):
        cpu_kernels.silu_and_mul(gate_up[:, :3])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_in_place_on_views_of_qkv(dtype):
    torch.manual_seed(2)
    heads, kv_heads, dim, tokens = 6, 2, 32, 19
    rotary = RotaryEmbedding(dim, 512, 10000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    rotary = rotary.to(dtype)  # the model runner casts the tables with the model, as torch does
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim).to(dtype)
    positions = torch.randint(0, 512, (tokens,))

    def views(t):
        q, k, v = t.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
        return q.view(-1, heads, dim), k.view(-1, kv_heads, dim), v

    ref_q, ref_k = rotary(positions, *views(qkv.clone())[:2])
    rotary.cpu_kernel = True
    fused = qkv.clone()
    q, k, v = views(fused)
    rotary(positions, q, k)
    _same(q, ref_q)
    _same(k, ref_k)
    assert torch.equal(v, views(qkv)[2])  # v, in the same buffer, untouched
    with pytest.raises(RuntimeError, match="outside the table"):
        rotary(positions + 512, q, k)


def test_engine_on_both_paths(tiny_model):
    """bf16: the C++ layers' logits are the torch layers' within bf16 rounding, and greedy output agrees (one
    prompt of eight may part at a near-tie of two logits)."""
    prompts = [[5 + (i * 37 + j * 11) % 15000 for j in range(20 + 9 * i)] for i in range(8)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    outs, logits = {}, {}
    for layers in ("torch", "cpp"):
        llm = LLM(tiny_model, kv_cache_memory=8 * 2**20, dtype="bfloat16", cpu_layers=layers, cpu_linear="torch")
        assert llm.runner.layer_kernels.startswith("C++" if layers == "cpp" else "torch")
        llm.add_request("probe", prompts[-1], SamplingParams(temperature=0, max_tokens=1))
        logits[layers], _ = llm.runner.execute(llm.scheduler.schedule())
        llm.abort("probe")
        outs[layers] = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    scale = logits["torch"].abs().max()
    assert (logits["cpp"] - logits["torch"]).abs().max() / scale < 0.02
    assert sum(a != b for a, b in zip(outs["cpp"], outs["torch"], strict=True)) <= 1
