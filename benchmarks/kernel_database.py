"""What AIConfigurator's kernel database says against the planner's roofline: the tail term `expert kernels` (an
MoE layer's fused expert kernel against the dense GEMMs of the same bytes and FLOPs; `llmbench.plan.engines.KERNELS`)
and `prefill attention` (a prompt's causal attention kernel against the same GEMMs: measured, tried and not kept,
benchmarks/README.md), and `fp8 GEMMs` (per-tensor FP8 GEMMs against the bf16 ones, weights of 64 MB or more,
each bound fitted apart: a_bytes and a_flops of FP8 over bf16's, c_fp8 - c_bf16 a GEMM), and `weight reads` (the
share of the HBM bandwidth at which GEMMs of decode shape, m <= 16, read weights of 64 MB or more, per dtype:
latency = bytes / (f x bandwidth) + c), and `block FP8` (the same two for FP8 weights scaled per 128 x 128 block,
and the MoE kernels fitted per expert dtype by bound: bytes and FLOPs factors against the dense GEMMs' a), and the
`knee` (each bound of the streamed GEMMs at its own measured efficiency, then those near their ridge put to the
p-norm of the two for p from 1, the sum, to infinity, the max).
`--distribution` times the MoE kernels under skewed routing instead (AIConfigurator's own pricing: power law 1.2,
DeepSeek's 1.01); the terms use balanced routing.

    pip install pyarrow   # to read the database's parquet files; not a dependency of llmbench
    python benchmarks/kernel_database.py --aic PATH/TO/aiconfigurator [--gpu h100_sxm] [--distribution balanced]

Reads AIConfigurator's kernel database (github.com/ai-dynamo/aiconfigurator, `systems/data/<gpu>/{moe,gemm,
attention}/<engine>/<version>/*_perf.parquet`: latencies its collectors timed on the GPU under CUDA-graph replay,
in ms) and puts every kernel to the planner's roofline with the GPU family's prior (MFU, MBU, the two bounds
summed, as `RooflineModel` does): a MoE op reads the experts its tokens hit, 1 - (1 - k/E)^T of them, and does
2·T·k·3·h·i/TP FLOPs; a dense GEMM reads n·k weights and does 2·m·n·k; a prompt's attention (batch B, n tokens,
H query and G KV heads of d) writes B·n·2·G·d KV values and does 4·H·d·B·n²/2 FLOPs (causal pairs). Each kind is
fitted as latency = a x roofline + c (least squares on relative error): the MoE op with the engine's default
kernels (balanced routing, no expert parallelism, MoE TP up to 8, bf16/fp8/fp8-block, gated FFNs), the dense GEMMs (m up to
16,384, n and k from 512) in the same dtypes, prompt attention with bf16 KV, no sliding window, head_dim 64/128,
prompts from 16 tokens and a roofline of 1 ms or more (where a fixed cost is a small part). `expert kernels` is
a_moe / a_dense on the routed experts' roofline and c_moe - 2 c_dense a MoE layer per step (the two FFN GEMMs a
dense layer would have launched); `prefill attention` would be a_attention / a_dense on the prompt attention's
FLOPs.
Nothing here is fitted on serving results.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
import numpy as np
import pandas as pd

from llmbench.plan.gpus import gpu as catalog_gpu
from llmbench.plan.roofline import FAMILIES

ENGINES = {"vllm": ("0.24.0", "triton|vllm_fused_moe"), "sglang": ("0.5.14", "sglang_fused_moe_triton"),
           "trtllm": ("1.3.0rc20", "moe_torch_flow")}  # version, MoE kernel
PROMPT_ROOFLINE_MS = 1.0
GPUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200", "a100_sxm": "A100-80GB"}
BYTES = {"bfloat16": 2, "fp8": 1, "fp8_block": 1}
# `fp8 GEMMs` is fitted on GEMMs whose weights exceed the H100's 50 MB L2: a serving step streams every layer's
# weights from HBM, while a micro-benchmark repeating one small GEMM finds its weights in L2
STREAMED_BYTES = 64e6
FP8_KINDS = ("fp8", "fp8_block")  # per-tensor scales; 128 x 128 weight blocks (DeepSeek's, Qwen3's -FP8)
DECODE_ROWS = 16  # `weight reads`: GEMMs of up to this many rows spend a few per cent of their time on FLOPs
KNEE_PS = (1.0, 1.5, 2.0, 3.0, math.inf)  # `knee`: how two bounds meet, from their sum to their max
SKEWED = "power_law_1.2"  # the routing every table timed (AIConfigurator prices MoE models with it)
RIDGE = 2.0  # `knee`: GEMMs whose two bounds are within this factor of each other


def non_gated(m: pd.DataFrame) -> pd.Series:
    """Nemotron-3's MoE shapes: a non-gated FFN (up and down, ReLU²: two matrices, not three), which every
    engine's table holds under its gated kernels' names; the planner's MoE models are all gated. They are the
    shapes TensorRT-LLM's table times with its `nongated` kernels (30B-A3B: hidden 2,688, 1,856 a expert, 6 of
    128) and the 22-of-512 routings of the larger Nemotron-3 models."""
    return (m.kernel_source.str.contains("nongated") | (m.topk == 22)
            | ((m.hidden_size == 2688) & (m.inter_size == 1856) & (m.num_experts == 128)))


def relative_fit(latency: np.ndarray, *times: np.ndarray) -> tuple[float, ...]:
    """latency ≈ Σ a_i·times_i + c, least squares on the relative error; (a_1, ..., c, median |relative error|)."""
    design = np.vstack([t / latency for t in times] + [1 / latency]).T
    coef, *_ = np.linalg.lstsq(design, np.ones_like(latency), rcond=None)
    modelled = sum(a * t for a, t in zip(coef[:-1], times, strict=True)) + coef[-1]
    return (*map(float, coef), float(np.median(np.abs(modelled / latency - 1))))


def fit(roofline: np.ndarray, latency: np.ndarray) -> tuple[float, float, float]:
    """latency ≈ a·roofline + c; (a, c, median |relative error|)."""
    return relative_fit(latency, roofline)


def bounds_fit(bytes_time: np.ndarray, flops_time: np.ndarray, latency: np.ndarray
               ) -> tuple[float, float, float, float]:
    """latency ≈ a_bytes·bytes_time + a_flops·flops_time + c; (a_bytes, a_flops, c, median |relative error|)."""
    return relative_fit(latency, bytes_time, flops_time)


def weights(gemms: pd.DataFrame) -> pd.Series:
    """Each GEMM's weight bytes (n·k in its dtype)."""
    return gemms.n * gemms.k * gemms.gemm_dtype.map(BYTES)


