"""What a run or sweep shows in the terminal: a live progress display while each rate runs, one line per
finished rate, the table of all rates, and the answer last."""

from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from llmbench.runner import Progress as RunProgress
from llmbench.slo import SLO, Capacity, rate_unit, unpaced_sentence
from llmbench.sweep import View
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
    """rich progress with elapsed time and ETA for the sweep and the current rate, and a status line of
    counts, output tokens/s and running latency percentiles; plain lines when not a terminal."""

    def __init__(self, console: Console | None = None, live: bool = True) -> None:
        self.console = console or terminal()
        self.live = live and self.console.is_terminal
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                             TimeElapsedColumn(), RateETAColumn())
        self.status = Text("")
        self.display: Live | None = None
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
        if self.display is None:
            self.sweep_task = self.bars.add_task("rates", total=count, eta=False)
            self.display = Live(Group(self.bars, self.status), console=self.console, refresh_per_second=4,
                                transient=True)
            self.display.start()
        # a sweep stops once saturated: how many rates it will run is not known, so its bar has no ETA
        self.bars.update(self.sweep_task, completed=index, description=f"rate {index + 1} of up to {count}")
        self.rate_task = self.bars.add_task(f"{rate:g} req/s done", total=requests, eta=True)
        self.tokens_at, self.tok_rate = (0.0, 0), 0.0
        self.status.plain = ""

    def progress(self, p: RunProgress) -> None:
        if self.display is None or self.rate_task is None:
            return
        t, tokens = self.tokens_at
        if p.elapsed - t >= 2.0:
            self.tok_rate = (p.output_tokens - tokens) / (p.elapsed - t)
            self.tokens_at = (p.elapsed, p.output_tokens)
        self.bars.update(self.rate_task, completed=min(p.done, p.total))
        self.status.plain = (f"sent {p.sent}/{p.total} · in flight {max(p.in_flight, 0)}"
                             + (f" · failed {p.failed}" if p.failed else "") + f" · {self.tok_rate:,.0f} out tok/s\n"
                             f"TTFT P50/P99 {_pcts(p.ttft_ms, '.0f')} ms · TPOT P50/P99 {_pcts(p.tpot_ms, '.1f')} ms")

    def rate_done(self, row: dict) -> None:
        if self.rate_task is not None:
            self.bars.remove_task(self.rate_task)
            self.rate_task = None
        self.console.print(row_line(row), highlight=False)

    def close(self) -> None:
        if self.display is not None:
            self.display.stop()
            self.display = None


class RateETAColumn(TimeRemainingColumn):
    """The time left of the rate being measured; none for the sweep as a whole."""

    def render(self, task):
        return super().render(task) if task.fields.get("eta") else Text("")


def row_line(row: dict) -> str:
    notes = "; ".join((row.get("notes") or []) + ([f"failures: {row['failure_summary']}"]
                                                 if row.get("failure_summary") else []))
    rate = row["request_rate"]
    attained = row.get("slo_attainment")
    slo = f", SLO met by {attained:.1%}" if attained is not None else ""
    return (f"[{row['label']}] {rate if rate == 'inf' else format(rate, 'g')} {rate_unit([row])} offered: completed "
            f"{row['completed']}, failed {row['failed']}, {_sent(row)}, kept up {fmt_cell(row.get('kept_up'), '{:.0%}')}, "
            f"output {row['output_throughput']:,.0f} tok/s, TTFT P50/P99 {row['median_ttft_ms']:.0f}/"
            f"{row['p99_ttft_ms']:.0f} ms, {_ttfo(row)}TPOT P50/P99 {row['median_tpot_ms']:.1f}/"
            f"{row['p99_tpot_ms']:.1f} ms{slo}" + _server_clock(row) + _steady(row.get("steady_state"))
            + _sessions(row.get("sessions"))
            + (f" — {notes}" if notes else ""))


def _server_clock(row: dict) -> str:
    """The server's own mean TTFT beside the client's (server_timings.py), where it timed the run's requests."""
    own = row.get("server_mean_ttft_ms")
    if own is None or row.get("client_over_server_ttft_ms") is None:
        return ""
    over = row["client_over_server_ttft_ms"]
    return f"; the server's own mean TTFT {own:.0f} ms, the client's {over:+.0f} ms over it"


def _sessions(s: dict | None) -> str:
    if not s:
        return ""
    by_turn = ", ".join(f"{int(turn) + 1}: {ms:.0f}" for turn, ms in list(s["median_ttft_ms_by_turn"].items())[:6])
    return (f"; {s['sessions']} sessions of {s['mean_turns']:.1f} turns (P50 {s['median_session_duration_s']:.1f} s"
            f", {s['sessions_with_a_failed_turn']} with a failed turn), TTFT P50 ms by turn {by_turn}")


