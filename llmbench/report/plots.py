"""The report's figures, drawn with matplotlib and returned as inline SVG text."""

from __future__ import annotations

import io
import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from llmbench.slo import rate_unit  # noqa: E402

COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "figure.dpi": 100})


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)  # RDF block with a date and URLs
    return text[text.index("<svg") :]


def _rates(results: list[dict]) -> list[float]:
    return [math.inf if r["request_rate"] == "inf" else float(r["request_rate"]) for r in results]


def throughput_latency(runs: dict[str, list[dict]], slos: dict[str, float], knees: dict[str, float | None]) -> str:
    """Output tokens/s against P99 TPOT and P99 TTFT, one line per run, SLO lines, knee marked."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, metric, slo_key, title in ((axes[0], "p99_tpot_ms", "tpot", "P99 TPOT (ms)"),
                                      (axes[1], "p99_ttft_ms", "ttft", "P99 TTFT (ms)")):
        for i, (name, results) in enumerate(runs.items()):
            x = [r[metric] for r in results]
            y = [r["output_throughput"] for r in results]
            color = COLORS[i % len(COLORS)]
            ax.plot(x, y, marker="o", color=color, label=name)
            for r, xi, yi in zip(results, x, y, strict=True):
                ax.annotate(_rate_text(r), (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=6,
                            color=color)
            knee = knees.get(name)
            for r in results:
                if knee is not None and _rates([r])[0] == knee:  # a ring around the point, never over it
                    ax.plot([r[metric]], [r["output_throughput"]], marker="o", markersize=13, markerfacecolor="none",
                            markeredgecolor="black", linestyle="none",
                            label=f"knee ({name})" if len(runs) > 1 else "knee")
        if slo_key in slos:
            ax.axvline(slos[slo_key], color="crimson", linestyle="--", label=f"SLO {slos[slo_key]:g} ms")
        ax.set_xlabel(title)
        ax.set_ylabel("output tokens/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _svg(fig)


def _rate_text(result: dict) -> str:
    rate = result["request_rate"]
    return "inf" if rate == "inf" else f"{float(rate):g}/s"


def percentiles_vs_rate(runs: dict[str, list[dict]]) -> str:
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    for ax, metric in zip(axes, ("ttft", "tpot", "itl", "e2el"), strict=True):
        for i, (name, results) in enumerate(runs.items()):
            rates = _finite(_rates(results))
            for p, style in (("median", ":"), ("p90", "--"), ("p99", "-")):
                ax.plot(rates, [r.get(f"{p}_{metric}_ms", np.nan) for r in results], style, marker=".",
                        color=COLORS[i % len(COLORS)], label=f"{name} {p}" if len(runs) > 1 else p)
        ax.set_title(metric.upper())
        ax.set_xlabel(f"rate ({rate_unit([r for rs in runs.values() for r in rs])})")
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return _svg(fig)


def _finite(rates: list[float]) -> list[float]:
    finite = [r for r in rates if math.isfinite(r)]
    top = max(finite, default=1.0) * 1.25
    return [r if math.isfinite(r) else top for r in rates]


def cdfs(records: pd.DataFrame) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, column, title in ((axes[0], "ttft", "TTFT (ms)"), (axes[1], "tpot", "TPOT (ms)")):
        for i, (label, group) in enumerate(records.groupby("label", sort=False)):
            values = np.sort(group[column].dropna().to_numpy() * 1000)
            if values.size:
                ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                        color=COLORS[i % len(COLORS)], label=str(label))
            thought = group["ttfo"][group["reasoning_tokens"].notna()] if column == "ttft" and \
                "reasoning_tokens" in group else group["ttft"].iloc[:0]
            answered = np.sort(thought.dropna().to_numpy(dtype=float) * 1000)
            if answered.size:  # a reasoning model: the answer's first token, dashed beside the first of any kind
                ax.step(answered, np.arange(1, answered.size + 1) / answered.size, where="post", linestyle="--",
                        color=COLORS[i % len(COLORS)], label=f"{label} TTFO")
        if column == "ttft" and "reasoning_tokens" in records and records["reasoning_tokens"].notna().any():
            title = "TTFT (solid), TTFO (dashed) (ms)"
        ax.set_xlabel(title)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return _svg(fig)


def timeline(records: pd.DataFrame, server: pd.DataFrame, chunk_times: list[list[float]], title: str,
             stalls: list | dict | None = None) -> str:
    """In-flight requests and output tokens/s over the run, and the server's queues and KV usage; shaded where
    the client itself stalled (`client_stall_intervals`: its time stamps there are when the stall ended)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), layout="constrained")
    ok = records[records["success"]]
    end = float(max(records["end"].max(), 1.0))
    grid = np.arange(0, end + 1, 0.5)
    starts, ends = records["start"].to_numpy(), records["end"].to_numpy()
    in_flight = [int(((starts <= t) & (ends > t)).sum()) for t in grid]
    axes[0].plot(grid, in_flight, label="in flight (client)")
    times = np.concatenate([np.asarray(c) for c in chunk_times]) if chunk_times else np.array([])
    per_second = np.bincount(times.astype(int), minlength=int(end) + 1) if times.size else np.zeros(1)
    ax2 = axes[0].twinx()
    ax2.plot(np.arange(per_second.size) + 0.5, per_second, color=COLORS[1], label="chunks/s (≈ tokens/s)")
    spans = [span for some in (stalls.values() if isinstance(stalls, dict) else [stalls or []]) for span in some]
    for i, (start, stop) in enumerate(spans):
        axes[0].axvspan(start, stop, color=COLORS[3], alpha=0.3, label="client stalled" if i == 0 else None)
    axes[0].set_xlabel("seconds")
    axes[0].set_ylabel("requests")
    ax2.set_ylabel("chunks/s")
    axes[0].legend(loc="upper left", fontsize=7)
    ax2.legend(loc="upper right", fontsize=7)
    axes[0].set_title(f"{title}: client view ({len(ok)} ok)")
    if not server.empty:
        for i, column in enumerate(c for c in ("running", "waiting") if c in server):
            axes[1].plot(server["t"], server[column], color=COLORS[i], label=column)
        if "kv_usage" in server:
            ax3 = axes[1].twinx()
            ax3.plot(server["t"], server["kv_usage"] * 100, color=COLORS[3], label="KV usage %")
            ax3.set_ylabel("KV usage (%)")
            ax3.legend(loc="upper right", fontsize=7)
        axes[1].legend(loc="upper left", fontsize=7)
        axes[1].set_title("server /metrics")
    else:
        axes[1].text(0.5, 0.5, "the target exposed no Prometheus /metrics", ha="center", va="center")
        axes[1].set_axis_off()
    axes[1].set_xlabel("seconds")
    return _svg(fig)


