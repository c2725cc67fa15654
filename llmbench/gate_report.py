"""A gate's result as CI reads it: a Markdown summary (for a job summary or a pull-request comment) and JUnit XML."""

from __future__ import annotations

import math

from llmbench.gate import EXIT_INCONCLUSIVE, EXIT_REGRESSION, GateResult


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+.1f}%"


def markdown(result: GateResult, title: str = "llmbench gate") -> str:
    code = result.exit_code
    status = {EXIT_REGRESSION: "❌ regression", EXIT_INCONCLUSIVE: "⚠️ inconclusive"}.get(
        code, "✅ pass" if not result.inconclusive else "✅ pass (some metrics inconclusive)")
    lines = [f"## {title}: {status}", "", "| run | metric | baseline | current | change (+ = worse) | "
             "tolerance | CI of change | smallest detectable | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for c in result.checks:
        ci = f"[{_pct(c.ci[0])}, {_pct(c.ci[1])}]" if c.ci else c.method
        detect = f"{c.detectable * 100:.1f}%" if c.detectable is not None else "–"
        verdict = c.verdict + (f" (~{c.needed:,} requests per run would detect {c.tolerance:.0%})" if c.needed else
                               f" ({c.why})" if c.why else "")
        lines.append(f"| {c.label} | {c.metric} | {_num(c.baseline)} | {_num(c.current)} | {_pct(c.change)} | "
                     f"{c.tolerance * 100:.0f}% | {ci} | {detect} | {verdict} |")
    sized = sorted({c.metric for c in result.inconclusive if not c.why})
    stalled = sorted({c.metric for c in result.inconclusive if c.why})
    if sized:
        lines += ["", f"Inconclusive: at these run sizes a regression as large as the tolerance would not be "
                  f"significant for {', '.join(sized)}; measure more requests, widen the tolerance, or pass "
                  "--allow-inconclusive."]
    if stalled:
        lines += ["", f"Inconclusive: the load generator itself stalled (its loop blocked or its process starved "
                  f"of CPU) while requests were in flight, and {', '.join(stalled)} regress(es) only one way of "
                  "reading those requests; give the client its own cores and measure again."]
    if result.warnings:
        lines += ["", *[f"- ⚠️ {w}" for w in result.warnings]]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:,.2f}"


def junit(result: GateResult) -> str:
    from xml.sax.saxutils import quoteattr

    failures = sum(c.verdict == "regression" for c in result.checks)
    skipped = sum(c.verdict in ("missing", "inconclusive") for c in result.checks)
    cases = []
    for c in result.checks:
        name = quoteattr(f"{c.label}.{c.metric}")
        body = ""
        if c.verdict == "regression":
            body = f"<failure message={quoteattr(f'{c.metric} worse by {_pct(c.change)} (tolerance {c.tolerance:.0%})')}/>"
        elif c.verdict == "missing":
            body = "<skipped message=\"metric missing\"/>"
        elif c.verdict == "inconclusive":
            why = c.why or f"detects {c.detectable:.0%}, not {c.tolerance:.0%}"
            body = f"<skipped message={quoteattr(f'inconclusive: {why}')}/>"
        cases.append(f"  <testcase classname=\"llmbench.gate\" name={name}>{body}</testcase>")
    return (f"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<testsuite name=\"llmbench-gate\" "
            f"tests=\"{len(result.checks)}\" failures=\"{failures}\" skipped=\"{skipped}\">\n"
            + "\n".join(cases) + "\n</testsuite>\n")
