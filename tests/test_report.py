"""The HTML report from a short real sweep, opened in headless Chromium; and the analysis notebook."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmbench.cli import main


def chromium() -> str | None:
    """Debian's chromium; installed here with apt-get when missing and we may (CI runs as root)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        subprocess.run(cmd, env=env, capture_output=True, timeout=900, check=False)
    return shutil.which("chromium")


CHROMIUM = chromium()
EVIL = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def sweep_dirs(tmp_path_factory, tiny_model):
    from conftest import ScriptedServer

    base = tmp_path_factory.mktemp("sweeps")
    folders = []
    for name, itl in (("fast", "2"), ("slow", "6")):
        server = ScriptedServer("--ttft-ms", "10", "--itl-ms", itl)
        try:
            out = base / name
            result = CliRunner().invoke(main, ["sweep", "--base-url", server.url, "--tokenizer", str(tiny_model),
                                               "--rate", "4,8", "--duration", "2", "--output-len", "12",
                                               "--out", str(out), "--no-progress", "--goodput", "ttft:30"],
                                        catch_exceptions=False)
            assert result.exit_code == 0, result.output
        finally:
            server.stop()
        folders.append(out)
    return folders


def test_sweep_writes_report(sweep_dirs):
    page = (sweep_dirs[0] / "report.html").read_text()
    assert "<svg" in page and "rate-4" in page and "rate-8" in page
    assert ">4/s<" in page and ">8/s<" in page  # each point of the throughput/latency plots says its rate
    assert "queueing has run away" not in page  # every request met the SLO: no alarm that says otherwise


def test_the_tail_is_flagged_only_where_it_matters():
    from llmbench.report.html import tail_warning

    long_tail = {"label": "rate-5", "median_ttft_ms": 12.0, "p99_ttft_ms": 179.0, "slo_attainment": 1.0}
    assert tail_warning(long_tail, {"ttft": 2000.0}) is None  # 15x the median, 9% of the bound, all met the SLO
    near = long_tail | {"p99_ttft_ms": 1500.0}
    assert "75% of the 2000 ms TTFT bound" in tail_warning(near, {"ttft": 2000.0})
    assert tail_warning(long_tail | {"slo_attainment": 0.9}, {"ttft": 2000.0}) is not None


def test_report_escapes_and_is_self_contained(sweep_dirs, tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", *map(str, sweep_dirs), "-o", str(out), "--title", EVIL])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert EVIL not in page and "&lt;script&gt;alert(" in page
    assert "http" not in page.replace("http://www.w3.org", "").replace("http://127.0.0.1", "")
    assert 'src="http' not in page and "<link" not in page and "<script" not in page
    assert "Ratios B: slow / A: fast" in page


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_report_in_headless_chromium(sweep_dirs, tmp_path):
    from playwright.sync_api import sync_playwright

    out = tmp_path / "report.html"
    CliRunner().invoke(main, ["report", *map(str, sweep_dirs), "-o", str(out)], catch_exceptions=False)
    errors, requests = [], []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
            viewport={"width": 1400, "height": 2000})
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(out.as_uri(), wait_until="load")
        for selector in ("#plot-curve svg", "#plot-percentiles svg", "#plot-tail svg", "table.summary",
                         "table.meta", ".plot-cdf svg", ".plot-lengths svg", ".plot-timeline svg", "table.comparison"):
            assert page.locator(selector).count() >= 1, selector
        assert page.locator("table.summary").count() == 2 and page.locator("td.bad").count() > 0
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        context.close()
    assert not errors, errors
    assert requests == [out.as_uri()], requests
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_notebook_runs(sweep_dirs):
    import nbformat
    from nbclient import NotebookClient

    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    os.environ["LLMBENCH_RESULTS"] = str(sweep_dirs[0])
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(notebook.parent)}}).execute()
    finally:
        del os.environ["LLMBENCH_RESULTS"]
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