def length_histograms(records: pd.DataFrame) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.0))
    ok = records[records["success"]]
    axes[0].hist(ok["prompt_len"], bins=40, color=COLORS[0])
    axes[0].set_xlabel("prompt tokens")
    outputs = ok["output_tokens"].fillna(ok["num_chunks"])
    axes[1].hist(outputs, bins=40, color=COLORS[1])
    axes[1].set_xlabel("output tokens")
    for ax in axes:
        ax.set_ylabel("requests")
        ax.grid(alpha=0.3)
    return _svg(fig)


def tail_ratio(runs: dict[str, list[dict]]) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.0))
    for i, (name, results) in enumerate(runs.items()):
        ratios = [r["p99_ttft_ms"] / r["median_ttft_ms"] if r["median_ttft_ms"] else np.nan for r in results]
        ax.plot(_finite(_rates(results)), ratios, marker="o", color=COLORS[i % len(COLORS)], label=name)
    ax.axhline(5, color="crimson", linestyle="--", label="5x: a long tail (flagged when near the SLO)")
    ax.set_xlabel(f"rate ({rate_unit([r for rs in runs.values() for r in rs])})")
    ax.set_ylabel("P99 / P50 TTFT")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig)


def day(plan: dict) -> str:
    """`plan --timeline`: offered load over the day and the replicas each policy holds."""
    series = plan["series"]
    hours = np.arange(len(series["rate"])) * series["step_s"] / 3600.0
    fig, ax = plt.subplots(figsize=(10, 3.2))
    ax.plot(hours, series["rate"], color=COLORS[0], lw=1, label="offered req/s")
    ax.set_xlabel("hours")
    ax.set_ylabel("req/s", color=COLORS[0])
    right = ax.twinx()
    for i, name in enumerate(k for k in series if k not in ("step_s", "rate")):
        right.step(hours, series[name], where="post", color=COLORS[(i + 1) % len(COLORS)], label=f"{name} replicas")
    right.set_ylabel("replicas")
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    return _svg(fig)