def by_bound(gemms: pd.DataFrame, roofline) -> tuple[float, float, float, float]:
    """`bounds_fit` of GEMMs on their roofline's two bounds, the weights' read and the FLOPs."""
    read, flops = weights(gemms), 2 * gemms.m * gemms.n * gemms.k
    return bounds_fit(roofline(read, 0 * flops, gemms.gemm_dtype), roofline(0 * read, flops, gemms.gemm_dtype),
                      gemms.latency.to_numpy())


def weight_reads(gemms: pd.DataFrame, bandwidth: float) -> tuple[float, float, float]:
    """`weight reads`: decode-shaped GEMMs that stream their weights from HBM fitted as latency = bytes / (f x
    bandwidth) + c; (f, c in seconds, median |relative error|)."""
    read = weights(gemms)
    keep = (gemms.m <= DECODE_ROWS) & (read >= STREAMED_BYTES)
    a, c, err = relative_fit(gemms.latency[keep].to_numpy() * 1e-3, read[keep].to_numpy() / bandwidth)
    return 1 / a, c, err


def knee_errors(gemms: pd.DataFrame, bandwidth: float, peak: float) -> tuple[float, float, float, dict]:
    """`knee` on GEMMs whose weights stream from HBM, each bound at its own measured efficiency: the reads fitted on
    decode shapes (latency = bytes / (f x bandwidth) + c), the FLOPs on GEMMs four times past their ridge (latency
    = FLOPs / (e x peak) + c'); the GEMMs within RIDGE of their ridge then put to c + the p-norm of the two;
    (f, c in seconds, e, {p: median signed relative error})."""
    g = gemms[weights(gemms) >= STREAMED_BYTES]
    read = ((weights(g) + g.m * g.k * g.gemm_dtype.map(BYTES) + 2 * g.m * g.n) / bandwidth).to_numpy()
    flops = (2 * g.m * g.n * g.k / peak).to_numpy()
    latency = g.latency.to_numpy() * 1e-3
    slow, fast = (g.m <= DECODE_ROWS).to_numpy(), flops > 4 * read
    a_read, c, _ = relative_fit(latency[slow], read[slow])
    a_flops, _, _ = relative_fit(latency[fast], flops[fast])
    near = (flops > read / RIDGE) & (flops < read * RIDGE)
    b, f = a_read * read[near], a_flops * flops[near]
    errors = {p: float(np.median((c + (np.maximum(b, f) if math.isinf(p) else (b**p + f**p) ** (1 / p)))
                                 / latency[near] - 1)) for p in KNEE_PS}
    return 1 / a_read, c, 1 / a_flops, errors


