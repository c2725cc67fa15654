"""Uncertainty bands: relative half-widths by kind of figure and by class of setup, each the largest error
the planner made on published results of that class, rounded up to 5 % (`llmbench plan validate`: planning.md
§9, on which the priors were chosen, and the held-out TensorRT-LLM rows of held_out.py, which they never saw).
tests/test_plan.py fails if an error outgrows its band. A calibrated plan (`--results`) has no published
check of its own, so it keeps its class's widths."""

from __future__ import annotations

from llmbench.plan.models import ModelSpec

# class -> kind -> half-width; where a class has no published figure of a kind the note says what is borrowed
BANDS = {
    "dense, TP <= 2": {"throughput": 0.25, "latency": 0.25, "memory": 0.05},
    "dense, TP >= 4": {"throughput": 0.50, "latency": 0.40, "memory": 0.05},
    "MoE": {"throughput": 0.80, "latency": 0.80, "memory": 0.05},
}
NOTES = {
    "dense, TP <= 2": "",
    "dense, TP >= 4": "memory band borrowed from TP <= 2 (no published KV row at TP >= 4)",
    "MoE": "no published MoE latency or memory row: latency borrows the MoE throughput band, memory the dense one",
}


def setup_class(model: ModelSpec, tp: int) -> str:
    if model.experts > 1:
        return "MoE"
    return "dense, TP <= 2" if tp <= 2 else "dense, TP >= 4"


def for_setup(model: ModelSpec, tp: int) -> dict[str, float]:
    return dict(BANDS[setup_class(model, tp)])


WIDE_BAND = 0.5


def band_text(figure: dict) -> str:
    """The band, or, wider than ±50 %, a plain warning: such a band says nothing a plan can rest on."""
    if "band" not in figure:
        return "–"
    low, high = figure["band"]
    if figure["value"] and (high - low) / (2 * abs(figure["value"])) > WIDE_BAND:
        return "order of magnitude only — measure it"
    return f"{low:,.2f}–{high:,.2f}"
