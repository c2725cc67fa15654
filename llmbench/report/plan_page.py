"""A plan's own page (`plan.html` beside plan.json) for a plan with no results folder to join: its answer and
rows as in the report's plan section, and, for `--timeline`, the day drawn (offered load, replicas by policy)."""

from __future__ import annotations

import html
from pathlib import Path

from llmbench.report import plots
from llmbench.report.html import plan_rows


def write_plan_page(plan: dict, out: Path | str) -> Path:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in
                   plan_rows(plan))
    day = (f"<h2>Over the day: offered load and replicas by policy</h2><figure>{plots.day(plan)}</figure>"
           if "series" in plan else "")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>llmbench plan</title><style>body{{font:14px "
            f"sans-serif;margin:2em}}td{{padding:2px 8px;vertical-align:top}}</style></head><body><h1>"
            f"{html.escape(plan.get('answer', ''))}</h1>{day}<h2>Capacity plan</h2><table>{rows}</table></body></html>")
    out = Path(out)
    out.write_text(page, encoding="utf-8")
    return out
