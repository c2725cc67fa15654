"""The C++ paged decode kernel against the gather + SDPA path, the engine on both paths, the pool's huge pages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from engine.attention import torch_backend
from engine.config import SamplingParams
from engine.kernels import cpu_kernels
from engine.llm import LLM
from tests.kernel_cases import FP8, make_batch

# the fallback and huge-page tests run everywhere; these need the kernel built
needs_kernel = pytest.mark.skipif(not cpu_kernels.available(), reason=f"C++ kernel not built: {cpu_kernels.status()}")

DECODES = [(95, 1), (40, 1), (130, 1), (15, 1), (0, 1), (16, 1), (31, 1), (200, 1)]  # block edges, 1 token


def decode_both(q, k, v, kc, vc, meta, scale=0.25, k_scale=None, v_scale=None):
    torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping, k_scale, v_scale)
    ref = torch_backend.attend(q, k, v, kc, vc, meta, scale, k_scale, v_scale)
    meta.decode_kernel = "cpp"
    return torch_backend.attend(q, k, v, kc, vc, meta, scale, k_scale, v_scale), ref


@needs_kernel
@pytest.mark.parametrize(("heads", "kv_heads", "dim"),
                         [(4, 4, 16), (4, 2, 16), (8, 2, 64), (14, 2, 64), (32, 4, 128), (12, 1, 32)])
def test_matches_sdpa(heads, kv_heads, dim):
    """Groups of 1 to 12 query heads per KV head (a group over 4 takes several passes; 7 as in Qwen2-0.5B)."""
    q, k, v, kc, vc, meta = make_batch(DECODES, heads, kv_heads, dim, torch.float32, seed=heads + dim, num_blocks=48)
    out, ref = decode_both(q, k, v, kc, vc, meta)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()
    strided = q.transpose(0, 1).contiguous().transpose(0, 1)  # as the model hands it over: a view of qkv
    assert not strided.is_contiguous()
    assert torch.equal(cpu_kernels.paged_decode(strided, kc, vc, meta.block_tables, meta.seq_lens, 0.25), out)


@needs_kernel
def test_mixed_batch_only_decodes_take_the_kernel():
    specs = [(0, 21), (40, 1), (35, 9), (17, 1), (0, 1)]
    q, k, v, kc, vc, meta = make_batch(specs, 8, 2, 32, torch.float32, seed=3)
    out, ref = decode_both(q, k, v, kc, vc, meta)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_cache(dtype):
    q, k, v, kc, vc, meta = make_batch(DECODES, 8, 2, 32, dtype, seed=9, num_blocks=48)
    out, ref = decode_both(q, k, v, kc, vc, meta)
    assert out.dtype == dtype
    assert torch.allclose(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


@needs_kernel
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 2, 64), (14, 2, 64), (32, 4, 128), (4, 4, 16)])
def test_bf16_query_and_cache(heads, kv_heads, dim):
    """bf16 q on a bf16 cache: the vdpbf16ps K pass where the CPU has it (dims a multiple of 32, groups of 1 to 7
    query heads), the widening path for head_dim 16 and elsewhere."""
    q, k, v, kc, vc, meta = make_batch(DECODES, heads, kv_heads, dim, torch.bfloat16, seed=dim + heads, num_blocks=48)
    out, ref = decode_both(q, k, v, kc, vc, meta, scale=dim**-0.5)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref.float(), atol=2e-2, rtol=2e-2), (out.float() - ref.float()).abs().max()


@needs_kernel
@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_cache_scales(kv_dtype):
    """k_scale joins the softmax scale and v_scale multiplies the output, as in the SDPA path."""
    q, k, v, kc, vc, meta = make_batch(DECODES, 8, 2, 32, torch.float32, seed=4, num_blocks=48)
    kc8, vc8 = kc.to(FP8[kv_dtype]), vc.to(FP8[kv_dtype])
    out, ref = decode_both(q, k, v, kc8, vc8, meta, 0.2, torch.tensor(0.03), torch.tensor(0.5))
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    meta.decode_kernel = "cpp"
    unscaled = torch_backend.attend(q, k, v, kc8, vc8, meta, 0.2, torch.tensor(1.0), torch.tensor(1.0))
    assert not torch.allclose(unscaled, out, atol=1e-3)


@needs_kernel
def test_reads_only_through_the_block_table():
    """Poisoning every block no table names must not change the result."""
    q, k, v, kc, vc, meta = make_batch(DECODES[:4], 4, 2, 16, torch.float32, seed=2, num_blocks=64)
    out, _ = decode_both(q, k, v, kc, vc, meta)
    used = {int(b) for i, n in enumerate(meta.context_lens) for b in meta.block_tables[i, : -(-n // 16)]}
    for b in range(kc.shape[0]):
        if b not in used:
            kc[b], vc[b] = float("nan"), float("nan")
    again = torch_backend.attend(q, k, v, kc, vc, meta, 0.25)
    assert torch.equal(again, out)


@needs_kernel
def test_bad_input_is_refused():
    q, k, v, kc, vc, meta = make_batch(DECODES[:2], 4, 2, 24, torch.float32, seed=1)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        cpu_kernels.paged_decode(q[:2], kc, vc, meta.block_tables, meta.seq_lens, 0.1)
    q, k, v, kc, vc, meta = make_batch(DECODES[:2], 4, 2, 16, torch.float32, seed=1)
    with pytest.raises(RuntimeError, match="one block table"):
        cpu_kernels.paged_decode(q[:2], kc, vc, meta.block_tables[:1], meta.seq_lens, 0.1)
    with pytest.raises(RuntimeError, match="outside the pool"):
        cpu_kernels.paged_decode(q[:2], kc, vc, meta.block_tables + kc.shape[0], meta.seq_lens, 0.1)
    with pytest.raises(RuntimeError, match="needs 1 to"):
        cpu_kernels.paged_decode(q[:2], kc, vc, meta.block_tables, meta.seq_lens * 0, 0.1)
    with pytest.raises(RuntimeError, match="needs 1 to"):
        cpu_kernels.paged_decode(q[:2], kc, vc, meta.block_tables[:, :1], meta.seq_lens + 100, 0.1)


@needs_kernel
def test_engine_greedy_tokens_equal_on_both_paths(tiny_model):
    prompts = [list(range(5, 5 + n)) for n in (1, 7, 16, 33, 90)]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    runs = {}
    for choice in ("sdpa", "cpp"):
        llm = LLM(tiny_model, cpu_attention=choice, kv_cache_memory=2**22)
        runs[choice] = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
        assert llm.runner.decode_attention.startswith("C++" if choice == "cpp" else "gather")
    assert runs["cpp"] == runs["sdpa"]


FALLBACK = """
import sys
from engine.llm import LLM
llm = LLM(sys.argv[1], kv_cache_memory=2**22)
print("PATH:", llm.runner.decode_attention)
print("LAYERS:", llm.runner.layer_kernels)
for flag in ("cpu_attention", "cpu_layers"):
    try:
        LLM(sys.argv[1], kv_cache_memory=2**22, **{flag: "cpp"})
    except RuntimeError as err:
        print("ERROR:", err)
