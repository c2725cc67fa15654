"""Render results folders into one self-contained HTML file (inline SVG and CSS, no network)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jinja2

from llmbench import __version__
from llmbench.report import plots
from llmbench.results import load_metadata, load_records, load_results, load_server_metrics, records_path
from llmbench.slo import SLO, attained, attainment_points, capacity, rate_unit, unpaced_sentence
from llmbench.target import quantization_mode

HEADLINE = ["request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
            "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms"]
LOWER_IS_BETTER = {m for m in HEADLINE if m.endswith("_ms")}
TAIL_WARNING = 5.0
TAIL_NEAR_SLO = 0.5  # a long TTFT tail matters once its P99 is this share of the SLO's bound


def run_slo(meta: dict, results: list[dict]) -> SLO:
    """The SLO the run stated (metadata), as older folders recorded it (goodput), or MLPerf's default."""
    stated = meta.get("slo")
    if stated:
        return SLO(stated.get("ttft"), stated.get("tpot"), stated.get("e2el"), stated.get("attainment", 0.99),
                   stated.get("source", "stated"), stated.get("ttfo"))
    given = results[0].get("goodput_slos_ms") if results else None
    return SLO(given.get("ttft"), given.get("tpot"), given.get("e2el"), source="stated") if given else SLO()


def answer(results: list[dict], frame, slo: SLO) -> tuple[str, float | None]:
    """The sweep's answer in one sentence, and the knee: the highest measured rate that met the SLO."""
    points = attainment_points(results, frame, slo)
    if not points:
        unpaced = [r | {"slo_attainment": attained(frame, r["label"], slo)} for r in results]  # under this SLO
        return unpaced_sentence(unpaced, slo) or "no finite rate was measured, so there is no per-replica answer", None
    cap = capacity(points, slo, rate_unit(results))
    return cap.sentence(slo), (cap.passing[-1] if cap.passing else None)


def _fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


LATENCIES = ("ttft", "tpot", "itl", "e2el")


def latency_metrics(runs: dict[str, list[dict]]) -> tuple[str, ...]:
    """The latencies the table shows: TTFO beside them once any run streamed reasoning."""
    reasoning = any("p99_ttfo_ms" in r for results in runs.values() for r in results)
    return LATENCIES + (("ttfo",) if reasoning else ())


def summary_header(metrics: tuple[str, ...] = LATENCIES) -> list[str]:
    return (["rate", "sent/s", "req/s", "out tok/s", "total tok/s", "goodput"] +
            [f"{m.upper()} {p}" for m in metrics for p in ("P50", "P90", "P99")] +
            ["failed", "send lag P90", "P99/P50 TTFT"])


def summary_rows(results: list[dict], slos: dict[str, float], metrics: tuple[str, ...] = LATENCIES) -> list[dict]:
    rows = []
    for r in results:
        cells = []
        for key, digits in (("request_rate", 2), ("achieved_rate", 2), ("request_throughput", 2),
                            ("output_throughput", 0), ("total_token_throughput", 0), ("request_goodput", 2)):
            cells.append((_fmt(r.get(key), digits), False))
        for metric in metrics:
            for p in ("median", "p90", "p99"):
                value = r.get(f"{p}_{metric}_ms")
                bad = p == "p99" and metric in slos and value is not None and value > slos[metric]
                cells.append((_fmt(value), bad))
        cells.append((_fmt(r.get("failed")), bool(r.get("failed"))))
        cells.append((_fmt(r.get("p90_send_lag_ms"), 2), bool(r.get("client_overloaded"))))
        median = r.get("median_ttft_ms") or 0
        ratio = r["p99_ttft_ms"] / median if median else None
        cells.append((_fmt(ratio, 2), tail_warning(r, slos) is not None))
        passed = [f"not saturated: {r['backlog_passed']}"] if r.get("backlog_passed") else []
        rows.append({"label": r["label"], "cells": cells, "notes": (r.get("notes") or []) + passed,
                     "saturated": r.get("saturated")})
    return rows


def server_clock_rows(results: list[dict]) -> list[list[str]]:
    """Per rate, the server's own mean TTFT and E2E beside the client's (server_timings.py), for the rates whose
    server timed exactly the requests the run measured; none where no rate has them."""
    rows = []
    for r in results:
        if r.get("client_over_server_ttft_ms") is None:
            continue
        rows.append([r["label"], _fmt(r.get("server_timed_ttft")), _fmt(r["server_mean_ttft_ms"]),
                     _fmt(r.get("mean_ttft_ms")), _fmt(r["client_over_server_ttft_ms"]),
                     _fmt(r.get("server_mean_e2el_ms")), _fmt(r.get("mean_e2el_ms")),
                     _fmt(r.get("client_over_server_e2el_ms"))])
    return rows


