"""scripts/gpu_check.sh end to end on the CPU (--dry-run: Triton interpreter, tiny shapes and model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def test_gpu_check_dry_run(tiny_model, tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable, "LLMBENCH_HOME": os.environ["LLMBENCH_HOME"]}
    proc = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), str(out), "--dry-run"], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["kernels"]["passed"], report["kernels"]
    assert all(case["passed"] for case in report["kernels"]["cases"])
    for case in report["kernels"]["cases"]:  # judged at its own dtype's tolerance ("bfloat16" holds "float16")
        words = case["case"].split()
        dtype = next((w for w in words if w in TOLERANCE), "quantized" if "quantized" in words else "float32")
        assert case["tolerance"] == TOLERANCE[dtype], case
    assert report["attention_timing"]["rows"] and report["attention_timing"]["copy_bandwidth_GBps"] > 0
    tiny = report["engine_throughput"]["tiny"]
    assert tiny["rc"] == 0, tiny["tail"]
    assert {"engine continuous", "engine static (batch 4)", "transformers generate (batch 4)"} <= set(tiny["runs"])
    assert tiny["runs"]["engine continuous"]["output_tok_s"] > 0 and tiny["runs"]["engine continuous"]["busy"] > 0
    assert tiny["ratios"]["continuous / static 64"] > 0 and tiny["ratios"]["engine / transformers"] > 0
    assert report["sweep"]["rc"] == 0 and "rate-2" in report["sweep"]["summary"]
    assert all(report[name]["seconds"] <= budget for name, budget in BUDGETS.items())
    assert "kernels: PASS" in proc.stdout and "sweep: rc 0" in proc.stdout


from gpu_check import BUDGETS, TOLERANCE  # noqa: E402
