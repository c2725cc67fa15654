"""The embedded default target: start the bundled engine's server as a subprocess, stop it after."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class TargetError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BundledEngine:
    """`python -m engine.server` on a free 127.0.0.1 port; a context manager that always stops it."""

    def __init__(self, model: str | None = None, flags: dict | None = None, log_path: Path | None = None,
                 startup_timeout: float = 600.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "engine.server", "--port", str(self.port), "--log-level", "warning"]
        if model:
            args += ["--model", model]
        for key, value in (flags or {}).items():
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            elif value is not None:
                args += [flag, str(value)]
        self.args, self.log_path, self.startup_timeout = args, log_path, startup_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> BundledEngine:
        log = self.log_path.open("w") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:] if self.log_path else ""
                raise TargetError(f"the bundled engine exited during start-up (code {self.proc.returncode}): {tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise TargetError(f"the bundled engine did not become healthy within {self.startup_timeout:.0f} s")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def model_dir(self) -> str:
        with urllib.request.urlopen(self.url + "/v1/models", timeout=10) as resp:
            return json.load(resp)["data"][0]["root"]
