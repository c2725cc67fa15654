"""Shared fixtures: a private LLMBENCH_HOME with the bundled models built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HOME = Path(os.environ.get("LLMBENCH_TEST_HOME", "/tmp/llmbench-test-home"))
os.environ["LLMBENCH_HOME"] = str(_HOME)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # one worker a core: two workers of two OpenMP threads spin on each other
    os.environ["OMP_NUM_THREADS"] = "1"
if not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on the CPU, interpreted


SLOWEST_FILES = (  # seconds in a fresh clone on a 2-core AMD EPYC Zen 3 (108 GFLOP/s), two workers (--durations=0)
    "test_calibration.py",  # 173
    "test_quantization.py",  # 124
    "test_run_cli.py",  # 110
    "test_spec_decode.py",  # 93
    "test_plan_inputs.py",  # 138 there; about half alone since its notes are read off 200-request plans
    "test_saturation.py",  # 83
    "test_locust.py",  # 76
    "test_engine_gate.py",  # 74
    "test_gpu_check.py",  # 72
    "test_day_plan.py",  # 60
    "test_plan.py",  # 89 there, of it the §9 rows' 44, now read from the stored table
    "test_cpu_decode_kernel.py",  # 51 (the C++ kernels' first build)
    "test_plan_validation.py",  # 59 there; the stored-table test 93 -> 39 alone since
    "test_client_faults.py",  # 44
    "test_gate.py",  # 40
    "test_report.py",  # 39
    "test_foreign.py",  # 27
    "test_cuda_guards.py",  # 25
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first (seconds measured on a 2-core runner, in order): `--dist loadfile` hands files to
    the two workers in collection order, so a slow file collected late runs alone while the other worker idles.
    The sort is stable: every other file, and the tests within each file, keep their order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def benchmark_script():
    """A script under benchmarks/ as a module, by name (scripts, not a package: one may import another, as when
    run from that folder)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.append(str(folder))

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from bundled.modelbuild import build_model

    return build_model("tiny")


@pytest.fixture(scope="session")
def small_model() -> Path:
    from bundled.modelbuild import build_model

    return build_model("small")


@pytest.fixture(scope="session")
def hf_tiny(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()


class ThreadedApp:
    """An aiohttp app (its runner) on a free 127.0.0.1 port, in a background thread of this process."""

    def __init__(self, runner) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.runner = runner
        started = threading.Event()
        self.listener = None

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.port = self.loop.run_until_complete(self.open())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"

    async def open(self) -> int:
        from aiohttp import web

        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        import asyncio

        if self.listener is not None:
            self.loop.call_soon_threadsafe(self.listener.close)
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class InProcessServer(ThreadedApp):
    """The engine's aiohttp app on a free 127.0.0.1 port, in a background thread of this process."""

    def __init__(self, llm, max_connections: int = 1024, idle_timeout: float = 60.0, **app_kwargs) -> None:
        from engine.serve.server import STATE, app_runner, build_app

        self.app = build_app(llm, **app_kwargs)
        self.state = self.app[STATE]
        self.limits = max_connections, idle_timeout
        super().__init__(app_runner(self.app, idle_timeout))

    async def open(self) -> int:
        from engine.serve.connections import listen

        self.listener, self.state["guard"] = await listen(self.runner, "127.0.0.1", 0, *self.limits)
        return self.listener.sockets[0].getsockname()[1]


@pytest.fixture
def serve_engine():
    servers = []

    def start(llm, **kwargs) -> InProcessServer:
        server = InProcessServer(llm, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ScriptedServer(*args: str):  # noqa: N802 - kept as the tests' name for the process helper
    from llmbench.scripted_server import ScriptedProcess

    return ScriptedProcess(*args)


@pytest.fixture
def scripted():
    servers = []

    def start(*args: str) -> ScriptedServer:
        server = ScriptedServer(*args)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def stop_after_records(server, records, count: int, timeout: float = 60.0):
    """A started thread that stops `server` once `records` (a JSONL file) holds `count` lines: never on a
    timer, since start-up takes longer on a slow, loaded machine. Join it after the run."""
    import threading
    import time

    def watch() -> None:
        deadline = time.time() + timeout
        while time.time() < deadline and not (records.is_file() and len(records.read_text().splitlines()) >= count):
            time.sleep(0.05)
        server.stop()

    thread = threading.Thread(target=watch)
    thread.start()
    return thread