def tail_warning(result: dict, slos: dict[str, float], attainment: float = 0.99) -> str | None:
    """A long TTFT tail, said only where it matters: P99 far above P50 *and* near or over the TTFT bound, or
    the rate missed the SLO. A rate whose every request met the SLO gets none."""
    median, p99 = result.get("median_ttft_ms") or 0, result.get("p99_ttft_ms") or 0
    if not median or p99 / median <= TAIL_WARNING:
        return None
    bound = slos.get("ttft")
    met = result.get("slo_attainment")
    near = bound is not None and p99 >= TAIL_NEAR_SLO * bound
    missed = met is not None and met < attainment
    if not (near or missed):
        return None
    where = f", {p99 / bound:.0%} of the {bound:g} ms TTFT bound" if bound else ""
    return (f"{result['label']}: TTFT tail: P99 {p99:,.0f} ms is {p99 / median:.1f}x the P50 {median:,.0f} ms{where}"
            " — requests queue before their first token at this rate")


def comparison(runs: dict[str, list[dict]]) -> list[dict]:
    """B/A ratios of every headline metric at the rates both runs measured."""
    names = list(runs)
    base_name, tables = names[0], []
    base = {str(r["request_rate"]): r for r in runs[base_name]}
    for other in names[1:]:
        rows = []
        for r in runs[other]:
            a = base.get(str(r["request_rate"]))
            if a is None:
                continue
            cells = []
            for m in HEADLINE:
                ratio = r[m] / a[m] if a.get(m) else None
                worse = ratio is not None and ((ratio > 1.05) if m in LOWER_IS_BETTER else (ratio < 0.95))
                cells.append((_fmt(ratio, 3), worse))
            rows.append({"rate": r["request_rate"], "cells": cells})
        tables.append({"a": base_name, "b": other, "rows": rows})
    return tables