"""


def test_no_compiler_falls_back_to_sdpa(tiny_model, tmp_path):
    """Where the kernels cannot be built, auto keeps gather + SDPA and torch's layers and says why; asking for
    cpp is an error."""
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    proc = subprocess.run([sys.executable, "-c", FALLBACK, str(tiny_model)], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PATH: gather + SDPA (C++ kernel unavailable" in proc.stdout
    assert "ERROR: cpu_attention='cpp' cannot be used: C++ kernel unavailable" in proc.stdout
    assert "LAYERS: torch (C++ kernel unavailable" in proc.stdout
    assert "ERROR: cpu_layers='cpp' cannot be used: C++ kernel unavailable" in proc.stdout


THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages here")
def test_kv_pool_is_backed_by_huge_pages():
    """The pool is madvised before its first touch: zeroing 64 MiB faults in ~32 huge pages, not 16,384 small ones."""
    import resource

    from engine.model_runner import huge_pages

    pool = torch.empty(16 * 2**20)
    assert huge_pages(pool)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    pool.zero_()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 16384 // 4
    assert not huge_pages(torch.empty(1000))  # smaller than one huge page: nothing to ask for


@needs_kernel
def test_a_lock_left_by_a_killed_build_is_cleared(tmp_path, monkeypatch):
    """A build lock older than any build (its process was killed) must not make every later engine wait.
    The build starts from this machine's compiled object (ninja then only links), so it takes seconds."""
    built = cpu_kernels.build_directory()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build = cpu_kernels.build_directory()
    shutil.copytree(built, build, ignore=shutil.ignore_patterns("*.so", "lock"))
    lock = build / "lock"
    lock.touch()
    old = time.time() - 2 * cpu_kernels.STALE_LOCK_SECONDS
    os.utime(lock, (old, old))
    code = "from engine.kernels import cpu_kernels as c; print(c.available(), c.status())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.stdout.startswith("True"), proc.stdout + proc.stderr[-2000:]
    assert (cpu_kernels.build_directory() / f"{cpu_kernels.build_directory().name}.so").exists()


