"""The README's curl examples work as written (against a server on a free port)."""

import json
import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def curl_examples() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    return [b.replace("\\\n", " ") for b in blocks if b.lstrip().startswith("curl")]


def test_readme_curl_examples(tiny_model, serve_engine):
    from engine.llm import LLM

    examples = curl_examples()
    assert len(examples) == 3
    server = serve_engine(LLM(tiny_model, kv_cache_memory=32 * 2**20))
    outputs = []
    for cmd in examples:
        cmd = cmd.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    completion = json.loads(outputs[0])
    assert completion["usage"]["completion_tokens"] == 16 and completion["model"] == "llmbench-tiny"
    events = [line[6:] for line in outputs[1].splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["completion_tokens"] == 16
    assert "vllm:kv_cache_usage_perc" in outputs[2]
