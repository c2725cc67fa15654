"""Uncertainty bands: by kind of figure (throughput, median/mean latency, P99 latency, memory) and by class of
setup, the signed relative error (predicted / published - 1) the planner made on **held-out** published
results: TensorRT-LLM's rows the priors never saw (held_out.py), a vLLM 0.14 rate sweep, GPUStack's bursts and
the same lab's other pages (lab_pages.py), and every source's where fewer than two held-out sources have figures
of a kind (`derive`). Each band runs from the 5th to the 95th percentile of those errors, widened by 2 % and
rounded out to 5 %;
`llmbench plan validate` prints them beside the errors, and tests/test_plan_validation.py fails if fewer than
90 % of the held-out figures fall inside. A band is signed because the planner is biased: a plan reads it as
"the real figure lies between value / (1 + high) and value / (1 + low)".

"near saturation" is a class of its own for latencies: a question asked at 80 % or more of the replica's
saturation rate (search.saturation) sits on the knee, where a few per cent of throughput error move a P99
several-fold; there the planner answers "order of magnitude only — measure it". A calibrated or fitted plan
(`--results`) keeps its class's widths or the fit's own error.
"""

from __future__ import annotations

import numpy as np

from llmbench.plan.model_spec import ModelSpec

Band = tuple[float, float]
KINDS = ("throughput", "latency", "p99", "memory")
KNEE = 0.8  # utilization (rate / saturation rate) from which a latency is "near saturation"
DENSE = {"latency": (-0.65, 0.25), "p99": (-0.7, 0.45), "memory": (-0.05, 0.05)}
BANDS: dict[str, dict[str, Band]] = {
    "dense, TP <= 2": {"throughput": (-0.35, 0.7), **DENSE},
    "dense, TP >= 4": {**DENSE, "throughput": (-0.15, 0.15), "latency": (-0.25, 0.1)},
    "MoE": {**DENSE, "throughput": (-0.15, 3.0), "latency": (-0.85, 0.2), "p99": (-0.95, 0.1),
            "memory": (-0.15, 0.05)},
    "near saturation": {"latency": (-0.65, 6.75), "p99": (-0.6, 8.1)},
}
NOTES = {
    "dense, TP <= 2": "throughput, latency and P99 bands from three held-out sources (the vLLM 0.14 "
                      "sweep, GPUStack's Qwen3-14B bursts and the lab's other pages: Qwen3 8B-32B on A100 "
                      "and H100); memory from the held-out vLLM 0.14 sweep and the tuning rows",
    "dense, TP >= 4": "throughput from held-out TensorRT-LLM rows and latency from three tuning rows (no held-out "
                      "TP >= 4 latency); P99 and memory borrowed from dense TP <= 2",
    "MoE": "every kind but memory from held-out TensorRT-LLM rows and GPUStack's lab (Qwen3-235B, "
           "DeepSeek-R1, GLM-4.5-Air, gpt-oss), which the planner mostly runs too fast even with the measured "
           "cost of expert kernels (gpt-oss on SGLang and TensorRT-LLM 2.4-23x); memory from the tuning rows "
           "(gpt-oss's two runs on one H100; no held-out MoE memory figure)",
    "near saturation": "from the tuning rows' errors (MLPerf Server and Interactive runs; no held-out figure asked "
                       "at 80 % of saturation or more)",
}
WIDE_BAND = 0.5


def setup_class(model: ModelSpec, tp: int) -> str:
    if model.experts > 1:
        return "MoE"
    return "dense, TP <= 2" if tp <= 2 else "dense, TP >= 4"


def figure_class(model: ModelSpec, tp: int, kind: str, utilization: float | None = None) -> str:
    """The class whose band a figure takes: latencies asked at or past the knee are "near saturation"."""
    if kind in ("latency", "p99") and utilization is not None and utilization >= KNEE:
        return "near saturation"
    return setup_class(model, tp)


def for_setup(model: ModelSpec, tp: int) -> dict[str, Band]:
    return dict(BANDS[setup_class(model, tp)])


def at_load(band: dict, utilization: float | None) -> dict:
    """A setup's bands for a question asked at `utilization` of its saturation rate."""
    if utilization is None or utilization < KNEE:
        return band
    return band | BANDS["near saturation"]


def signed(band: Band | float) -> Band:
    """A signed band; a bare width w is (-w, w) (a fit's own symmetric error)."""
    return (-band, band) if isinstance(band, int | float) else (float(band[0]), float(band[1]))


def interval(value: float, band: Band | float) -> list[float]:
    """Where the real figure lies when the planner says `value` and errs within `band`."""
    low, high = signed(band)
    return [value / (1 + high), value / (1 + max(low, -0.99))]


def width(band: Band | float) -> float:
    """The band as one relative half-width around the value (for the "order of magnitude" rule)."""
    low, high = interval(1.0, band)
    return (high - low) / 2


def text(band: Band | float) -> str:
    """`-10 %/+25 %`: how far the planner's figure has been off, low side and high side."""
    low, high = signed(band)
    if low == -high:
        return f"±{high:.0%}"
    return f"{low:+.0%}/{high:+.0%}"


def figure(name: str, value: float, unit: str, label: str, band: Band | float | None) -> dict:
    """A figure of the plan, with its band as an interval where it has one."""
    out = {"name": name, "value": value, "unit": unit, "label": label}
    if band:
        out["band"] = interval(value, band)
    return out


def number(value: float, unit: str) -> str:
    """A figure's value as printed: counts (tokens) whole, everything else to two decimals."""
    return f"{value:,.0f}" if unit == "tokens" else f"{value:,.2f}"


def band_text(shown: dict) -> str:
    """The band, or, wider than ±50 %, a plain warning: such a band says nothing a plan can rest on."""
    if "band" not in shown:
        return "–"
    low, high = shown["band"]
    if shown["value"] and (high - low) / (2 * abs(shown["value"])) > WIDE_BAND:
        return "order of magnitude only — measure it"
    return f"{number(low, shown['unit'])}–{number(high, shown['unit'])}"


MIN_SOURCES = 2  # held-out sources a band needs before it rests on them alone


def derive(rows: list[dict], coverage: float = 0.9, pad: float = 0.02) -> dict[str, dict[str, Band]]:
    """Bands from validation rows: per class and kind, the central `coverage` of the held-out errors, stretched
    to hold zero (a band says how far the planner has erred, not that it must), padded and rounded out to 5 %.
    Where fewer than MIN_SOURCES held-out sources have figures of a class and kind, one source's bias would set
    the band (a vLLM 0.14 sweep alone gives dense latencies -5 %/+50 %, while MLPerf's tuning rows below the
    knee miss by -60 % to +55 %), so the band takes every source's errors, tuning rows included; a class and
    kind with no figure at all is left out (BANDS says what it borrows)."""
    tail = (1 - coverage) / 2 * 100
    out: dict[str, dict[str, Band]] = {}
    for r in rows:
        out.setdefault(r["class"], {})
    for cls in out:
        for kind in KINDS:
            mine = [r for r in rows if r["class"] == cls and r["kind"] == kind]
            held = [r for r in mine if r["held_out"]]
            errors = [r["error"] for r in (held if len({r["row"] for r in held}) >= MIN_SOURCES else mine)]
            if errors:
                low, high = np.percentile(errors, [tail, 100 - tail])
                out[cls][kind] = (float(np.floor((min(low, 0) - pad) * 20) / 20),
                                  float(np.ceil((max(high, 0) + pad) * 20) / 20))
    return {cls: bands for cls, bands in out.items() if bands}
