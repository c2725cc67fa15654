"""scripts/gpu_check.sh end to end on the CPU (--dry-run: Triton interpreter, tiny shapes and model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tiny_model, tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable, "LLMBENCH_HOME": os.environ["LLMBENCH_HOME"]}
    proc = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), str(out), "--dry-run"], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["kernels"]["passed"], report["kernels"]
    assert report["attention_timing"]["rows"] and report["attention_timing"]["copy_bandwidth_GBps"] > 0
    assert report["engine_throughput"]["tiny"]["rc"] == 0 and report["engine_throughput"]["tiny"]["output_tok_s"] > 0
    assert report["sweep"]["rc"] == 0 and "rate-2" in report["sweep"]["summary"]
    assert "kernels: PASS" in proc.stdout and "sweep: rc 0" in proc.stdout