def _steady(window: dict | None) -> str:
    if not window:
        return ""
    if not window.get("window_s"):
        return f"; no steady state ({window['reason']})"
    a, b = window["window_s"]
    return (f"; steady state {a:.1f}-{b:.1f} s ({window['requests']} requests): output "
            f"{window['output_throughput']:,.0f} tok/s, TTFT P50/P99 {window['median_ttft_ms']:.0f}/"
            f"{window['p99_ttft_ms']:.0f} ms, TPOT P50/P99 {window['median_tpot_ms']:.1f}/{window['p99_tpot_ms']:.1f} ms")


def _ttfo(row: dict) -> str:
    if "p99_ttfo_ms" not in row:
        return ""
    return (f"TTFO P50/P99 {row['median_ttfo_ms']:.0f}/{row['p99_ttfo_ms']:.0f} ms "
            f"({row.get('total_reasoning_tokens', 0):,} reasoning tokens of {row['total_output_tokens']:,}), ")


def _sent(row: dict) -> str:
    if row.get("schedule") == "trace":
        return f"sent {row['achieved_rate']:.2f}/s on the trace's own schedule"
    what = "conversations opened" if row.get("sessions") else "sent"  # later turns follow the replies
    if row["request_rate"] == "inf":
        slots = row.get("max_concurrency") or row.get("users")  # --users: Locust's closed loop
        return f"{what} all at once" if not slots else f"sent as {slots} slots freed"
    return f"{what} {row['achieved_rate']:.2f}/s"


def summary_table(rows: list[dict], title: str, slo: SLO, knee: float | None) -> Table:
    """One row per rate; `kept up` is the figure the saturation verdict rests on, `SLO met` the fraction of
    requests within the SLO (goodput is that fraction of the completions per second: summary.csv has it)."""
    cells = []
    reasoning = any("p99_ttfo_ms" in row for row in rows)
    for row in rows:
        rate = row["request_rate"]
        mark = " *" if knee is not None and rate == knee else ""
        verdict = ("target down" if row.get("target_down") else "saturated" if row.get("saturated") else
                   "backlog passed" if row.get("backlog_passed") else "interrupted" if row.get("interrupted") else
                   "client stalled" if row.get("client_stall_moved_slo") else
                   "window short" if row.get("window_short") else "")
        cells.append([f"{rate:g}{mark}" if isinstance(rate, int | float) else str(rate),
                      fmt_cell(row.get("kept_up"), "{:.0%}"),
                      fmt_cell(row.get("output_throughput"), "{:,.0f}"),
                      f"{row['median_ttft_ms']:.0f}/{row['p99_ttft_ms']:.0f}",
                      f"{row['median_tpot_ms']:.1f}/{row['p99_tpot_ms']:.1f}",
                      fmt_cell(row.get("slo_attainment"), "{:.1%}"), fmt_cell(row.get("failed"), "{:.0f}"), verdict])
        if reasoning:
            cells[-1].insert(4, f"{row['median_ttfo_ms']:.0f}/{row['p99_ttfo_ms']:.0f}" if "p99_ttfo_ms" in row else "-")
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)  # no vertical rules: fits 80 columns
    names = ("rate", "kept up", "out tok/s", "TTFT ms P50/P99", *(("TTFO ms P50/P99",) if reasoning else ()),
             "TPOT ms P50/P99", "SLO met", "failed", "verdict")
    for i, name in enumerate(names):  # neither values nor header words are cut; headers wrap instead
        width = max([len(c[i]) for c in cells] + [len(word) for word in name.split()])
        table.add_column(name, justify="left" if name == "verdict" else "right", min_width=width)
    for row, values in zip(rows, cells, strict=True):
        table.add_row(*values, style="red" if row.get("saturated") else None)
    spec = [r.get("spec_acceptance_rate") for r in rows if "spec_acceptance_rate" in r]
    extra = f"; speculative acceptance {', '.join(fmt_cell(a, '{:.2f}') for a in spec)}" if spec else ""
    table.caption = f"SLO: {slo.describe()} ({slo.source}); * the highest rate that met it{extra}"
    return table


def fmt_cell(value, fmt: str | None) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return fmt.format(value) if fmt else str(value)


def answer_line(cap: Capacity | None, slo: SLO, target_down_at: float | None = None,
                rows: list[dict] | None = None) -> str:
    """The answer; after a target that stopped answering, only from the rates measured before it, and never
    advice to sweep lower rates when the server, not the load, ended the sweep."""
    if target_down_at is not None:
        died = f"the target stopped answering at {target_down_at:g} req/s (that rate is not counted)"
        if cap is None or cap.rate is None:
            return f"{died}; no earlier rate met the SLO ({slo.describe()}): check the server, then sweep again"
        return f"{died}; before it: {cap.sentence(slo)}"
    if cap is None:
        return unpaced_sentence(rows or [], slo) or \
            "no finite rate was measured, so there is no per-replica answer (run `llmbench sweep --rate a..b`)"
    return cap.sentence(slo)
