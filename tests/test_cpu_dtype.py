"""`--dtype auto` follows the machine: bf16 only where the CPU has bf16 instructions and it times faster on the
model's own shape, fp32 elsewhere; the choice and why are in /version."""

import torch

from engine.kernels import kernel_timing
from engine.layers import cpu_dtype, onednn_linear


def test_no_bf16_instructions_means_float32(monkeypatch):
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: {"avx2", "fma"})
    chosen, why = cpu_dtype.resolve("auto", torch.device("cpu"), 512, 1408)
    assert chosen == "float32" and "no bf16 instructions" in why


def test_the_choice_is_timed_on_the_models_shape(monkeypatch):
    """With the flags, whichever measures faster by the margin wins: a made-up clock makes bf16 win, then lose."""
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: {"amx_bf16"})
    for bf16_seconds, expected in ((0.1, "bfloat16"), (0.95, "float32")):
        cpu_dtype._DECIDED.clear()
        onednn_linear._DECIDED.clear()
        monkeypatch.setattr(kernel_timing, "median_seconds",
                            lambda fn, x, s=bf16_seconds: s if x.dtype == torch.bfloat16 else 1.0)
        chosen, why = cpu_dtype.resolve("auto", torch.device("cpu"), 512, 1408)
        assert chosen == expected and "amx_bf16" in why and "[1408x512]" in why
    cpu_dtype._DECIDED.clear()
    onednn_linear._DECIDED.clear()


def test_every_batch_size_weighs_the_same_and_bf16_is_timed_on_the_path_it_would_take(monkeypatch):
    """bf16 5x faster at 1-16 rows and 10% slower at 256: summed over 1 + 64 + 256 rows (the old rule, 43.2 against
    51 ms) it is inside the 1.2x margin and loses; by per-size ratios (0.43x) it wins. Its time is read through oneDNN when oneDNN is the faster
    bf16 path, as the engine then runs it: F.linear's bf16 time here is 10x worse and must not count."""
    bf16_ms = {1: 2.2, 16: 2.2, 64: 8.0, 256: 33.0}
    fp32_ms = {1: 11.0, 16: 11.0, 64: 10.0, 256: 30.0}

    def clock(fn, x):
        if x.dtype == torch.float32:
            return fp32_ms[len(x)] / 1e3
        return bf16_ms[len(x)] / (1e3 if isinstance(fn, onednn_linear.OneDNNLinear) else 1e2)

    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(kernel_timing, "median_seconds", clock)
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", lambda w, b: w)  # an AVX2 CPU cannot pack bf16
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda x, w, b, *_: torch.nn.functional.linear(x, w, b))
    cpu_dtype._DECIDED.clear()
    onednn_linear._DECIDED.clear()
    chosen, why = cpu_dtype.resolve("auto", torch.device("cpu"), 512, 1408)
    assert chosen == "bfloat16" and "0.43x" in why and "1 / 16 / 64 / 256 rows: 0.20 / 0.20 / 0.80 / 1.10" in why
    cpu_dtype._DECIDED.clear()
    onednn_linear._DECIDED.clear()


def test_narrow_models_stay_float32(monkeypatch):
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: {"amx_bf16"})
    assert cpu_dtype.resolve("auto", torch.device("cpu"), 64, 192)[0] == "float32"  # the tiny model


def test_asked_quantized_and_cuda():
    assert cpu_dtype.resolve("float32", torch.device("cpu"), 512, 1408) == ("float32", "as asked (--dtype)")
    assert cpu_dtype.resolve("auto", torch.device("cpu"), 512, 1408, quantized=True)[0] == "float32"
    assert cpu_dtype.resolve("auto", torch.device("cuda"), 512, 1408)[0] == "bfloat16"


def test_version_says_what_was_chosen(tiny_model, serve_engine):
    import requests

    from engine.llm import LLM

    server = serve_engine(LLM(tiny_model, kv_cache_memory=16 * 2**20))
    config = requests.get(server.url + "/version", timeout=10).json()["config"]
    assert config["dtype"] in ("float32", "bfloat16") and config["dtype_choice"].startswith("auto")
