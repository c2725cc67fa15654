"""The C++ causal softmax and greedy argmax against the torch ops they replace, and where the engine takes them."""

from __future__ import annotations

import pytest
import torch

from engine import sampler
from engine.kernels import cpu_kernels

pytestmark = pytest.mark.skipif(not cpu_kernels.available(), reason=f"C++ kernels not built: {cpu_kernels.status()}")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_is_the_first_index_of_each_rows_maximum(dtype):
    torch.manual_seed(0)
    x = torch.randn(37, 1000).to(dtype)
    x[0, [3, 700]] = 50.0  # a tie in different chunks: the first wins
    x[1, [130, 131]] = 50.0  # and in one chunk
    x[2] = float("-inf")  # every token banned
    x[3, :999] = float("-inf")  # all but the last, in a short final chunk
    x[4] = 7.0
    assert torch.equal(cpu_kernels.argmax_last(x), x.max(dim=-1).indices)
    assert cpu_kernels.argmax_last(x)[:5].tolist() == [3, 130, 0, 999, 0]
    assert torch.equal(cpu_kernels.argmax_last(x[:, ::2]), x[:, ::2].max(dim=-1).indices)  # strided: copied
    with pytest.raises(RuntimeError, match="cols > 0"):
        cpu_kernels.argmax_last(x[:, :0])


def test_greedy_sampling_takes_the_kernel_once_the_library_is_loaded(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu_kernels, "argmax_last", lambda x: calls.append(x.shape) or x.max(dim=-1).indices)
    logits = torch.randn(4, 50)
    monkeypatch.setattr(cpu_kernels, "loaded", lambda: False)
    first = sampler.greedy(logits)
    monkeypatch.setattr(cpu_kernels, "loaded", lambda: True)
    assert torch.equal(sampler.greedy(logits), first) and calls == [(4, 50)]


def _torch_causal_softmax(scores: torch.Tensor, first: int) -> torch.Tensor:
    rows, keys = scores.shape[1:]
    visible = torch.arange(keys)[None, :] <= first + torch.arange(rows)[:, None]
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "keys", "first"), [(16, 16, 0), (40, 300, 260), (128, 700, 100), (5, 9, 7)])
def test_causal_softmax_matches_masked_softmax(dtype, rows, keys, first):
    """(5, 9, 7): the last rows see every key. Half precision: one rounding, as torch's softmax, but for exp."""
    torch.manual_seed(rows)
    scores = (torch.randn(6, rows, keys) * 3).to(dtype)
    ref = _torch_causal_softmax(scores, first)
    cpu_kernels.causal_softmax_(scores, first)
    tol = 1e-6 if dtype == torch.float32 else torch.finfo(dtype).eps
    assert torch.allclose(scores.float(), ref.float(), atol=tol, rtol=tol), (scores.float() - ref.float()).abs().max()
    assert (scores.float().sum(-1) - 1).abs().max() < (1e-5 if dtype == torch.float32 else 4e-2)
    assert not scores[:, 0, first + 1:].any()


def test_causal_softmax_refuses_what_it_cannot_read():
    with pytest.raises(RuntimeError, match="contiguous"):
        cpu_kernels.causal_softmax_(torch.randn(2, 8, 8).transpose(1, 2), 0)
    with pytest.raises(RuntimeError, match="first >= 0"):
        cpu_kernels.causal_softmax_(torch.randn(2, 8, 8), -1)
