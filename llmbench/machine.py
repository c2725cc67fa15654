"""The machine a measurement was taken on: the same figure differs between CPU kinds (fp32 matmul ceilings of
122-421 GFLOP/s across this project's 2-core VMs, bf16 much faster only where AMX is), and a client shares the
CPU with a local server."""

from __future__ import annotations

import os
import platform
from pathlib import Path

ISA = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512f", "avx2")  # what sets a CPU's speed


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The machine a measurement was taken on: with the CPU's model and the vector/matrix extensions it has,
    because the same figure differs between CPU kinds (and the client shares the CPU with a local server)."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        lines = []
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines) if k.strip() in
             ("model name", "flags")}
    flags = set(field.get("flags", "").split())
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_model": field.get("model name"), "isa": [f for f in ISA if f in flags],
            "cpus": os.cpu_count(), "python": platform.python_version()}


def describe_machine(info: dict | None = None) -> str:
    info = info or machine()
    return (f"{info.get('cpu_model') or info['processor']}, {info['cpus']} CPUs, ISA "
            f"{', '.join(info.get('isa') or []) or 'unknown'}")
