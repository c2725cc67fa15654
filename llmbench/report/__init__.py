"""Self-contained HTML reports of one or more results folders."""

from llmbench.report.html import build_report

__all__ = ["build_report"]
