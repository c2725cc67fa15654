"""`llmbench plan --qps 50`: the terminal table and plan.json."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("plan")
@click.option("--qps", type=click.FloatRange(0, min_open=True), required=True, help="Peak requests per second.")
@click.option("--results", type=click.Path(exists=True, file_okay=False), help="A sweep's results folder.")
@click.option("--slo", help="P99 SLOs, e.g. ttft=500ms,tpot=50ms[,e2el=3s] (default: MLPerf 2 s / 100 ms).")
@click.option("--attainment", default=0.99, show_default=True, type=click.FloatRange(0.5, 1.0))
@click.option("--gpu", default="H100-SXM", show_default=True, help="Catalog GPU for the unmeasured path.")
@click.option("--model", default="llama-3.1-8b", show_default=True, help="Catalog model or a config.json path.")
@click.option("--weight-dtype", type=click.Choice(["bf16", "fp8", "int8", "int4"]),
              help="Default: the measured engine's quantization (from --results), else bf16.")
@click.option("--kv-dtype", type=click.Choice(["bf16", "fp8"]),
              help="Default: the measured engine's kv_cache_dtype (from --results), else bf16.")
@click.option("--burst-headroom", default=0.2, show_default=True, type=click.FloatRange(0))
@click.option("--spares", default=1, show_default=True, type=click.IntRange(0), help="N+1 spare replicas.")
@click.option("--gpus-per-replica", type=click.IntRange(1), help="Default: 1 measured, smallest TP that fits.")
@click.option("--price", type=click.FloatRange(0), help="USD per GPU-hour (default: the catalog's reference).")
@click.option("--prefix-hit-rate", default=0.0, show_default=True, type=click.FloatRange(0, 0.99))
@click.option("--out", type=click.Path(dir_okay=False), help="plan.json path (default: in --results, or ./).")
def plan_command(qps, results, slo, attainment, gpu, model, weight_dtype, kv_dtype, burst_headroom, spares,
                 gpus_per_replica, price, prefix_hit_rate, out) -> None:
    """Replicas and GPUs that keep P99 TTFT and TPOT under the SLOs at a target QPS."""
    from llmbench.plan.planner import PlanError, PlanRequest, make_plan
    from llmbench.slo import parse_slo

    measured = measured_dtypes(Path(results)) if results else {}
    weight_dtype = weight_dtype or measured.get("weight_dtype", "bf16")
    kv_dtype = kv_dtype or measured.get("kv_dtype", "bf16")
    try:
        request = PlanRequest(qps=qps, slo=parse_slo(slo, attainment), results=Path(results) if results else None,
                              gpu=gpu, model=model, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                              burst_headroom=burst_headroom, spares=spares, gpus_per_replica=gpus_per_replica,
                              price_per_hour=price, prefix_hit_rate=prefix_hit_rate)
        plan = make_plan(request)
    except (PlanError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    path = Path(out) if out else (Path(results) / "plan.json" if results else Path("plan.json"))
    path.write_text(json.dumps(plan, indent=2, default=float))
    print_plan(plan)
    click.echo(f"plan: {path}")


def measured_dtypes(folder: Path) -> dict[str, str]:
    """Weight and KV formats the measured engine reported in /version (bundled engine only)."""
    from llmbench.results import load_metadata

    try:
        config = (load_metadata(folder).get("target", {}).get("version") or {}).get("config") or {}
    except (OSError, ValueError):
        return {}
    found = {}
    quant = config.get("quantization")
    if quant:
        found["weight_dtype"] = "int8" if quant == "int8" else "int4"
    if str(config.get("kv_cache_dtype", "auto")).startswith("fp8"):
        found["kv_dtype"] = "fp8"
    return found


def print_plan(plan: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"llmbench plan — {plan['qps']:g} QPS, {plan['slo_text']}")
    for col in ("layer", "per-replica req/s", "replicas (incl. spares)", "GPUs", "notes"):
        table.add_column(col, justify="right" if col not in ("layer", "notes") else "left")
    if "measured" in plan:
        m = plan["measured"]
        table.add_row("measured", f"{m['per_replica_rate']:.2f}", str(m["replicas"]), str(m["gpus"]), m["note"])
    if "analytic" in plan:
        a = plan["analytic"]
        table.add_row("analytic screen (estimate)", f"{a['compute_rate_screen']:.2f}", "–", "–",
                      f"{a['model']} on {a['gpu']} TP{a['tensor_parallel']}: KV {a['kv_capacity_tokens']:,} tokens, "
                      f"~{a['concurrent_requests_at_mean_length']:.0f} concurrent requests")
    if "simulated" in plan:
        s = plan["simulated"]
        low, high = s["per_replica_rate_band"]
        table.add_row("simulated" + (" (estimate)" if "analytic" in plan else ""),
                      f"{s['per_replica_rate']:.2f} [{low:.2f}–{high:.2f}]",
                      f"{s['replicas']} [{s['replicas_band'][0]}–{s['replicas_band'][1]}]", str(s["gpus"]),
                      s["step_model"])
    f = plan.get("article_formulas", {})
    if "throughput_formula_gpus" in f:
        table.add_row("article: tokens/s x 1.5", "–", "–", str(f["throughput_formula_gpus"]), f["throughput_formula"])
    if "kv_formula_gpus" in f:
        table.add_row("article: KV concurrency", "–", "–", str(f["kv_formula_gpus"]), f["kv_formula"])
    console.print(table)
    if "simulated" in plan:
        flags = " ".join(f"{k} {v}" for k, v in plan["simulated"]["recommended_flags"].items())
        console.print(f"recommended engine flags: {flags}")
    cost = plan.get("cost", {})
    if "usd_per_hour" in cost:
        per_m = cost["usd_per_million_output_tokens"]
        console.print(f"cost: ${cost['usd_per_hour']:.2f}/hour at ${cost['usd_per_gpu_hour']:.2f}/GPU-hour "
                      f"({cost['price_source']}), ${per_m:.3f} per 1M output tokens")
    else:
        console.print(cost.get("note", ""))
    for note in plan.get("estimates", []):
        console.print(f"[yellow]note:[/] {note}")
    console.print("Why the SLO-based answer differs from the articles' formulas: they size for mean throughput and "
                  "ignore latency tails; the P99s blow up near the knee long before throughput stops growing.")
