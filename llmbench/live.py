"""What a run or sweep shows in the terminal: a live progress display while each rate runs, one line per
finished rate, the table of all rates, and the answer last."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from llmbench.runner import Progress as RunProgress
from llmbench.slo import SLO, Capacity
from llmbench.sweep import View, served
from llmbench.target import Target


def terminal() -> Console:
    """Lines are never wrapped (a log or CI page keeps each result on one line); wide tables when piped."""
    console = Console(soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    return console


def _pcts(values: list[float], fmt: str) -> str:
    if not values:
        return "-/-"
    p50, p99 = np.percentile(values, [50, 99])
    return f"{p50:{fmt}}/{p99:{fmt}}"


class LiveView(View):
    """rich progress with elapsed time and ETA per rate and for the sweep; plain lines when not a terminal."""

    def __init__(self, console: Console | None = None, live: bool = True) -> None:
        self.console = console or terminal()
        self.live = live and self.console.is_terminal
        self.bars: Progress | None = None
        self.sweep_task = self.rate_task = None
        self.tokens_at: tuple[float, int] = (0.0, 0)
        self.tok_rate = 0.0

    def target(self, target: Target, description: str, notes: list[str]) -> None:
        self.console.print(f"target {target.base_url} ({target.model})" + (f": {description}" if description else ""))
        for note in notes:
            self.note(note)

    def note(self, text: str) -> None:
        self.console.print(f"note: {text}", highlight=False)

    def rate_started(self, index: int, count: int, rate: float, requests: int) -> None:
        if not self.live:
            return
        if self.bars is None:
            self.bars = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), TextColumn("{task.fields[latency]}"), console=self.console,
                                 refresh_per_second=4)
            self.bars.start()
            self.sweep_task = self.bars.add_task("sweep", total=count, counts="", latency="")
        self.bars.update(self.sweep_task, completed=index,
                         description=f"rate {index + 1} of {count}", counts="", latency="")
        self.rate_task = self.bars.add_task(f"  {rate:g} req/s", total=requests, counts="", latency="")
        self.tokens_at, self.tok_rate = (0.0, 0), 0.0

    def progress(self, p: RunProgress) -> None:
        if not self.live or self.rate_task is None:
            return
        t, tokens = self.tokens_at
        if p.elapsed - t >= 2.0:
            self.tok_rate = (p.output_tokens - tokens) / (p.elapsed - t)
            self.tokens_at = (p.elapsed, p.output_tokens)
        counts = (f"sent {p.sent}/{p.total} · done {p.done} · in flight {max(p.in_flight, 0)}"
                  + (f" · failed {p.failed}" if p.failed else "") + f" · {self.tok_rate:,.0f} out tok/s")
        latency = f"TTFT P50/P99 {_pcts(p.ttft_ms, '.0f')} ms · TPOT {_pcts(p.tpot_ms, '.1f')} ms"
        self.bars.update(self.rate_task, completed=min(p.done, p.total), counts=counts, latency=latency)

    def rate_done(self, row: dict) -> None:
        if self.bars is not None and self.rate_task is not None:
            self.bars.remove_task(self.rate_task)
            self.rate_task = None
        self.console.print(row_line(row))

    def close(self) -> None:
        if self.bars is not None:
            self.bars.stop()
            self.bars = None


def row_line(row: dict) -> str:
    notes = "; ".join(row.get("notes") or [])
    rate = row["request_rate"]
    attained = row.get("slo_attainment")
    slo = f", SLO met by {attained:.1%}" if attained is not None else ""
    return (f"[{row['label']}] {rate if rate == 'inf' else format(rate, 'g')} req/s offered: completed "
            f"{row['completed']}, failed {row['failed']}, sent {row['achieved_rate']:.2f}/s, done {served(row):.2f}/s, "
            f"output {row['output_throughput']:,.0f} tok/s, TTFT P50/P99 {row['median_ttft_ms']:.0f}/"
            f"{row['p99_ttft_ms']:.0f} ms, TPOT P50/P99 {row['median_tpot_ms']:.1f}/{row['p99_tpot_ms']:.1f} ms{slo}"
            + (f" — {notes}" if notes else ""))


def summary_table(rows: list[dict], title: str, slo: SLO, knee: float | None) -> Table:
    """One row per rate; `done/s` is the same figure the saturation message quotes."""
    table = Table(title=title)
    columns = [("rate", None), ("sent/s", "achieved_rate"), ("done/s", None), ("out tok/s", "output_throughput"),
               ("TTFT P50", "median_ttft_ms"), ("TTFT P99", "p99_ttft_ms"), ("TPOT P50", "median_tpot_ms"),
               ("TPOT P99", "p99_tpot_ms"), ("SLO met", "slo_attainment"), ("goodput req/s", "request_goodput"),
               ("failed", "failed")]
    if any("spec_acceptance_rate" in r for r in rows):
        columns.append(("spec α", "spec_acceptance_rate"))
    for name, _ in columns:
        table.add_column(name, justify="right")
    formats = {"achieved_rate": "{:.2f}", "output_throughput": "{:,.0f}", "median_ttft_ms": "{:.0f}",
               "p99_ttft_ms": "{:.0f}", "median_tpot_ms": "{:.1f}", "p99_tpot_ms": "{:.1f}",
               "slo_attainment": "{:.1%}", "request_goodput": "{:.2f}", "failed": "{:.0f}",
               "spec_acceptance_rate": "{:.2f}"}
    for row in rows:
        rate = row["request_rate"]
        cells = []
        for name, key in columns:
            if name == "rate":
                mark = " *" if knee is not None and rate == knee else ""
                cells.append(f"{rate:g}{mark}" if isinstance(rate, int | float) else str(rate))
            elif name == "done/s":
                cells.append(f"{served(row):.2f}")
            else:
                cells.append(fmt_cell(row.get(key), formats.get(key)))
        table.add_row(*cells, style="red" if row.get("saturated") else None)
    table.caption = f"SLO: {slo.describe()} ({slo.source}); * the highest rate that met it; red: saturated"
    return table


def fmt_cell(value, fmt: str | None) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return fmt.format(value) if fmt else str(value)


def answer_line(cap: Capacity | None, slo: SLO) -> str:
    if cap is None:
        return "no finite rate was measured, so there is no per-replica answer (run `llmbench sweep --rate a..b`)"
    return cap.sentence(slo)