@click.command()
@click.option("--aic", "root", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A checkout of ai-dynamo/aiconfigurator.")
@click.option("--gpu", "gpu_dir", default="h100_sxm", type=click.Choice(sorted(GPUS)), show_default=True)
@click.option("--version", "versions", multiple=True, metavar="ENGINE=VERSION",
              help="Another collected version than the default (e.g. vllm=0.14.0 for the A100's).")
@click.option("--distribution", default="balanced", show_default=True,
              type=click.Choice(["balanced", "power_law_1.2", "power_law_1.01"]),
              help="The expert routing the MoE kernels were timed under (AIConfigurator prices MoE models with "
                   "power_law_1.2, DeepSeek's with power_law_1.01).")
def main(root: Path, gpu_dir: str, versions: tuple[str, ...], distribution: str) -> None:
    g = catalog_gpu(GPUS[gpu_dir])
    eff = FAMILIES[g.family]
    peak = {"bfloat16": g.bf16_flops, "fp8": g.fp8_flops or g.bf16_flops, "fp8_block": g.fp8_flops or g.bf16_flops}

    def roofline(bytes_: pd.Series, flops: pd.Series, dtype: pd.Series) -> np.ndarray:
        return (bytes_ / (eff.mbu * g.bandwidth) + flops / (eff.mfu * dtype.map(peak))).to_numpy() * 1e3

    data = next(root.rglob(f"systems/data/{gpu_dir}"), None)
    if data is None:
        raise click.ClickException(f"{root}: no systems/data/{gpu_dir} folder (is it an aiconfigurator checkout?)")
    click.echo(f"{g.name}: MFU {eff.mfu}, MBU {eff.mbu} ({eff.source}); {data}")
    chosen = dict(v.split("=", 1) for v in versions)
    factors: dict[str, dict[str, float]] = {}
    for engine, (version, kernel) in ENGINES.items():
        version = chosen.get(engine, version)
        moe_file, gemm_file = (data / kind / engine / version / f"{kind}_perf.parquet" for kind in ("moe", "gemm"))
        prompt_file = data / "attention" / engine / version / "context_attention_perf.parquet"
        if not moe_file.exists() or not gemm_file.exists():
            click.echo(f"{engine} {version}: not in the database for {gpu_dir}")
            continue
        d = pd.read_parquet(gemm_file)
        d = d[d.gemm_dtype.isin(list(BYTES)) & (d.m <= 16384) & (d.n >= 512) & (d.k >= 512)]
        dense_roof = roofline(weights(d), 2 * d.m * d.n * d.k, d.gemm_dtype)
        ad, cd, errd = fit(dense_roof, d.latency.to_numpy())
        click.echo(f"{engine} {version}: dense {len(d):,} GEMMs a {ad:.3f} c {cd * 1e3:.1f} µs ({errd:.1%})")
        streamed = d[weights(d) >= STREAMED_BYTES]
        bb, fb, cb, _ = by_bound(streamed[streamed.gemm_dtype == "bfloat16"], roofline)
        for t in FP8_KINDS:
            if not (streamed.gemm_dtype == t).any():
                continue
            b8, f8, c8, err8 = by_bound(streamed[streamed.gemm_dtype == t], roofline)
            click.echo(f"  {t} GEMMs: {(streamed.gemm_dtype == t).sum():,} a_bytes {b8:.3f} a_flops {f8:.3f} c "
                       f"{c8 * 1e3:.1f} µs ({err8:.1%}), bf16 {bb:.3f} {fb:.3f} {cb * 1e3:.1f} µs -> bytes "
                       f"x{b8 / bb:.2f}, FLOPs x{f8 / fb:.2f}, {(c8 - cb) * 1e3:.1f} µs a GEMM")
        for t in ("bfloat16", *FP8_KINDS):
            if (d.gemm_dtype == t).any():
                f, c, err = weight_reads(d[d.gemm_dtype == t], g.bandwidth)
                click.echo(f"  weight reads, {t}: {f:.3f} of the bandwidth, {c * 1e6:.1f} µs a GEMM ({err:.1%})")
                f, c, e, errors = knee_errors(d[d.gemm_dtype == t], g.bandwidth, peak[t])
                click.echo(f"  knee, {t}: reads at {f:.2f} of the bandwidth + {c * 1e6:.1f} µs, FLOPs at {e:.2f} of the "
                           "peak; within 2x of the ridge, median error with p = "
                           + ", ".join(f"{p:g}: {x:+.0%}" for p, x in errors.items()))
        if prompt_file.exists():
            p = pd.read_parquet(prompt_file)
            window = p.window_size if "window_size" in p else 0  # older collections have no sliding windows
            p = p[(window == 0) & (p.kv_cache_dtype == "bfloat16") & p.head_dim.isin([64, 128]) & (p.isl >= 16)]
            n, bf16 = p.isl, pd.Series("bfloat16", index=p.index)
            roof = roofline(p.batch_size * n * 2 * p.num_key_value_heads * p.head_dim * 2,
                            4 * p.num_heads * p.head_dim * p.batch_size * n * n / 2, bf16)
            big = roof >= PROMPT_ROOFLINE_MS
            a, c, err = fit(roof[big], p.latency.to_numpy()[big])
            click.echo(f"  prefill attention: {big.sum():,} kernels a {a:.3f} c {c * 1e3:.1f} µs ({err:.1%}) -> "
                       f"factor {a / ad:.2f}")
        m = pd.read_parquet(moe_file)
        m = m[(m.moe_ep_size == 1) & (m.moe_tp_size <= 8) & m.moe_dtype.isin(list(BYTES))
              & m.kernel_source.str.contains(kernel) & ~non_gated(m)]
        if not (m.distribution == distribution).any():
            click.echo(f"  expert kernels: no {distribution}-routing {kernel} kernels without expert parallelism")
        factors[engine] = {r: expert_fit(m[m.distribution == r], roofline, ad, cd, f"{r} routing",
                                         echo=r == distribution) for r in dict.fromkeys((distribution, SKEWED))}
    transfer(factors, distribution)


def expert_fit(m: pd.DataFrame, roofline, ad: float, cd: float, label: str = "",
               echo: bool = False) -> tuple[float, float]:
    """The MoE kernels' factor against the dense GEMMs' a and ms a MoE layer a step (nan if none were timed)."""
    if m.empty:
        return math.nan, math.nan
    inter = m.inter_size / m.moe_tp_size
    hit = m.num_experts * (1 - (1 - m.topk / m.num_experts) ** m.num_tokens)
    read = hit * 3 * m.hidden_size * inter * m.moe_dtype.map(BYTES)
    flops = 2 * m.num_tokens * m.topk * 3 * m.hidden_size * inter
    a, c, err = fit(roofline(read, flops, m.moe_dtype), m.latency.to_numpy())
    if echo:
        click.echo(f"  expert kernels ({label}): {len(m):,} kernels a {a:.3f} c {c * 1e3:.1f} µs "
                   f"({err:.1%}) -> factor {a / ad:.2f}, {(c - 2 * cd) * 1e3:.1f} µs a MoE layer per step")
        for t in sorted(m.moe_dtype.unique()):
            x = m.moe_dtype == t
            ab, af, c, err = bounds_fit(roofline(read[x], 0 * flops[x], m.moe_dtype[x]),
                                        roofline(0 * read[x], flops[x], m.moe_dtype[x]), m.latency[x].to_numpy())
            click.echo(f"    {t}: {x.sum():,} kernels, bytes x{ab / ad:.2f}, FLOPs x{af / ad:.2f} of the dense "
                       f"GEMMs' a, {(c - 2 * cd) * 1e3:.1f} µs a MoE layer ({err:.1%})")
    return a / ad, c - 2 * cd


def transfer(factors: dict[str, dict[str, tuple[float, float]]], distribution: str) -> None:
    """Where an engine's table timed only skewed routing (the A100's vLLM and TensorRT-LLM), its factor under
    `distribution`: its skewed factor times the ratio of an engine on the same GPU that timed both (on the H100,
    where all three did, the ratios agree within 4 %); its time a MoE layer as fitted under skewed routing (on
    the H100 within 2 µs of the balanced fit's)."""
    if distribution == SKEWED:
        return
    both = {e: f[distribution][0] / f[SKEWED][0] for e, f in factors.items()
            if not math.isnan(f[distribution][0] + f[SKEWED][0])}
    if not both:
        return
    click.echo(f"{distribution} / {SKEWED} factor ratios: " + ", ".join(f"{e} {r:.3f}" for e, r in both.items()))
    donor, ratio = next(iter(both.items()))
    for engine, f in factors.items():
        (skewed, layer), balanced = f[SKEWED], f[distribution][0]
        if math.isnan(balanced) and not math.isnan(skewed):
            click.echo(f"  {engine}: {SKEWED} factor {skewed:.3f} x {donor}'s ratio {ratio:.3f} -> {skewed * ratio:.2f} "
                       f"under {distribution} routing, {layer * 1e3:.1f} µs a MoE layer per step")

if __name__ == "__main__":
    main()
