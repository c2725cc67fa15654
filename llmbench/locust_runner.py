"""`llmbench run --engine locust`: a headless Locust master and N local workers, records merged into one
results folder of the same form as the native client's (so report, plan and gate work unchanged).

Workers on other hosts join with `locust -f llmbench/locustfile.py --worker --master-host MASTER` plus the
same `--llm-*` options; `--expect-workers` on the master counts them all.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

from llmbench.records import RecordWriter, read_records
from llmbench.results import RunFiles, worker_metas, worker_records, worker_stalls
from llmbench.target import free_port

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"


def locust_args(base_url: str, opts: dict, records_dir: Path, workers: int) -> list[str]:
    args = ["--host", base_url, "--llm-dataset", opts["dataset"], "--llm-num-prompts", str(opts["num_prompts"]),
            "--llm-rate", str(0 if math.isinf(opts["rate"]) or opts.get("users") else opts["rate"]),
            "--llm-duration", str(opts.get("duration") or 0),
            "--llm-burstiness", str(opts.get("burstiness", 1.0)), "--llm-workers", str(workers),
            "--llm-backend", opts.get("backend", "openai"), "--llm-records", str(records_dir),
            "--llm-seed", str(opts.get("seed", 0)),
            "--llm-request-timeout", str(opts.get("request_timeout") or 600.0),
            "--llm-read-timeout", str(opts.get("read_timeout") or 0),
            "--llm-dataset-options", json.dumps(opts.get("dataset_options") or {})]
    for key, flag in (("model", "--llm-model"), ("tokenizer", "--llm-tokenizer"), ("dataset_path", "--llm-dataset-path")):
        if opts.get(key):
            args += [flag, str(opts[key])]
    if opts.get("ignore_eos"):
        args.append("--llm-ignore-eos")
    return args


def run_locust(base_url: str, opts: dict, workers: int, files: RunFiles, time_limit: float,
               users: int | None = None) -> tuple[list, dict[str, list], list[str], bool]:
    """Run master + workers; return the merged records, each worker's client stalls, notes (worker deaths,
    time limit) and whether a Ctrl-C ended the run early (the records up to then are kept)."""
    import importlib.util

    if importlib.util.find_spec("locust") is None:
        raise ValueError("the Locust transport needs Locust: pip install 'llmbench[locust]'")
    records_dir = files.locust_dir
    shutil.rmtree(records_dir, ignore_errors=True)
    records_dir.mkdir(parents=True)
    port = free_port()
    common = ["-f", str(LOCUSTFILE), *locust_args(base_url, opts, records_dir, workers)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    n_users = users or workers
    master_log = files.locust_log.open("w")  # noqa: SIM115 - closed below
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", *common, "--headless", "--master", "--master-bind-host", "127.0.0.1",
         "--master-bind-port", str(port), "--expect-workers", str(workers), "-u", str(n_users), "-r", str(n_users),
         "-t", f"{int(math.ceil(time_limit))}s", "--csv", str(files.locust_csv_prefix), "--only-summary"],
        stdout=master_log, stderr=subprocess.STDOUT, env=env)
    procs = [subprocess.Popen([sys.executable, "-m", "locust", *common, "--worker", "--master-host", "127.0.0.1",
                               "--master-port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=env) for _ in range(workers)]
    notes, interrupted = [], False
    try:
        master.wait(time_limit + 120)
    except subprocess.TimeoutExpired:
        notes.append("the Locust master did not finish in time and was stopped")
        master.terminate()
    except KeyboardInterrupt:
        interrupted = True
        master.terminate()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in [master, *procs]:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        master_log.close()
    log = files.locust_log.read_text(errors="replace")
    dead = log.count("failed to send heartbeat")
    if dead:
        notes.append(f"{dead} Locust worker(s) stopped answering mid-run; their records up to then are kept")
    records, stalls = merge(records_dir, files.records)
    return records, stalls, notes, interrupted


def merge(records_dir: Path, target: Path) -> tuple[list, dict[str, list]]:
    """All workers' records on one time base (the earliest worker start), written as one records file, and each
    worker's client stalls on that base while its requests ran."""
    metas = {meta["worker"]: meta for meta in worker_metas(records_dir)}
    if not metas:
        return [], {}
    origin = min(m["t0_wall"] for m in metas.values())
    merged, stalls = [], {}
    for name, meta in sorted(metas.items()):
        path = worker_records(records_dir, name)
        if not path.is_file():
            continue
        shift = meta["t0_wall"] - origin
        mine = read_records(path)
        for r in mine:
            r.scheduled += shift
            r.dispatched += shift
            r.start += shift
            r.end += shift
            r.chunk_times = [t + shift for t in r.chunk_times]
            merged.append(r)
        last = max((r.end for r in mine), default=shift)
        seen = [json.loads(line) for line in _lines(worker_stalls(records_dir, name))]
        stalls[name] = [(s + shift, e + shift) for s, e in seen if e > 0 and s + shift < last]
    merged.sort(key=lambda r: r.index)
    target.unlink(missing_ok=True)
    writer = RecordWriter(target)
    for r in merged:
        writer.write(r)
    writer.close()
    return merged, stalls


def _lines(path: Path) -> list[str]:
    """A file's complete lines (a worker killed mid-write leaves at most a partial last one)."""
    return [line for line in path.read_text().splitlines() if line.endswith("]")] if path.is_file() else []
