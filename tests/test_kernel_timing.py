"""The load-time choice between oneDNN and F.linear weighs every batch size the same (a made-up clock, so the
test says what is decided, not how fast this machine is)."""

import torch
from torch import nn

from engine.kernels import kernel_timing
from engine.layers import onednn_linear
from engine.layers.onednn_linear import OneDNNLinear, pack_model

# oneDNN 4x and 2x faster at 1 and 16 rows, level at 64, 15 % slower at 256: summed, 59 against 58 ms says F.linear
ONEDNN_MS = {1: 1.0, 16: 2.0, 64: 10.0, 256: 46.0}
TORCH_MS = {1: 4.0, 16: 4.0, 64: 10.0, 256: 40.0}


def _clock(onednn_ms: dict, torch_ms: dict):
    return lambda fn, x: (onednn_ms if isinstance(fn, OneDNNLinear) else torch_ms)[len(x)] / 1e3


def test_a_path_much_faster_on_small_batches_is_packed_though_the_summed_time_says_otherwise(monkeypatch):
    monkeypatch.setattr(kernel_timing, "median_seconds", _clock(ONEDNN_MS, TORCH_MS))
    onednn_linear._DECIDED.clear()
    model = nn.Sequential(nn.Linear(32, 96, bias=False))
    why = pack_model(model)
    assert why.startswith("oneDNN packed") and "0.62x" in why and "1 / 16 / 64 / 256 rows: 0.25 / 0.50" in why
    assert isinstance(model[0], OneDNNLinear)

    monkeypatch.setattr(kernel_timing, "median_seconds", _clock(TORCH_MS, ONEDNN_MS))  # the other way round
    onednn_linear._DECIDED.clear()
    model = nn.Sequential(nn.Linear(32, 96, bias=False))
    assert pack_model(model).startswith("F.linear") and type(model[0]) is nn.Linear
    onednn_linear._DECIDED.clear()


def test_forcing_onednn_where_it_cannot_pack_keeps_f_linear(monkeypatch):
    """`--cpu-linear onednn --dtype bfloat16` on an AVX2 EPYC: oneDNN refuses to pack bf16 there; the engine
    must start on F.linear and say why, not crash at load (or leave half the layers packed)."""
    def refuse(weight, bias):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    onednn_linear._DECIDED.clear()
    model = nn.Sequential(nn.Linear(32, 96, bias=False), nn.Linear(96, 32, bias=False))
    why = pack_model(model, force=True)
    assert why.startswith("F.linear (oneDNN cannot pack") and "avx512bw" in why
    assert all(type(layer) is nn.Linear for layer in model)
    onednn_linear._DECIDED.clear()


def test_time_ratios_is_the_geometric_mean_of_per_input_ratios(monkeypatch):
    monkeypatch.setattr(kernel_timing, "median_seconds", lambda fn, x: fn(x))
    mean, ratios = kernel_timing.time_ratios(lambda x: 1.0 * len(x), lambda x: 4.0 if len(x) == 1 else 1.0,
                                             [torch.zeros(1, 2), torch.zeros(4, 2)])
    assert ratios == [0.25, 4.0] and abs(mean - 1.0) < 1e-12


def test_a_hopeless_candidate_is_called_once_not_timed_eight_times(monkeypatch):
    """Emulated bf16 tiles took 3.4 s a call on an AVX2 EPYC: eight calls a length made start-up 35 s. Two calls
    each 4x the baseline and 0.25 s over it are the candidate's time; one only a little slower is timed in full."""
    import time

    calls = []

    def slow(x):
        calls.append(len(x))
        time.sleep(0.3 if len(x) == 2 else 0.0)

    monkeypatch.setattr(kernel_timing, "median_seconds", lambda fn, x: 0.01 if fn is not slow else (slow(x), 0.02)[1])
    _, ratios = kernel_timing.time_ratios(slow, lambda x: x, [torch.zeros(2, 1), torch.zeros(1, 1)])
    assert calls == [2, 2, 1, 1] and ratios[0] > 25 and ratios[1] == 2.0


def test_a_slow_first_call_alone_does_not_make_a_candidate_hopeless(monkeypatch):
    """A first call that pays a one-time cost (a kernel compiled for the shape) and then runs fast is timed in full:
    one such call sent a Zen 4's whole bf16 run to the 10 % slower prefill path."""
    import time

    calls = []

    def compiles_once(x):
        calls.append(len(x))
        time.sleep(0.3 if len(calls) == 1 else 0.0)

    monkeypatch.setattr(kernel_timing, "median_seconds",
                        lambda fn, x: 0.01 if fn is not compiles_once else (compiles_once(x), 0.005)[1])
    _, ratios = kernel_timing.time_ratios(compiles_once, lambda x: x, [torch.zeros(2, 1)])
    assert calls == [2, 2, 2] and ratios == [0.5]


def test_the_quantized_path_is_chosen_by_per_size_ratios_too(monkeypatch):
    """Packed int8 3x faster at 1-16 rows, 60% and 20% slower at 64 and 256: summed over 1 + 64 rows (the old rule,
    1.8 against 1.6 ms) dense would win; by per-size ratios packed does (0.68x)."""
    from engine.layers import quant_linear

    packed_ms = {1: 0.2, 16: 0.3, 64: 1.6, 256: 4.8}
    dense_ms = {1: 0.6, 16: 0.9, 64: 1.0, 256: 4.0}
    monkeypatch.setattr(kernel_timing, "median_seconds",
                        lambda fn, x: (packed_ms if fn.path == "packed" else dense_ms)[len(x)] / 1e3)
    q, s = quant_linear.quantize_int8(torch.randn(96, 64))
    quant_linear._DECIDED.clear()
    path, why = quant_linear.choose_path(q, None, s, torch.float32, torch.device("cpu"))
    quant_linear._DECIDED.clear()
    assert path == "packed" and "0.68x" in why and "0.33 / 0.33 / 1.60 / 1.20" in why