def build_report(folders: list[Path | str], out: Path | str, title: str | None = None,
                 slo: SLO | None = None) -> Path:
    folders = [Path(f) for f in folders]
    runs: dict[str, list[dict]] = {}
    metas, records, plans = {}, {}, {}
    for i, folder in enumerate(folders):
        results = load_results(folder)
        if not results:
            raise ValueError(f"{folder}: no results (expected <label>.json files from llmbench run/sweep)")
        name = folder.name if len(folders) == 1 else f"{chr(65 + i)}: {folder.name}"
        runs[name] = results
        metas[name] = load_metadata(folder)
        records[name] = load_records(folder)
        plan_path = folder / "plan.json"
        if plan_path.is_file():
            plans[name] = json.loads(plan_path.read_text())
    slo = slo or run_slo(next(iter(metas.values())), next(iter(runs.values())))
    slos = slo.bounds
    metrics = latency_metrics(runs)
    answers = {name: answer(results, records[name], slo) for name, results in runs.items()}
    knees = {name: knee for name, (_, knee) in answers.items()}
    sections = []
    for name, results in runs.items():
        folder = folders[list(runs).index(name)]
        frame = records[name]
        timelines = []
        for r in results:
            sub = frame[frame["label"] == r["label"]] if not frame.empty else frame
            if sub.empty:
                continue
            chunks = _chunk_times(folder, r)
            timelines.append({"label": r["label"], "svg": plots.timeline(
                sub, load_server_metrics(folder, r["label"]), chunks, r["label"], r.get("client_stall_intervals"))})
        warnings = [w for r in results if (w := tail_warning(r, slos, slo.attainment))]
        sections.append({
            "name": name, "meta": metas[name], "results": results, "rows": summary_rows(results, slos, metrics),
            "server_clock": server_clock_rows(results),
            "knee": knees[name], "unit": rate_unit(results), "answer": answers[name][0], "warnings": warnings,
            "cdf": plots.cdfs(frame) if not frame.empty else None,
            "lengths": plots.length_histograms(frame) if not frame.empty else None,
            "timelines": timelines, "plan": plan_rows(plans[name]) if name in plans else None,
            "day": plots.day(plans[name]) if name in plans and "series" in plans[name] else None,
            "meta_rows": _meta_rows(metas[name], results[0]),
        })
    env = jinja2.Environment(loader=jinja2.PackageLoader("llmbench.report", "."), autoescape=True)
    page = env.get_template("template.html").render(
        title=title or f"llmbench report — {', '.join(runs)}", version=__version__, sections=sections,
        header=summary_header(metrics), slos=slos, slo_text=slo.describe(), slos_are_default=slo.source != "stated",
        answers=[(name, text) for name, (text, _) in answers.items()],
        curve=plots.throughput_latency(runs, slos, knees), percentiles=plots.percentiles_vs_rate(runs),
        tail=plots.tail_ratio(runs), comparisons=comparison(runs) if len(runs) > 1 else [],
        headline=HEADLINE,
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def plan_rows(plan: dict) -> list[tuple[str, str]]:
    """The plan's answer first, then its figures (each labelled and banded), flags, cost and notes."""
    rows = [("answer", plan.get("answer", "")),
            ("target", (f"{plan['qps']:g} QPS, " if plan.get("qps") else "") + f"{plan['slo_text']}, burst headroom "
                       f"{plan['burst_headroom']:.0%}, {plan['spares']} spare replica(s)")]
    from llmbench.plan.bands import band_text, number

    for f in plan.get("figures", []):
        band = f" [{band_text(f)}]" if "band" in f else ""
        rows.append((f["label"], f"{f['name']}: {number(f['value'], f['unit'])} {f['unit']}{band}"))
    formulas = plan.get("article_formulas", {})
    if "throughput_formula_gpus" in formulas:
        rows.append(("articles' formula", f"{formulas['throughput_formula_gpus']} GPUs ({formulas['throughput_formula']})"))
    flags = plan.get("simulated", {}).get("recommended_flags")
    if flags:
        rows.append(("recommended flags", " ".join(f"{k} {v}" for k, v in flags.items())))
    cost = plan.get("cost", {})
    if "usd_per_hour" in cost:
        rows.append(("cost", f"${cost['usd_per_hour']:.2f}/hour (${cost['usd_per_gpu_hour']:.2f}/GPU-hour, "
                             f"{cost['price_source']})"))
    for policy in plan.get("policies", []):
        price = "" if policy["cost_per_day"] is None else f", ${policy['cost_per_day']:,.0f} per day"
        rows.append((f"policy: {policy['name']}", f"{policy['gpu_hours']:,.1f} GPU-hours{price}, SLO attainment "
                                                  f"{policy['attainment']:.2%}, peak {policy['peak_replicas']} replicas"))
    for row in plan.get("fleet", []):
        price = "" if row["cost_per_day"] is None else f", ${row['cost_per_day']:,.0f} per day"
        rows.append((f"fleet: {row['gpu']}", f"autoscaled {row['gpu_hours']:,.1f} GPU-hours{price}, attainment "
                                             f"{row['attainment']:.2%}"))
    rows += [("estimate", note) for note in plan.get("estimates", [])]
    return rows


def _chunk_times(folder: Path, result: dict) -> list[list[float]]:
    path = records_path(folder, result)
    if not path.is_file():
        return []
    times = []
    for line in path.read_text().splitlines():
        try:
            times.append(json.loads(line)["chunk_times"])
        except (json.JSONDecodeError, KeyError):
            continue
    return times


def _meta_rows(meta: dict, first: dict) -> list[tuple[str, str]]:
    target = meta.get("target", {})
    version = target.get("version") or {}
    imported = meta.get("imported_from")
    rows = [("imported from", f"{imported['tool']}: {imported['file']} ({imported['records']})"
             + "".join(f"; {note}" for note in imported.get("notes", [])))] if imported else []
    rows += [
        ("target", f"{target.get('base_url', '?')}{' (bundled engine)' if target.get('bundled') else ''}"),
        ("model", first.get("model_id", "?")),
        ("engine", f"{version.get('engine', '')} {version.get('version', '')}".strip() or "unknown"),
        ("quantization", quantization_mode(version.get("config"))),
        ("engine flags", json.dumps(version.get("config")) if version.get("config") else "not reported"),
        ("dataset", first.get("dataset_description", "")),
        ("arrivals", f"{'Poisson' if first.get('burstiness') == 1.0 else 'gamma, burstiness ' + str(first.get('burstiness'))}"
                     f"{', max concurrency ' + str(first['max_concurrency']) if first.get('max_concurrency') else ''}"),
        ("ignore_eos", str(first.get("ignore_eos"))),
        ("seed", str(first.get("seed"))),
        ("tokenizer", str(first.get("tokenizer_id"))),
        ("llmbench", str(first.get("llmbench_version"))),
        ("machine", json.dumps(meta.get("machine", {}))),
    ]
    return rows
