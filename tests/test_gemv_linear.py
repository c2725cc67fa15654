"""The few-row linear kernel (engine/kernels/cpu_gemv.cpp): the same products as F.linear at any shape, only
up to the row count the load-time timing chose, and only where its copy of the weights is affordable."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.kernels import cpu_kernels, kernel_timing
from engine.layers import gemv_linear
from engine.layers.gemv_linear import GemvLinear
from engine.layers.onednn_linear import pack_model

pytestmark = pytest.mark.skipif(not cpu_kernels.available() or not gemv_linear.width(torch.float32),
                                reason="no C++ few-row kernel on this machine")
needs_bf16 = pytest.mark.skipif(not gemv_linear.width(torch.bfloat16), reason="no AVX512-BF16 here")


class Counting(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear, self.calls = linear, 0

    def forward(self, x):
        self.calls += 1
        return self.linear(x)


@pytest.mark.parametrize("out_features,in_features", [(96, 32), (100, 37), (1, 8), (320, 512)])
def test_float32_products_match_f_linear_at_every_row_count(out_features, in_features):
    torch.manual_seed(0)
    linear = nn.Linear(in_features, out_features)
    layer = GemvLinear(linear, linear.weight, linear.bias, rows=16)
    for rows in (1, 2, 3, 4, 5, 7, 8, 9, 16):
        x = torch.randn(rows, in_features)
        torch.testing.assert_close(layer(x), F.linear(x, linear.weight, linear.bias), rtol=1e-4, atol=1e-4)


@needs_bf16
@pytest.mark.parametrize("out_features,in_features", [(96, 32), (100, 38), (2816, 512)])
def test_bf16_products_are_f_linears_within_one_rounding(out_features, in_features):
    """Both accumulate in fp32 and round once to bf16; the sums' order differs, so a result may sit one bf16 step
    away."""
    torch.manual_seed(0)
    linear = nn.Linear(in_features, out_features, bias=False).bfloat16()
    layer = GemvLinear(linear, linear.weight, None, rows=8)
    for rows in (1, 3, 4, 6, 8):
        x = torch.randn(rows, in_features, dtype=torch.bfloat16)
        got, exact = layer(x), x.float() @ linear.weight.float().T
        assert got.dtype == torch.bfloat16 and got.shape == (rows, out_features)
        assert ((got.float() - exact).abs() <= exact.abs() * 2**-7 + 1e-3).all()


def test_rows_above_the_limit_take_the_layers_own_path_and_batched_inputs_keep_their_shape():
    linear = nn.Linear(32, 96, bias=False)
    inner = Counting(linear)
    layer = GemvLinear(inner, linear.weight, None, rows=4)
    assert layer(torch.randn(2, 2, 32)).shape == (2, 2, 96) and inner.calls == 0
    x = torch.randn(5, 32)
    torch.testing.assert_close(layer(x), linear(x))
    assert inner.calls == 1


def _clock(gemv_ms: dict, own_ms: dict):
    """A made-up clock: the few-row kernel's step (called first by rows_limit's timing) against the own path's."""
    def seconds(fn, x):
        return (gemv_ms if getattr(fn, "__name__", "") == "gemv_step" else own_ms).get(len(x), 1.0) / 1e3
    return seconds


@pytest.fixture(autouse=True)
def _fresh_timings(monkeypatch, tmp_path):
    monkeypatch.setattr(gemv_linear, "CPU_CACHES", tmp_path / "no-caches")  # these layers are tiny: no cache rule
    gemv_linear._DECIDED.clear()
    yield
    gemv_linear._DECIDED.clear()


def test_the_limit_is_the_last_row_count_before_the_kernel_first_loses(monkeypatch):
    own = {rows: 1.0 for rows in gemv_linear.ROWS}
    gemv = {1: 0.5, 2: 0.5, 4: 0.6, 8: 0.9, 16: 1.1, 32: 0.9, 64: 0.95}  # loses at 16, wins again after: 8
    monkeypatch.setattr(kernel_timing, "median_seconds", _clock(gemv, own))
    monkeypatch.setattr(kernel_timing, "_one_call", _clock(gemv, own))
    model = nn.Sequential(nn.Linear(32, 96, bias=False), nn.Linear(96, 32, bias=False))
    why = pack_model(model, few_rows="auto")
    assert "steps of <= 8 rows: C++ GEMV" in why and "0.50 / 0.50 / 0.60 / 0.90 / 1.10x" in why
    assert "at 1 / 2 / 4 / 8 / 16 rows" in why  # no count above the first loss is timed
    assert all(isinstance(layer, GemvLinear) and layer.rows == 8 for layer in model)

    model = nn.Sequential(nn.Linear(32, 96, bias=False), nn.Linear(96, 32, bias=False))
    monkeypatch.setattr(kernel_timing, "median_seconds", _clock(own, own))  # a second engine: the same answer
    assert "steps of <= 8 rows: C++ GEMV" in pack_model(model, few_rows="auto")
    gemv_linear._DECIDED.clear()

    monkeypatch.setattr(kernel_timing, "median_seconds", _clock(own, gemv))  # slower at one row: nowhere
    monkeypatch.setattr(kernel_timing, "_one_call", _clock(own, gemv))
    model = nn.Sequential(nn.Linear(32, 96, bias=False))
    assert "no few-row kernel (C++ GEMV takes 2.00" in pack_model(model, few_rows="auto")
    assert not isinstance(model[0], GemvLinear)


def test_no_second_copy_where_the_weights_are_a_large_share_of_memory(monkeypatch):
    monkeypatch.setattr(gemv_linear, "MEMORY_SHARE", 1e-9)
    model = nn.Sequential(nn.Linear(32, 96, bias=False))
    why = pack_model(model, few_rows="auto")
    assert "no few-row kernel: its copy of the weights would double" in why and "MiB of linear weights" in why
    assert not isinstance(model[0], GemvLinear)


def test_weights_that_fit_the_last_level_cache_keep_their_own_path(monkeypatch, tmp_path):
    (tmp_path / "index0").mkdir()
    (tmp_path / "index0" / "size").write_text("48K\n")
    (tmp_path / "index3").mkdir()
    (tmp_path / "index3" / "size").write_text("32768K\n")
    monkeypatch.setattr(gemv_linear, "CPU_CACHES", tmp_path)
    assert gemv_linear.last_level_cache() == 32 * 2**20
    model = nn.Sequential(nn.Linear(32, 96, bias=False))
    why = pack_model(model, few_rows="auto")
    assert "fit the 32 MiB last-level cache" in why and not isinstance(model[0], GemvLinear)
    assert isinstance(model[0], nn.Linear)
    model = nn.Sequential(nn.Linear(32, 96, bias=False))
    assert "C++ GEMV (as asked" in pack_model(model, few_rows="on") and isinstance(model[0], GemvLinear)


def test_greedy_decoding_is_the_same_through_the_kernel(tiny_model):
    from engine.config import SamplingParams
    from engine.llm import LLM

    prompts = [[5 + i, 17, 300 + i, 42] * (2 + i) for i in range(5)]
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    runs = {}
    for mode in ("off", "on"):
        llm = LLM(tiny_model, kv_cache_memory=8 * 2**20, cpu_linear="onednn", cpu_gemv=mode)
        runs[mode] = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
        assert ("C++ GEMV" in llm.runner.linear_path) == (mode == "on"), llm.runner.linear_path
    assert runs["on"] == runs["off"]