@needs_kernel
@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump to read the built library")
def test_both_passes_prefetch_the_blocks_to_come():
    """The K and V passes of the float and bf16 caches ask for the blocks to come. Nothing else shows it: to GCC
    a helper that only prefetches has no effect, and a call to one it did not inline was deleted (results the
    same, the kernel 1.2x slower on a pool larger than the cache), hence their always_inline. A pass the compiler
    inlined into `decode` has no symbol of its own; then `decode` for that cache must prefetch."""
    build = cpu_kernels.build_directory()
    listing = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(build / f"{build.name}.so")],
                             capture_output=True, text=True, check=True).stdout
    functions, prefetching, name = set(), set(), ""
    for line in listing.splitlines():
        if line.endswith(">:"):
            name = line
            functions.add(name)
        elif "prefetch" in line:
            prefetching.add(name)
    for cache in ("float", "c10::BFloat16"):
        for function in (f"score_sequence<{cache}, float>", f"weigh_values<{cache}>"):
            owner = function if any(function in f for f in functions) else f"decode<{cache},"
            assert any(owner in f for f in prefetching), f"{owner} (for {function}): no prefetch instruction"


@pytest.mark.skipif(not cpu_kernels.has_amx(), reason="this CPU or build has no AMX-BF16 tiles")
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 2, 64), (14, 2, 64), (32, 4, 128), (16, 1, 32), (4, 4, 64)])
def test_amx_scores_match_the_vector_path(heads, kv_heads, dim):
    """bf16 q and cache: AMX tile products give the vector path's attention within bf16 rounding, at block
    edges and for 1 to 16 query heads per KV head."""
    q, k, v, kc, vc, meta = make_batch(DECODES, heads, kv_heads, dim, torch.bfloat16, seed=heads * dim, num_blocks=48)
    torch_backend.store_kv(k, v, kc, vc, meta.slot_mapping)
    args = (q, kc, vc, meta.block_tables, meta.seq_lens, dim**-0.5)
    tiles, vector = cpu_kernels.paged_decode(*args, amx=True), cpu_kernels.paged_decode(*args, amx=False)
    assert tiles.dtype == torch.bfloat16
    assert torch.allclose(tiles.float(), vector.float(), atol=2e-2, rtol=2e-2), (tiles.float() - vector.float()).abs().max()
    ref = torch_backend.attend(q, k, v, kc, vc, meta, dim**-0.5)
    assert torch.allclose(tiles.float(), ref.float(), atol=2e-2, rtol=2e-2)
