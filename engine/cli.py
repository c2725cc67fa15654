"""Command-line flags of the engine server (`python -m engine.server`, `llmbench serve`)."""

from __future__ import annotations

import asyncio
import logging

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--model", default=None, help="Local HF checkpoint folder (default: the bundled `small` model).")
@click.option("--served-model-name", default=None, help="Name clients use in 'model' (default: the folder).")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(1))
@click.option("--kv-cache-memory", default="512MiB", show_default=True,
              help="KV pool size: bytes, or with KiB/MiB/GiB. 'auto' sizes from --gpu-memory-utilization on CUDA.")
@click.option("--gpu-memory-utilization", default=0.9, show_default=True, type=click.FloatRange(0, 1, min_open=True))
@click.option("--max-num-seqs", default=256, show_default=True, type=click.IntRange(1))
@click.option("--max-num-batched-tokens", default=2048, show_default=True, type=click.IntRange(1))
@click.option("--max-model-len", default=None, type=click.IntRange(1))
@click.option("--enable-chunked-prefill/--no-enable-chunked-prefill", default=True, show_default=True)
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", default=True, show_default=True)
@click.option("--batching", type=click.Choice(["continuous", "static"]), default="continuous", show_default=True)
@click.option("--kv-layout", type=click.Choice(["paged", "contiguous"]), default="paged", show_default=True)
@click.option("--attention-backend", type=click.Choice(["auto", "torch", "triton"]), default="auto",
              show_default=True)
@click.option("--speculative-model", default=None,
              help="Draft checkpoint folder sharing the target's tokenizer, or 'ngram' for prompt lookup.")
@click.option("--num-speculative-tokens", default=0, show_default=True, type=click.IntRange(0, 128),
              help="k: tokens proposed per step.")
@click.option("--prompt-lookup-min", default=1, show_default=True, type=click.IntRange(1))
@click.option("--prompt-lookup-max", default=4, show_default=True, type=click.IntRange(1))
@click.option("--speculative-disable-by-batch-size", default=None, type=click.IntRange(1),
              help="No speculation in steps with more sequences than this.")
@click.option("--quantization", type=click.Choice(["int8", "int4", "awq", "gptq"]), default=None,
              help="int8/int4: quantize at load; awq/gptq: a pre-quantized checkpoint (detected from config.json).")
@click.option("--quantization-group-size", default=128, show_default=True, type=click.Choice(["32", "64", "128", "256"]),
              callback=lambda _c, _p, v: int(v))
@click.option("--quantization-kernel", type=click.Choice(["auto", "packed", "dense"]), default="auto", show_default=True,
              help="auto: time torch's packed int kernels against dequantized fp matmul at load, keep the faster.")
@click.option("--cpu-linear", type=click.Choice(["auto", "torch", "onednn"]), default="auto", show_default=True,
              help="auto: fp32 linears through oneDNN with pre-packed weights when that is faster on this CPU.")
@click.option("--cpu-attention", type=click.Choice(["auto", "sdpa", "cpp"]), default="auto", show_default=True,
              help="CPU decode attention: the C++ paged kernel (built on first use) or gather + SDPA.")
@click.option("--kv-cache-dtype", type=click.Choice(["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]), default="auto",
              show_default=True)
@click.option("--k-scale-constant", default=200.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="fp8 KV without checkpoint scales: k_scale = amax|k| / this, on the first forward.")
@click.option("--v-scale-constant", default=100.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--enforce-eager", is_flag=True, help="CUDA: do not capture decode steps in CUDA graphs.")
@click.option("--seed", default=0, show_default=True)
@click.option("--api-key", default=None, envvar="LLMBENCH_API_KEY", help="Require 'Authorization: Bearer KEY'.")
@click.option("--max-waiting", default=1024, show_default=True, type=click.IntRange(1),
              help="Requests allowed to wait; beyond it the server answers 503 with Retry-After.")
@click.option("--shutdown-grace", default=30.0, show_default=True, help="Seconds in-flight requests get on SIGTERM.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
def server_command(host, port, model, served_model_name, kv_cache_memory, api_key, max_waiting, shutdown_grace,
                   log_level, **engine_flags) -> None:
    """Serve the bundled engine over an OpenAI-compatible HTTP API."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engine.llm import LLM
    from engine.loader import CheckpointError
    from engine.server import build_app, serve

    try:
        llm = LLM(model, kv_cache_memory=parse_bytes(kv_cache_memory), **engine_flags)
    except (CheckpointError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    app = build_app(llm, served_model_name, api_key, max_waiting)
    asyncio.run(serve(app, host, port, shutdown_grace))


def parse_bytes(text: str) -> int | None:
    if text == "auto":
        return None
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    low = text.strip().lower()
    for unit, factor in units.items():
        if low.endswith(unit):
            try:
                return int(float(low[: -len(unit)]) * factor)
            except ValueError:
                break
    try:
        return int(low)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size (e.g. 512MiB, 2GiB, 1000000)") from None
